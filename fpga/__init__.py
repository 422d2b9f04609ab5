"""Open-source synthesis flows, boards and reports (importable as ``dwc.fpga``).

Reads generated HDL only; never imports training code."""
