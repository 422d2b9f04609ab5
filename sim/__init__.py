"""cocotb benches and closed-loop co-simulation (importable as ``dwc.sim``).

Reads the IR and generated HDL only; never imports training code."""
