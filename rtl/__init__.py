"""Amaranth hardware generated from the dwc IR (importable as ``dwc.rtl``).

Reads the IR only; never imports training code."""
