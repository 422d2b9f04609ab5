"""The LUT-graph IR: data structure, freezing from PyTorch, executors."""
from .graph import LUT, SCHEMA_VERSION, Comparator, FixedFormat, Graph, IRError, Linear

__all__ = ["LUT", "SCHEMA_VERSION", "Comparator", "FixedFormat", "Graph", "IRError", "Linear"]
