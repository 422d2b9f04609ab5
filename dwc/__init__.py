"""dwc: train logic-circuit (LUT) controllers and compile them to verified FPGA circuits."""
__version__ = "0.1.0"
