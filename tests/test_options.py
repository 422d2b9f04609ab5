"""Each option's default is said once (dwc.core.defaults, TrainConfig): a command given no options calls its
library function with that function's own defaults, the functions that pass an option on agree on its
default, and every --help that states a default states the one in effect."""
import argparse
import importlib
import inspect
import re
import signal
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
POLICY = ROOT / "policies" / "inverted-pendulum-v5-gates"


class Called(Exception):
    """Raised by a stand-in for the library function: what the command passed it."""


def library(path: str):
    module, _, name = path.partition(":")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def defaults(path: str) -> dict:
    return {k: p.default for k, p in inspect.signature(library(path)).parameters.items()
            if p.default is not inspect.Parameter.empty}


@pytest.fixture(scope="module")
def core(tmp_path_factory):
    """A compiled build (a small random graph and its Verilog), for the commands that load one first."""
    from helpers import random_graph

    from dwc.flows.compile import emit_verilog
    out, graph = tmp_path_factory.mktemp("core"), random_graph(1)
    graph.save(out / "graph.json")
    emit_verilog(graph, out, 0)
    return out


# A command line with no option it need not have -> the library function it calls (module:name; where the
# command calls a wrapper, the function whose signature holds the defaults), and that wrapper's name.
CALLS = [
    ("compile {policy} --out {tmp}/o", "dwc.flows.compile:compile_run", None),
    ("import {tmp}/m.onnx --out {tmp}/o", "dwc.flows.compile:import_model", None),
    ("verify {core}", "dwc.sim.verify:verify", None),
    ("verify --formal {core}", "dwc.sim.formal:formal", None),
    ("synth {core} --target ecp5-25k", "dwc.fpga.synth:synth_build", None),
    ("hil {core} --sim", "dwc.sim.hil.host:hil", None),
    ("board-sim {core}", "dwc.sim.hil.board_sim:board_sim", None),
    ("build --from {policy} --out {tmp}/b", "dwc.flows.build:_build", "build"),
    ("demo --out {tmp}/d", "dwc.flows.build:_build", "build"),
    ("eval {policy}", "dwc.flows.evaluate:evaluate_into", None),
]
# What a command passes on purpose instead of the library's default: dwc synth without --freq places for
# the default clock without requiring it (freq_mhz None).
ON_PURPOSE = {("synth", "freq_mhz")}


@pytest.mark.parametrize("line, path, wrapper", CALLS, ids=[f"{c[0].split()[0]}-{c[1].split(':')[1]}" for c in CALLS])
def test_a_command_passes_the_library_defaults(line, path, wrapper, core, tmp_path, monkeypatch):
    """Every parameter with a default that the command passes when given no option gets that default:
    the command line and the library cannot disagree on one."""
    from dwc.cli import main
    argv = line.format(policy=POLICY, tmp=tmp_path, core=core).split()
    module, _, name = path.partition(":")
    fn, fn_defaults = library(path), defaults(path)  # before the stand-in takes its place

    def stand_in(*args, **kwargs):
        raise Called(inspect.signature(fn).bind(*args, **kwargs).arguments)
    monkeypatch.setattr(importlib.import_module(module), wrapper or name, stand_in)
    sigterm = signal.getsignal(signal.SIGTERM)  # dwc board-sim installs its own handler
    try:
        with pytest.raises(Called) as called:
            main(argv)
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    passed, compared = called.value.args[0], []
    for param, default in fn_defaults.items():
        if param not in passed or default is None or callable(default) or (argv[0], param) in ON_PURPOSE:
            continue
        value = list(passed[param]) if isinstance(default, (tuple, list)) else passed[param]
        want = list(default) if isinstance(default, (tuple, list)) else default
        assert value == want, f"dwc {argv[0]} passes {param}={passed[param]!r}; {path} defaults to {default!r}"
        compared.append(param)
    assert compared, line


# Functions that pass an option on, each naming the parameter that carries it: one default among them.
CHAINS = [
    [f"{f}:obs_width" for f in ("dwc.flows.compile:freeze_run", "dwc.flows.compile:compile_run",
                                "dwc.flows.compile:import_model", "dwc.frontends.freeze:freeze",
                                "dwc.frontends.freeze:freeze_qmlp", "dwc.frontends.onnx_import:import_onnx")]
    + ["dwc.frontends.freeze:obs_formats:width"],
    [f"{f}:act_width" for f in ("dwc.flows.compile:freeze_run", "dwc.flows.compile:compile_run",
                                "dwc.flows.compile:import_model", "dwc.frontends.freeze:freeze",
                                "dwc.frontends.freeze:freeze_qmlp", "dwc.frontends.onnx_import:import_onnx")]
    + ["dwc.frontends.freeze:action_format:width"],
    ["dwc.flows.compile:compile_run:pipeline", "dwc.flows.compile:import_model:pipeline",
     "dwc.flows.build:_build:pipeline"],
    [f"{f}:comparators" for f in ("dwc.flows.compile:compile_run", "dwc.flows.compile:emit_verilog",
                                  "dwc.flows.compile:choose_pipeline", "dwc.rtl.core:DWCCore.__init__")],
    ["dwc.rtl.core:DWCCore.__init__:table_bits", "dwc.rtl.linear:LinearStage.__init__:table_bits"],
    ["dwc.fpga.synth:synth:seed", "dwc.fpga.synth:synth_build:seed"],
    ["dwc.fpga.synth:synth:energy_steps", "dwc.fpga.synth:synth_build:energy_steps",
     "dwc.fpga.energy:build_activity:steps"],
    ["dwc.fpga.synth:synth:route_budget_s", "dwc.fpga.synth:synth_build:route_budget_s",
     "dwc.fpga.boards:build_board:route_budget_s"],
    ["dwc.sim.verify:verify:episodes", "dwc.flows.build:_build:episodes"],
    ["dwc.sim.hil.host:hil:baud", "dwc.sim.hil.board_sim:board_sim:baud", "dwc.fpga.boards:build_board:baud"],
    ["dwc.sim.hil.host:hil:timeout_s", "dwc.sim.hil.host:run_serial:timeout_s"],
    ["dwc.sim.hil.host:hil:reconnect_s", "dwc.sim.hil.host:run_serial:reconnect_s"],
    ["dwc.flows.evaluate:evaluate_run:device", "dwc.flows.evaluate:evaluate_into:device"],
]


@pytest.mark.parametrize("chain", CHAINS, ids=[c[0].rsplit(":", 1)[1] for c in CHAINS])
def test_one_default_along_each_chain(chain):
    found = {link: defaults(link.rsplit(":", 1)[0])[link.rsplit(":", 1)[1]] for link in chain}
    assert len(set(found.values())) == 1, found


def _subparsers() -> dict:
    from dwc.cli.app import _parser_and_commands
    return _parser_and_commands()[1]


def _help(parser, action) -> str:
    """The option's help as --help prints it (%(default)s filled in), on one line."""
    return " ".join(argparse.HelpFormatter(parser.prog)._expand_help(action).split())


def _texts(value) -> set[str]:
    """How a help may write a default: 100.0 as 100 or 100.0, 3e-4 as 3e-4."""
    from dwc.cli.train_options import shown
    out = {str(value), shown(value)}
    if isinstance(value, float):
        out.add(f"{value:g}")
    return out


def test_each_help_states_the_default_in_effect():
    """A help's "(default X" is the option's default, or for a training option (parsed as None)
    TrainConfig's: a literal left behind after a default changed fails here."""
    from dwc.core.config import OPTIONS, TrainConfig, option_value
    checked = 0
    for name, parser in _subparsers().items():
        for a in parser._actions:
            if not a.help or a.help == argparse.SUPPRESS:
                continue
            stated = re.findall(r"\(default ([^\s;,)]+)", _help(parser, a))
            if not stated:
                continue
            value = option_value(TrainConfig(), a.dest) if a.default is None and a.dest in OPTIONS else a.default
            if value is None:  # the library's default, stated in words or checked below
                continue
            assert stated[0].rstrip(":") in _texts(value), (name, a.option_strings, stated[0], value)
            checked += 1
    assert checked > 60, checked


# Options parsed as None (the library or the command decides) whose help states the library's default.
STATED = [
    ("synth", "baud", "dwc.fpga.boards:build_board:baud"),
    ("synth", "freq", "dwc.fpga.synth:synth_build:freq_mhz"),
    ("compile", "table_bits", "dwc.rtl.core:DWCCore.__init__:table_bits"),
    ("import", "table_bits", "dwc.rtl.core:DWCCore.__init__:table_bits"),
    ("build", "eval_episodes", "dwc.core.config:TrainConfig:eval_episodes"),
    ("train", "eval_episodes", "dwc.core.config:TrainConfig:eval_episodes"),
    ("eval", "episodes", "dwc.core.config:TrainConfig:eval_episodes"),
    ("build", "episodes", "dwc.sim.verify:verify:episodes"),
    ("hil", "episodes", "dwc.sim.hil.host:hil:episodes"),
]


@pytest.mark.parametrize("command, dest, link", STATED, ids=[f"{c}-{d}" for c, d, _ in STATED])
def test_a_help_states_the_library_default(command, dest, link):
    parser = _subparsers()[command]
    action = next(a for a in parser._actions if a.dest == dest)
    value = defaults(link.rsplit(":", 1)[0])[link.rsplit(":", 1)[1]]
    words = set(re.findall(r"[\w.+-]+", _help(parser, action)))
    assert _texts(value) & words, (command, dest, value, _help(parser, action))


def test_the_training_options_leave_their_defaults_to_trainconfig():
    """dwc train and build parse a training option not given as None, so TrainConfig's default applies (and
    a run's config records only what was asked), and their help states TrainConfig's."""
    from dwc.cli.train_options import DEFAULT, shown
    from dwc.core.config import OPTIONS
    assert (shown(3e-4), shown(1e-8), shown(1.0), shown(100_000)) == ("3e-4", "1e-8", "1.0", "100000")
    for command in ("train", "build"):
        parser = _subparsers()[command]
        training = [a for a in parser._actions if a.dest in OPTIONS]
        assert sorted(a.dest for a in training) == sorted(OPTIONS), command
        for a in training:
            assert a.default is None, (command, a.dest)
            said = re.findall(r"\(default ([^\s;,)]+)", _help(parser, a))
            assert said[:1] in ([], [DEFAULT[a.dest]], [DEFAULT[a.dest] + ":"]), (command, a.dest, said)


# Each episodes count by what runs the episodes: one default wherever the name appears (dwc.core.defaults)
EPISODES = {"--eval-episodes": ("EVAL_EPISODES", {"train", "eval", "build"}),
            "--verify-episodes": ("VERIFY_EPISODES", {"verify", "build"}),
            "--board-episodes": ("BOARD_EPISODES", {"hil"})}


@pytest.mark.parametrize("flag", EPISODES)
def test_each_episodes_name_has_one_default(flag):
    """The default in effect (TrainConfig's where the option is parsed as None) is the one constant, in every
    command that takes the name (dwc demo passes it on: test_a_command_passes_the_library_defaults); --episodes
    is only an old name."""
    from dwc.core import defaults
    from dwc.core.config import TrainConfig
    constant, commands = EPISODES[flag]
    want = getattr(defaults, constant)
    found = {}
    for name, parser in _subparsers().items():
        for a in parser._actions:
            if flag in a.option_strings:
                assert a.option_strings[0] == flag and set(a.option_strings) <= {flag, "--episodes"}, (name, a)
                found[name] = TrainConfig().eval_episodes if a.default is None else a.default
    assert set(found) == commands and set(found.values()) == {want}, found
    assert {"EVAL_EPISODES": 10, "VERIFY_EPISODES": 3, "BOARD_EPISODES": 1}[constant] == want


@pytest.mark.parametrize("command", ["eval", "verify", "hil"])
def test_a_seed_help_states_the_evaluation_offset(command):
    """Episodes start at the training seed + EVAL_SEED_OFFSET unless --seed says otherwise (dwc.core.config)."""
    from dwc.core.config import EVAL_SEED_OFFSET
    parser = _subparsers()[command]
    action = next(a for a in parser._actions if a.dest == "seed")
    assert f"seed + {EVAL_SEED_OFFSET})" in _help(parser, action)
