"""Verification (importable as ``dwc.sim``): ``dwc verify``'s engine, cocotb benches on Verilator,
closed-loop co-simulation against MuJoCo, gate-level netlist and bitstream checks, and formal
equivalence proofs. Reads the IR, the generated HDL and synthesis outputs; never imports training code."""
