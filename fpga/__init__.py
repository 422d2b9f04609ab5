"""Open-source synthesis (importable as ``dwc.fpga``): yosys/nextpnr flows, area and fit, pins,
energy estimates, board tops, and hardware in the loop (``dwc.sim.hil``). Reads the IR and the
generated HDL; never imports training code."""
