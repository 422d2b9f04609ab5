"""The LUT-graph IR that every front end lowers into and every back end reads: the graph, its
validation, the optimisation passes and the executors (reference, fast, bit-sliced)."""
from dwc.ir.graph import LUT, SCHEMA_VERSION, Comparator, FixedFormat, Graph, IRError, Linear

__all__ = ["LUT", "SCHEMA_VERSION", "Comparator", "FixedFormat", "Graph", "IRError", "Linear"]
