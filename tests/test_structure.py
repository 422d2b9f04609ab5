"""The code's shape: dependencies run one way (the layers of pyproject.toml's import-linter contract
hold, and no import cycle among dwc's modules, lazy imports included), the CLI answers --help
without importing torch, and
its commands share their defaults and option names."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
# the installed package's layout (pyproject.toml): rtl/, sim/, fpga/ ship as dwc.rtl, dwc.sim, dwc.fpga
PACKAGES = {"dwc": ROOT / "dwc", "dwc.rtl": ROOT / "rtl", "dwc.sim": ROOT / "sim", "dwc.fpga": ROOT / "fpga"}


def modules() -> dict[str, Path]:
    out = {}
    for pkg, folder in PACKAGES.items():
        for f in folder.rglob("*.py"):
            parts = list(f.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([pkg, *parts])] = f
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the dwc modules it imports anywhere in its body (a function-level import is a
    dependency too: it only postpones the cycle)."""
    mods, graph = modules(), {}
    for name, f in mods.items():
        package = name if f.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + [node.module] if node.module else base) if node.level else node.module
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    deps.add(sub if sub in mods else target)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, if any (depth-first search with colours)."""
    state, stack = {}, []

    def visit(v):
        state[v] = "open"
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == "open":
                return stack[stack.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        stack.pop()
        state[v] = "done"

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return None


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 40 and graph["dwc.cli"]  # the walk found the package and its imports
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the check can fail
    assert cycle(graph) is None, " -> ".join(cycle(graph))


def _installed_layout(dest: Path) -> Path:
    """The package as a wheel installs it (rtl/, sim/, fpga/ inside dwc/), which import-linter's
    graph builder needs: it walks the package's folder and cannot follow pyproject's package-dir."""
    import shutil
    ignore = shutil.ignore_patterns("__pycache__", "*.so")
    shutil.copytree(ROOT / "dwc", dest / "dwc", ignore=ignore)
    for folder in ("rtl", "sim", "fpga"):
        shutil.copytree(ROOT / folder, dest / "dwc" / folder, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", dest)
    return dest


def lint_imports(layout: Path) -> subprocess.CompletedProcess:
    lint = Path(sys.executable).parent / "lint-imports"
    env = {**__import__("os").environ, "PYTHONPATH": str(layout)}
    return subprocess.run([str(lint), "--no-cache"], cwd=layout, env=env, capture_output=True, text=True, timeout=300)


def test_layers_hold(tmp_path):
    """pyproject.toml's import-linter contract: each layer imports only those below it."""
    res = lint_imports(_installed_layout(tmp_path))
    assert res.returncode == 0 and "1 kept, 0 broken" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]


def test_a_back_edge_breaks_the_layers(tmp_path):
    """The check can fail: the IR importing training code (even inside a function) is refused."""
    layout = _installed_layout(tmp_path)
    (layout / "dwc" / "ir" / "back_edge.py").write_text("def f():\n    from dwc.train import sac\n")
    res = lint_imports(layout)
    assert res.returncode != 0 and "dwc.ir.back_edge -> dwc.train.sac" in res.stdout, res.stdout[-3000:]


def test_help_answers_without_torch():
    code = ("import sys\nfrom dwc.cli import main\n"
            "for argv in (['--help'], ['train', '--help'], ['build', '--help'], ['sweep', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "heavy = [m for m in ('torch', 'rliable', 'gymnasium', 'mujoco', 'ray') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "HEAVY []" in res.stdout, res.stdout[-500:] + res.stderr[-500:]


def test_a_mistake_is_answered_before_torch_loads(tmp_path):
    """Wrong paths and options fail in well under a second: the check comes before the heavy imports."""
    code = ("import sys\nfrom dwc.cli import main\n"
            f"codes = [main(['eval', '{tmp_path}/missing']), main(['compile', '{tmp_path}/missing', '--out', "
            f"'{tmp_path}/b']), main(['train', '--thermo-bits', '8', '--out', '{tmp_path}/r'])]\n"
            "print('CODES', codes, 'TORCH', 'torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "CODES [2, 2, 2] TORCH False" in res.stdout, res.stdout + res.stderr
    assert res.stderr.count("does not exist") == 2 and "--thermo-bits must be odd" in res.stderr


def _subparsers():
    import argparse

    from dwc.cli import build_parser
    return next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices


def _default(sub, dest):
    return next(a.default for a in _subparsers()[sub]._actions if a.dest == dest)


def test_one_default_clock_everywhere():
    """compile --pipeline auto, build, synth, demo and sweeps request the same clock unless told (dwc
    synth and dwc build place for it without requiring it when no --freq is given: tests/test_synth.py)."""
    import inspect

    import dwc.flows.build
    from dwc.flows.build import _build as build
    from dwc.cli import main
    from dwc.flows.compile import compile_run
    from dwc.core.defaults import DEFAULT_FREQ_MHZ
    from dwc.core.errors import UserError
    from dwc.fpga.synth import synth, synth_build
    from dwc.flows.sweep_spec import HARDWARE_KEYS
    assert _default("compile", "freq") == DEFAULT_FREQ_MHZ
    assert _default("synth", "freq") is None and _default("build", "freq") is None
    assert inspect.signature(build).parameters["freq"].default is None
    defaults = {inspect.signature(f).parameters[p].default
                for f, p in ((compile_run, "freq"), (synth, "freq_mhz"), (synth_build, "freq_mhz"))}
    assert defaults == {HARDWARE_KEYS["freq"]} == {DEFAULT_FREQ_MHZ}
    asked = []

    def build_stub(out, env, policy, cfg, target, pipeline, episodes, freq, **kw):  # what dwc demo asks of dwc build
        asked.append(freq)
        raise UserError("stub")
    import pytest
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dwc.flows.build, "build", build_stub)
        assert main(["demo", "--out", "unused"]) == 2
    assert asked == [None]  # placed for DEFAULT_FREQ_MHZ, as dwc build without --freq


# Episodes are named by what runs them: the trained policy in software, the circuit in simulation, the board.
EPISODES = {"--eval-episodes": {"train", "eval", "build"}, "--verify-episodes": {"verify", "build"},
            "--board-episodes": {"hil"}}


def test_episodes_are_named_by_what_runs_them():
    """Each command that runs episodes counts them by one of three names, each with one meaning; the old
    --episodes is an alias only (tests/test_cli_errors.py: it still works and names the new one)."""
    for name, parser in _subparsers().items():
        flags = {f for a in parser._actions for f in a.option_strings}
        assert {f for f in EPISODES if f in flags} == {f for f, cmds in EPISODES.items() if name in cmds}, name
        for a in parser._actions:
            if "--episodes" in a.option_strings:
                assert a.option_strings[0] in EPISODES, (name, a.option_strings)


@pytest.mark.parametrize("value", ["0", "-3", "two"])
def test_a_count_below_one_is_refused_as_the_command_line_is_read(value, capsys):
    """Every episodes count: one line naming the option, before any work (a build would train first)."""
    from dwc.cli import main
    for flag, names in EPISODES.items():
        for name in names:
            try:
                code = main([name, flag, value])
            except SystemExit as e:  # argparse's own exit, as on the command line
                code = e.code
            assert code == 2, name
            err = capsys.readouterr().err.strip().splitlines()[-1]
            assert flag in err and "expected a whole number >= 1" in err, (name, err)


def test_a_mistyped_option_is_named_with_the_closest_one(capsys):
    from dwc.cli import main
    assert main(["train", "--widht", "3", "--out", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "dwc train: error: unknown option --widht (did you mean --width?) (dwc train --help lists the options)"
    assert main(["synth", "b", "--tagret=ecp5"]) == 2
    assert "--tagret (did you mean --target?)" in capsys.readouterr().err


def test_one_table_of_fpga_families():
    """dwc.core.targets names each family's LUT size and devices; fpga/devices.py's TARGETS says how to build
    each device: the two agree, device by device."""
    from dwc.fpga.devices import FAMILY_DEVICES, TARGETS, target_names
    from dwc.core.targets import FAMILIES, family_of, smallest_device
    assert {d for f in FAMILIES.values() for d in f.devices} == set(TARGETS)
    for name, fam in FAMILIES.items():
        for d in fam.devices:
            assert TARGETS[d].family == name and family_of(d) == name
            assert bool(TARGETS[d].nextpnr) == fam.placed
        assert smallest_device(name) == fam.devices[0]
    assert set(target_names()) == set(TARGETS) | set(FAMILY_DEVICES) and family_of("ecp5-99k") is None


def test_one_meaning_of_pipeline():
    """--pipeline K|max|auto is read and resolved in dwc.core.pipeline only; every command defaults to
    dwc.core.defaults.PIPELINE, the highest clock (compile, import, build, demo and sweeps alike)."""
    from dwc.core.defaults import PIPELINE
    from dwc.core.pipeline import MAX, parse_pipeline, resolve_stages
    from dwc.flows.sweep_spec import HARDWARE_KEYS
    assert [parse_pipeline(v) for v in (0, "3", "max", "auto")] == [0, 3, "max", "auto"]
    for bad in (-1, "-2", "fast", 1.5, True, None):
        with pytest.raises(ValueError, match="number of stages"):
            parse_pipeline(bad)
    assert resolve_stages("max", 7) == 7 and resolve_stages(2, 7) == 2
    with pytest.raises(ValueError, match="place and route"):
        resolve_stages("auto", 7)
    assert PIPELINE == MAX == HARDWARE_KEYS["pipeline"]
    assert [_default(c, "pipeline") for c in ("compile", "import", "build")] == [PIPELINE] * 3


def test_a_bad_option_is_named_by_python_and_by_the_command_line(tmp_path, capsys):
    """Library errors name the parameter as Python calls it; the CLI says the same with its flag."""
    from dwc.cli import main
    from dwc.core.errors import OptionError
    from dwc.core.seeds import parse_seeds
    with pytest.raises(OptionError) as e:
        parse_seeds("5-1")
    assert e.value.option == "seeds" and str(e.value) == "seeds '5-1': the range 5-1 runs backwards"
    assert main(["train", "--seeds", "5-1", "--out", str(tmp_path / "r")]) == 2
    assert "dwc train: error: --seeds '5-1': the range 5-1 runs backwards" in capsys.readouterr().err
    # where the flag is spelled differently from the parameter, the flag of that destination is named
    from dwc.cli.app import _flagged, _parser_and_commands
    build = _parser_and_commands()[1]["build"]
    assert _flagged(build, OptionError("episodes", " 0: too few")) == "--verify-episodes 0: too few"
    assert _flagged(build, OptionError("obs_width", " 3: too narrow")) == "--obs-width 3: too narrow"
    # a build's target, and formal's timeout, which dwc verify calls --formal-timeout (its destination)
    from dwc.flows.build import build as build_flow
    from dwc.sim.formal import formal
    policy = str(ROOT / "policies" / "inverted-pendulum-v5-gates")
    with pytest.raises(OptionError) as e:
        build_flow(tmp_path / "b", None, policy, None, "vu9p")
    assert e.value.option == "target" and str(e.value).startswith("target 'vu9p': choose from ")
    assert main(["build", "--from", policy, "--target", "vu9p", "--out", str(tmp_path / "b")]) == 2
    assert "dwc build: error: --target 'vu9p': choose from " in capsys.readouterr().err
    from dwc.flows.compile import emit_verilog
    from helpers import random_graph
    core, graph = tmp_path / "c", random_graph(1)
    core.mkdir()
    graph.save(core / "graph.json")
    emit_verilog(graph, core, 0)
    with pytest.raises(OptionError) as e:
        formal(core, timeout=0)
    assert str(e.value) == "timeout must be > 0 seconds, got 0"
    assert main(["verify", "--formal", str(core), "--formal-timeout", "0"]) == 2
    assert "dwc verify: error: --formal-timeout must be > 0 seconds, got 0" in capsys.readouterr().err
