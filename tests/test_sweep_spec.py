"""A dwc sweep spec: its lists expanded into runs, configs given some of the tasks, the specs shipped in
configs/ and docs/, its errors as one line, and the dwc train command that equals each of its runs."""
from pathlib import Path

import pytest

from dwc.cli import build_parser, main
from dwc.core.config import train_command
from dwc.core.errors import UserError
from dwc.flows.sweep_spec import load_spec
from helpers import write_spec


def test_spec_expands_lists_and_shares_options(tmp_path):
    spec = load_spec(write_spec(tmp_path / "s.yaml", """
tasks: [InvertedPendulum-v5, InvertedDoublePendulum-v5]
seeds: 3
steps: 2000
options: {learning-starts: 100, algo: sac}
configs:
  dwc: {policy: dwc, width: [32, 64], lut_inputs: [4, 6]}
  float-mlp: {policy: mlp, learning_starts: 50}
hardware: {target: none, episodes: 1}
"""))
    assert spec.seeds == [1, 2, 3]
    assert list(spec.configs) == ["dwc-width32-lut-inputs4", "dwc-width32-lut-inputs6", "dwc-width64-lut-inputs4",
                                  "dwc-width64-lut-inputs6", "float-mlp"]
    jobs = spec.jobs(tmp_path / "out")
    assert len(jobs) == 2 * 5 * 3 and len({j.id for j in jobs}) == len(jobs)
    j = next(j for j in jobs if j.id == "InvertedDoublePendulum-v5/dwc-width64-lut-inputs4/seed2")
    assert (j.cfg.env, j.cfg.seed, j.cfg.steps, j.cfg.actor.width, j.cfg.actor.lut_inputs, j.cfg.sac.learning_starts) \
        == ("InvertedDoublePendulum-v5", 2, 2000, 64, 4, 100)
    assert j.hardware["target"] == "none" and j.dir == tmp_path / "out/runs/InvertedDoublePendulum-v5/dwc-width64-lut-inputs4/seed2"
    mlp = next(j for j in jobs if j.config == "float-mlp")  # names keep their dashes
    assert mlp.cfg.sac.learning_starts == 50 and mlp.hardware is None  # a config overrides shared options; no circuit
    # a run's identity ignores where it runs, not what it computes
    key = j.key
    j.cfg.device, j.cfg.threads = "cuda", 4
    assert j.key == key
    j.cfg.steps = 3000
    assert j.key != key


def test_a_config_can_run_on_some_tasks_only(tmp_path):
    """A config's tasks: a subset of the spec's; its runs exist on those tasks only, and --scale-down
    keeps the intersection."""
    text = """
tasks: [InvertedPendulum-v5, InvertedDoublePendulum-v5]
seeds: 2
steps: 6000
configs:
  mlp: {policy: mlp}
  dwc-b15: {policy: dwc, width: 32, thermo_bits: 15, tasks: [InvertedDoublePendulum-v5]}
scale_down: {tasks: [InvertedPendulum-v5]}
"""
    spec = load_spec(write_spec(tmp_path / "s.yaml", text))
    ids = sorted(j.id for j in spec.jobs(tmp_path / "out"))
    assert ids == sorted([f"{t}/mlp/seed{s}" for t in spec.tasks for s in (1, 2)]
                         + [f"InvertedDoublePendulum-v5/dwc-b15/seed{s}" for s in (1, 2)])
    assert all(j.cfg.actor.thermo_bits == 15 for j in spec.jobs(tmp_path / "out") if j.config == "dwc-b15")
    down = load_spec(tmp_path / "s.yaml", scale_down=True)
    assert [j.id for j in down.jobs(tmp_path / "out")] == ["InvertedPendulum-v5/mlp/seed1", "InvertedPendulum-v5/mlp/seed2"]
    # scaled down to tasks that no config is given: no runs, said in one line
    write_spec(tmp_path / "s.yaml", text.replace("  mlp: {policy: mlp}\n", ""))
    with pytest.raises(UserError, match="no runs: no config is given any of the tasks InvertedPendulum-v5"):
        load_spec(tmp_path / "s.yaml", scale_down=True)


def test_shipped_specs_load(tmp_path):
    """Every spec shipped in configs/ and docs/ loads, full and scaled down, into distinct runs."""
    root = Path(__file__).resolve().parents[1]
    specs = sorted(root.glob("configs/*.yaml")) + sorted(root.glob("docs/*/spec.yaml"))
    assert len(specs) >= 4
    for path in specs:
        for down in (False, True):
            if down and "scale_down" not in path.read_text():
                continue
            jobs = load_spec(path, scale_down=down).jobs(tmp_path)
            assert jobs and len({j.id for j in jobs}) == len(jobs), path


@pytest.mark.parametrize("text, message", [
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {widht: 3}}", "unknown option in .*config a: 'widht'"),
    ("tasks: [NoSuchEnv-v0]\nseeds: 1\nconfigs: {a: {}}", "NoSuchEnv-v0"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 0\nconfigs: {a: {}}", "seeds"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {width: big}}", "expected int"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {thermo_bits: 8}}", "odd"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a/b: {}}", "config name"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {}}\nhardware: {target: zynq}", "target"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {}}\nresources: {gpus: 1}", "unknown"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\noptions: {seed: 3}\nconfigs: {a: {}}", "seed"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1", "missing 'configs'"),
    ("tasks: [a\n", r"not valid YAML \(line 2, column 1\)"),
    ("tasks: [InvertedPendulum-v5]\nseeds: 1\nconfigs: {a: {tasks: [Hopper-v5]}}", "tasks Hopper-v5 not in the spec's tasks"),
])
def test_spec_errors_are_one_line(tmp_path, capsys, text, message):
    spec = write_spec(tmp_path / "s.yaml", text)
    with pytest.raises(UserError, match=message):
        load_spec(spec)
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dwc sweep: error:") and "\n" not in err and "Traceback" not in err


def test_recorded_command_rebuilds_the_same_config(tmp_path):
    """commands.txt of a sweep run holds a dwc train command that trains exactly that run."""
    from dwc.cli.train import train_config
    spec = load_spec(write_spec(tmp_path / "s.yaml", """
tasks: [Hopper-v5]
seeds: [7]
steps: 1234
configs: {q: {policy: qmlp, fan_in: 3, weight_bits: 3, actor_lr: 0.001, cuda_graphs: false, algo: ppo}}
"""))
    job = spec.jobs(tmp_path)[0]
    words = train_command(job.cfg, tmp_path / "run")
    args = build_parser().parse_args(words[1:])
    assert train_config(args).to_dict() == job.cfg.to_dict()
