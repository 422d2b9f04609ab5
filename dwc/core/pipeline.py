"""``--pipeline K|max|auto``, in one place: what the value may be and how it becomes a number of
register stages.

K stages (0: registered I/O around one combinational core); ``max``: every cut the graph has, for
the highest Fmax; ``auto``: the fewest stages that reach the requested clock on the target, found by
place and route (dwc compile and dwc build resolve it before the core is built). Every command
(compile, import, build, demo, sweeps) defaults to ``dwc.core.defaults.PIPELINE``, ``max``."""
from __future__ import annotations

MAX, AUTO = "max", "auto"


def parse_pipeline(value: int | str) -> int | str:
    """A number of stages (0 or more, as int or text), ``max`` or ``auto``; ValueError otherwise."""
    if value in (MAX, AUTO):
        return value
    try:
        stages = int(value)
    except (TypeError, ValueError):
        stages = -1
    if isinstance(value, bool) or stages < 0 or (isinstance(value, float) and value != stages):
        raise ValueError(f"expected a number of stages (0 or more), {MAX} or {AUTO}, got {value!r}")
    return stages


def resolve_stages(pipeline: int | str, max_stages: int) -> int:
    """The register stages to build: ``max`` is every cut (``max_stages``); ``auto`` must have been
    resolved by synthesis first."""
    pipeline = parse_pipeline(pipeline)
    if pipeline == AUTO:
        raise ValueError("pipeline 'auto' is resolved by place and route before the core is built")
    return max_stages if pipeline == MAX else pipeline
