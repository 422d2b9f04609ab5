"""Leaf cells of the emitted Verilog, shared by every component."""


# Leaf cells for the emitted Verilog: plain, vendor-neutral modules whose parameters keep their full
# width, so the output lints clean in Verilator (Amaranth narrows constant operands, which Verilator
# flags as WIDTH warnings). Amaranth's own simulator cannot run Instances, so ``cells="native"``
# builds the same leaves from Amaranth expressions; the Verilator bench checks the Verilog path.
CELLS_VERILOG = {
    "dwc_cmp": """
module dwc_cmp #(parameter integer W = 16, parameter signed [W-1:0] T = 0) (input signed [W-1:0] x, output o);
  // x >= T (signed) as an unsigned compare of both offset by 2^(W-1) (= sign bit flipped): FPGA
  // flows can then map it to soft logic instead of a carry chain (yosys -cmp2softlogic on ECP5).
  localparam [W-1:0] U = {~T[W-1], T[W-2:0]};
  wire [W-1:0] u = {~x[W-1], x[W-2:0]};
  assign o = u >= U;
endmodule
""",
    "dwc_cmp_carry": """
module dwc_cmp_carry #(parameter integer W = 16, parameter signed [W-1:0] T = 0) (input signed [W-1:0] x, output o);
  // x >= T as the carry out of u + (2^W - U) (u, U offset as in dwc_cmp): the result is the last sum
  // bit of the carry chain, so a register can pack next to it (ECP5, Hopper DWC at pipeline max:
  // 188 -> 211 MHz, same LUTs); used when the pipeline registers the comparators.
  localparam [W-1:0] U = {~T[W-1], T[W-2:0]};
  localparam [W:0] K = (1 << W) - U;
  wire [W-1:0] u = {~x[W-1], x[W-2:0]};
  wire [W:0] s = {1'b0, u} + K;
  assign o = s[W];
endmodule
""",
    "dwc_lut": """
module dwc_lut #(parameter integer N = 6, parameter [(1 << N) - 1:0] INIT = 0) (input [N-1:0] a, output o);
  assign o = INIT[a];
endmodule
""",
    "dwc_add": """
module dwc_add #(parameter integer W = 1) (input [W-1:0] a, input [W-1:0] b, output [W:0] y);
  assign y = {1'b0, a} + {1'b0, b};
endmodule
""",
    # Signed arithmetic of the quantised MLP's linear layers: the caller sizes W from the value
    # ranges, so every result fits and operands, constants and results all share one width.
    "dwc_sadd": """
module dwc_sadd #(parameter integer W = 2) (input signed [W-1:0] a, input signed [W-1:0] b, output signed [W-1:0] y);
  assign y = a + b;
endmodule
""",
    "dwc_smulc": """
module dwc_smulc #(parameter integer W = 2, parameter signed [W-1:0] C = 0) (input signed [W-1:0] a, output signed [W-1:0] y);
  assign y = a * C;
endmodule
""",
    "dwc_requant": """
module dwc_requant #(parameter integer W = 2, parameter integer S = 0, parameter integer OW = 2,
                     parameter integer EVEN = 0, parameter signed [W-1:0] HALF = 0,
                     parameter signed [W-1:0] LO = 0, parameter signed [W-1:0] HI = 0)
                    (input signed [W-1:0] a, output signed [OW-1:0] y);
  // round at 2^S, ties up (HALF = 2^(S-1)) or to even (HALF = 2^(S-1) - 1 plus the floor's lowest
  // bit a[S]); S = 0: HALF = 0, no rounding. Then clamp to LO..HI.
  wire signed [W-1:0] odd = {{(W-1){1'b0}}, (EVEN != 0 && S > 0) ? a[S] : 1'b0};
  wire signed [W-1:0] r = (a + HALF + odd) >>> S;
  assign y = r < LO ? LO[OW-1:0] : r > HI ? HI[OW-1:0] : r[OW-1:0];
endmodule
""",
}
CELLS = ("native", "verilog")


def check_cells(cells: str) -> None:
    if cells not in CELLS:
        raise ValueError("cells must be 'native' (Amaranth simulation) or 'verilog' (emission)")
