"""Bit-sliced LUT code, shared by the fast executor (:mod:`dwc.backends.fast`) and the C header's batch
functions (:mod:`dwc.backends.c_header`): each LUT as straight-line C over words whose bit ``s`` is sample
``s``, its truth table decomposed into a multiplexer tree over its inputs (Shannon expansion) with
constant, literal and XOR leaves folded and repeated sub-functions shared."""
from __future__ import annotations

from dwc.ir.passes import cofactor, full


class LutCode:
    """C statements computing one LUT from its input expressions, sub-functions shared. ``word`` is the
    C type of a bit-sliced signal and ``zero`` / ``ones`` its all-0 / all-1 constants: the 256-lane
    vectors of the fast executor (:mod:`dwc.backends.fast`), one ``uint64_t`` of 64 lanes in the C header
    (:mod:`dwc.backends.c_header`)."""

    def __init__(self, prefix: str, word: str = "W", zero: str = "Z", ones: str = "O"):
        self.prefix, self.lines, self.memo = prefix, [], {}
        self.word, self.zero, self.ones = word, zero, ones

    def expr(self, table: int, arity: int, inputs: list[str]) -> str:
        if table == 0:
            return self.zero
        if table == full(arity):
            return self.ones
        key = (table, arity)
        if key in self.memo:
            return self.memo[key]
        k = arity - 1
        v = inputs[k]
        lo, hi = cofactor(table, arity, k, 0), cofactor(table, arity, k, 1)
        if lo == hi:
            return self.expr(lo, k, inputs)
        ones = full(k)
        if lo == 0 and hi == ones:
            e = v
        elif lo == ones and hi == 0:
            e = f"~{v}"
        elif hi == lo ^ ones:
            e = f"({v} ^ {self.expr(lo, k, inputs)})"
        elif lo == 0:
            e = f"({v} & {self.expr(hi, k, inputs)})"
        elif hi == 0:
            e = f"(~{v} & {self.expr(lo, k, inputs)})"
        elif hi == ones:
            e = f"({v} | {self.expr(lo, k, inputs)})"
        elif lo == ones:
            e = f"(~{v} | {self.expr(hi, k, inputs)})"
        else:
            e = f"(({v} & {self.expr(hi, k, inputs)}) | (~{v} & {self.expr(lo, k, inputs)}))"
        if len(e) > 12:  # name non-trivial sub-functions so repeats are computed once
            name = f"{self.prefix}_{len(self.memo)}"
            self.lines.append(f"{self.word} {name} = {e};")
            e = name
        self.memo[key] = e
        return e


CHUNK = 32  # LUTs per generated function: keeps each function small, so the C compiler stays fast
