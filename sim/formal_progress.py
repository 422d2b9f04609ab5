"""Progress of ``dwc verify --formal`` for people, read from yosys's log as it is written: which lemma
(or netlist step) runs, what the solver is doing (the induction length it tries, with the length the
lemma is expected to need and the most it may try; the size of each SAT problem), a line at least every
30 s while one goes on (:class:`dwc.core.tools.Stage`), and each one's end with its outcome and seconds::

    [reference] lemma 5/14 adder level 1: induction length 2 (expected 2, at most 16), base case 2:
    145,685 variables ... 12 s
    [reference] lemma 5/14 adder level 1: proved, 24 s
"""
from __future__ import annotations

import re

from dwc.core.tools import Stage
from dwc.sim.formal_report import STAMP

_MARK = re.compile(r"DWC-STAGE (\S+)")
_LENGTH = re.compile(r"\*\* Trying induction with length (\d+) \*\*")
_SOLVE = re.compile(r"\[(base case|induction step) (\d+)\] Solving problem with (\d+) variables")
_FRAME = re.compile(r"^Solving problem with (\d+) variables")  # one frame (formal._sat_frame)
_EQUIV = re.compile(r"(Proving existence of base case|Proving induction step) (?:for step )?(\d+)\. "
                    r"\(\d+ clauses over (\d+) variables\)")
_PASS = re.compile(r"\d+\. Executing (\S+) pass")
_ENDS = (("Induction step proven: SUCCESS!", "proved"), ("model found for base case: FAIL!", "counterexample"),
         ("SAT proof finished - no model found: SUCCESS!", "proved"),
         ("SAT proof finished - model found: FAIL!", "counterexample"),
         ("Equivalence successfully proven!", "proved"))


class _Step(Stage):
    """A :class:`Stage` whose phase is the solver's state, read from its lines, and whose last line
    says how the step ended."""

    def __init__(self, log, prefix: str, what: str, expect: int | None, most: int):
        self.expect, self.most, self.length, self.outcome = expect, most, None, None
        super().__init__(log, prefix, what)

    def line(self, text: str) -> None:
        phase = None
        if m := _LENGTH.search(text):
            self.length = int(m.group(1))
            phase = self._induction()
        elif m := _SOLVE.search(text):
            phase = f"{self._induction()}, {m.group(1)} {m.group(2)}: {int(m.group(3)):,} variables"
        elif m := _FRAME.search(STAMP.sub("", text)):
            phase = f"one frame: {int(m.group(1)):,} variables"
        elif m := _EQUIV.search(text):
            phase = f"{m.group(1).lower()} {m.group(2)}: {int(m.group(3)):,} variables"
        elif m := _PASS.search(text):
            phase = "solving" if m.group(1) in ("SAT", "EQUIV_INDUCT") else "preparing the designs"
        for needle, word in _ENDS:
            if needle in text:
                self.outcome = word
        if phase and phase != self.phase:
            self.phase = phase
            if self._clock() - self._last >= 3.0:  # a quick lemma's phases flash by; the heartbeat names them
                self._say("...")

    def _induction(self) -> str:
        bound = f"at most {self.most}" if self.expect is None else f"expected {self.expect}, at most {self.most}"
        return f"induction length {self.length} ({bound})"

    def end(self, word: str | None = None) -> None:
        self._stop.set()
        with self._lock:
            self.log(f"{self.prefix} {self.what}: {word or self.outcome or 'done'}, {self._clock() - self.t0:.0f} s")


class SolverProgress:
    """Feed it yosys's log lines (``line``); steps start at the ``log DWC-STAGE <k>`` markers.
    ``steps``: per marker ``k`` (its text), the step's name and the induction length expected (or None)."""

    def __init__(self, log, prefix: str, steps: dict[str, tuple[str, int | None]], most: int):
        self.log, self.prefix, self.steps, self.most = log, prefix, steps, most
        self.current: _Step | None = None
        self.n = 0

    def line(self, text: str) -> None:
        if m := _MARK.search(text):
            self.close()
            self.n += 1
            name, expect = self.steps.get(m.group(1), (m.group(1), None))
            what = f"lemma {self.n}/{len(self.steps)} {name}" if self.prefix == "[reference]" else name
            self.current = _Step(self.log, self.prefix, what, expect, self.most)
        elif self.current is not None:
            self.current.line(text)

    def close(self, word: str | None = None) -> None:
        """The running step ends (``word``: how, when the log does not say, e.g. 'out of time')."""
        if self.current is not None:
            self.current.end(word if self.current.outcome is None else None)
            self.current = None
