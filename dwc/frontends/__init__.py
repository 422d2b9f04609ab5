"""Front ends: trained policies lowered into the IR (``dwc.ir``), bit-exact. ``freeze`` takes a
PyTorch actor (DWC, logic gates, quantised MLP); ``onnx_import`` takes a quantised ONNX/QONNX model."""
