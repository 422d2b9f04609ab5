"""Software back ends that read the IR: a C99 header (``c_header``, written and checked by
``c_export``), an ONNX model (``onnx_export``) and plain combinational Verilog, the independent
specification formal proofs compare the hardware against (``reference_verilog``). The hardware back
end is ``dwc.rtl``."""
