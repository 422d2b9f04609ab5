"""The defaults of the hardware, verification and link options, each said once: the library's signatures
and the CLI's options (and their --help) read them here, so a command and the function it calls cannot
disagree (tests/test_options.py checks). Plain values, no imports: every layer may read them. Training
defaults are TrainConfig's (dwc.core.config)."""

# --- the circuit (dwc compile, import, build) ---
OBS_WIDTH = 16  # observation fixed-point width, bits
ACT_WIDTH = 16  # action fixed-point width, bits
TABLE_BITS = 8  # quantised MLPs: neurons reading at most this many input bits become lookup tables
COMPARATOR_BANK = "shared"  # the comparator bank's lowering (dwc.rtl.comparators.COMPARATORS)
# Register stages in the core (dwc compile, import, build, demo, sweeps; dwc.core.pipeline reads the values):
# every cut, for the highest Fmax, which reaches DEFAULT_FREQ_MHZ on ECP5 where 0 stages does not for the
# larger DWCs. The lowest latency is --pipeline 0 on request.
PIPELINE = "max"

# --- synthesis (dwc synth, build, demo, compile --pipeline auto, sweeps) ---
# The clock every hardware command requests unless told: one default, so that their timing verdicts and
# chosen pipelines agree. The pipelined cores reach about 200 MHz on ECP5, so 100 MHz leaves margin there;
# iCE40 often needs less (--freq).
DEFAULT_FREQ_MHZ = 100.0
SYNTH_TARGET = "ecp5-25k"  # the FPGA dwc build and dwc demo synthesise for
PLACEMENT_SEED = 1  # nextpnr's placement seed
ENERGY_STEPS = 1000  # closed-loop steps whose switching activity feeds the energy estimate (0: none)

# --- verification (dwc verify, build, demo: --verify-episodes) ---
VERIFY_EPISODES = 3  # closed-loop episodes in the simulated circuit: few, as they are slow
SIMULATOR = "verilator"
VECTORS = 1000  # random vectors in the vector bench
FORMAL_TIMEOUT_S = 600  # seconds per proof

# --- evaluation (dwc eval, and each training's final evaluation: --eval-episodes) ---
EVAL_EPISODES = 10
# "run": the device the run's config.json names (its last training leg's --device, auto unless told), the
# one its training evaluated it on, so that dwc eval RUN reproduces RUN/eval.json
EVAL_DEVICE = "run"

# --- the UART link (board tops, dwc hil, dwc board-sim) ---
BAUD = 115200
BOARD_EPISODES = 1  # dwc hil --board-episodes: closed-loop episodes over the link
HIL_TIMEOUT_S = 0.5  # a frame without a valid reply this long is resent
RECONNECT_S = 10.0  # how long a lost connection is retried
