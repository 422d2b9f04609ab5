"""``dwc build``'s options, every stage's, checked before the first stage starts: a value that the
compile or synth stage would refuse must not cost the hours of training before it."""
from __future__ import annotations

from pathlib import Path

from dwc.core.errors import OptionError


def check_build(env: str | None, from_run: Path | None, train_cfg, target: str, pipeline: int | str,
                episodes: int, freq: float | None) -> str:
    """Refuse (OptionError, one line) what a later stage would refuse; returns the task, resolved once
    (the run's, or ``env`` checked against it) and known to Gymnasium."""
    from dwc.core.config import load_config
    from dwc.fpga.devices import device_for, target_names

    if target != "none" and target not in target_names():
        raise OptionError("target", f" {target!r}: choose from {', '.join(target_names())} or none")
    if pipeline == "auto" and (target == "none" or not device_for(target).nextpnr):
        raise OptionError("pipeline", " auto measures Fmax by place and route: give an ECP5 or iCE40 target")
    if freq is not None and not freq > 0:
        raise OptionError("freq", f" {freq:g}: a clock must be > 0 MHz")
    if not (isinstance(episodes, int) and episodes >= 1):
        raise OptionError("episodes", f" {episodes}: expected a whole number >= 1")
    if from_run is not None:
        if not (Path(from_run) / "config.json").exists():
            raise OptionError("from_run", f" {from_run}: not a run or policy folder (no config.json)")
        cfg = load_config(from_run)
    else:
        cfg = train_cfg
    if env is not None and env != cfg.env:
        raise OptionError("env", f" {env}: the policy in {from_run} was trained on {cfg.env}")
    from dwc.train.envs import check_env_id
    task = check_env_id(cfg.env)  # a one-line error for an unknown task, before any stage
    actions = task.action_space.shape[0]
    task.close()
    if isinstance(pipeline, int):
        _check_stages(cfg, actions, target, pipeline)
    return cfg.env


def _check_stages(cfg, actions: int, target: str, pipeline: int) -> None:
    """--pipeline K against the most register stages a circuit of this shape takes (a LUT network: the
    standard cuts plus one per inner adder level of its popcounts, as dwc.rtl.core.max_pipeline counts
    them on the frozen graph; freezing only drops LUTs, so the trained shape bounds it)."""
    if cfg.actor.policy not in ("dwc", "gates"):
        return  # a quantised MLP's cuts depend on its linear layers: dwc compile checks them
    from dwc.core.targets import NATIVE_LUT_INPUTS, family_of
    from dwc.rtl.popcount import COMPRESSOR, compressor_for, tree_depth
    a = cfg.actor
    last = a.last_width or a.width
    if last < actions:
        raise OptionError("width", f" / --last-width: the last layer's {last} LUTs are fewer than the "
                                   f"{actions} actions of {cfg.env} (each action reads its own group of them)")
    family = family_of(target) or family_of(cfg.target)
    compressor = compressor_for(NATIVE_LUT_INPUTS[family]) if family else COMPRESSOR
    depth = tree_depth(last // actions, compressor)
    most = a.layers + 2 + max(0, depth - 1)
    if pipeline > most:
        raise OptionError("pipeline", f" {pipeline}: this circuit takes at most {most} register stages ({a.layers} "
                                      f"LUT layers, popcount trees {depth} adder levels deep); max gives them all")
