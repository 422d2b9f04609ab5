"""Reading a ``dwc compile`` output (BUILD: ``graph.json``, ``dwc_core.json``, ``dwc_core.v``), for
every stage after compile: verify, formal, synth, hil, board-sim, export."""
from __future__ import annotations

import json
from pathlib import Path

from dwc.core.errors import UserError
from dwc.ir import Graph


def load_build(build: Path) -> tuple[Graph, dict, Path]:
    """A ``dwc compile`` output: its graph, ``dwc_core.json`` ports and the path of ``dwc_core.v``
    (a one-line UserError when BUILD is not one). Every stage after compile reads a build this way."""
    build = Path(build)
    missing = [n for n in ("graph.json", "dwc_core.json", "dwc_core.v") if not (build / n).exists()]
    if missing:
        raise UserError(f"{build}: not a dwc compile output (missing {', '.join(missing)}); "
                        f"run: dwc compile RUN --out {build}")
    try:
        graph = Graph.load(build / "graph.json")
        ports = json.loads((build / "dwc_core.json").read_text())
    except (ValueError, KeyError) as e:
        raise UserError(f"{build}: {e}") from None
    return graph, ports, build / "dwc_core.v"
