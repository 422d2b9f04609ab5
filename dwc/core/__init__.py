"""The bottom layer, torch-free: errors, the training configuration, run directories, the FPGA
targets table, the shipped-policy catalog and the external tools (yosys, nextpnr). Every other
layer may import it; it imports none of them."""
