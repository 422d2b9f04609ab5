"""The core's interface contract, as docs/verification.md states it: a result exactly ``latency``
edges after its observation, one per cycle; a reset drops every observation in flight (no valid_out
for any of them; the action outputs mean nothing while valid_out is low) and the first observation after it comes out correct; NaN
observations are refused on the host side, +-inf and out-of-range values saturate."""
import numpy as np
import pytest
from amaranth import ClockDomain, Module
from amaranth.sim import Simulator

from dwc.core.errors import UserError
from dwc.ir import reference as ref
from dwc.ir.graph import FixedFormat
from dwc.rtl.core import DWCCore, max_pipeline
from helpers import inputs_for, random_graph


def run_with_reset(core: DWCCore, q: np.ndarray, reset_at: int, reset_cycles: int = 1):
    """Feed one observation per cycle; hold the sync reset during cycles [reset_at, reset_at +
    reset_cycles). Returns (cycle fed, index) pairs and (cycle out, action, valid) per cycle."""
    g = core.graph
    m = Module()
    m.domains.sync = cd = ClockDomain("sync")
    m.submodules.core = core
    fed, seen = [], []

    async def bench(ctx):
        for cycle in range(len(q) + core.latency + 2):
            i = cycle if cycle < len(q) else None
            if i is not None:
                for d in range(g.obs_dim):
                    ctx.set(core.obs[f"o{d}"], int(q[i, d]))
                fed.append((cycle, i))
            ctx.set(core.valid_in, int(i is not None))
            ctx.set(cd.rst, int(reset_at <= cycle < reset_at + reset_cycles))
            await ctx.tick()
            seen.append((cycle + 1, [ctx.get(core.action[f"a{a}"]) for a in range(g.action_dim)],
                         ctx.get(core.valid_out)))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return fed, seen


@pytest.mark.parametrize("comparators", ["shared", "full"])
@pytest.mark.parametrize("pipeline,input_register", [(0, True), ("max", True), (0, False), (2, False)])
def test_reset_drops_what_is_in_flight_and_the_next_observation_is_exact(pipeline, input_register, comparators):
    """Both comparator lowerings: the shared bank's registers take the input register's place, so
    the latency (2 + pipeline cycles) and the reset behaviour are the same. Without the input
    register the first register after the observation samples it: one cycle less (1 at pipeline 0,
    the observation straight into the action register), the same contract."""
    g = random_graph(2)
    p = max_pipeline(g) if pipeline == "max" else pipeline
    core = DWCCore(g, p, comparators=comparators, input_register=input_register)
    lat = core.latency
    assert lat == 1 + input_register + p == core.port_description()["latency_cycles"]
    q = inputs_for(g, 3 * lat + 6, 2)
    want = ref.actions_int(g, q)
    reset_at = lat + 2  # observations 0 .. lat+1 have entered; some are still in the pipeline
    fed, seen = run_with_reset(core, q, reset_at)
    by_cycle = {c: (a, v) for c, a, v in seen}
    for cycle, i in fed:
        action, valid = by_cycle.get(cycle + lat, (None, 0))
        if cycle + lat < reset_at + 1:  # it came out before the reset edge: delivered, and exact
            assert valid and action == list(want[i]), (i, cycle)
        elif cycle <= reset_at:  # in flight at the reset (or fed during it): dropped
            assert not valid, (i, cycle)
        else:  # fed after the reset: the pipeline works as before, exactly
            assert valid and action == list(want[i]), (i, cycle)
    # from the reset edge until the first new result, valid_out stays low: nothing stale comes out
    assert not any(v for c, _, v in seen if reset_at < c <= reset_at + lat)


def test_non_finite_observations_have_one_rule():
    f = FixedFormat(16, 8)
    assert f.quantize([np.inf, -np.inf, 1e9, -1e9]).tolist() == [f.max_int, f.min_int, f.max_int, f.min_int]
    with pytest.raises(UserError, match=r"NaN observation \(dimension\(s\) \[1\]\)"):
        f.quantize([0.0, np.nan])
    g = random_graph(1)
    obs = np.zeros((3, g.obs_dim))
    obs[2, 0] = np.nan  # the third observation's first dimension: the message names the dimension
    with pytest.raises(UserError, match=r"NaN observation \(dimension\(s\) \[0\]\)"):
        ref.quantize_obs(g, obs)


def test_closed_loop_refuses_a_nan_from_the_env():
    """The Verilator/HIL host loop (sim.closed_loop.Episode) stops with the step and seed, not a garbage code."""
    import gymnasium as gym

    from dwc.ir.closed_loop import Episode

    class NaNAfter(gym.Wrapper):
        def step(self, action):
            obs, r, term, trunc, info = self.env.step(action)
            return np.full_like(obs, np.nan), r, term, trunc, info

    from dwc.frontends.freeze import untrained_graph
    from dwc.models import ActorConfig
    g = untrained_graph(4, 1, ActorConfig(width=32, lut_inputs=4, thermo_bits=7), env="InvertedPendulum-v5")
    ep = Episode(NaNAfter(gym.make("InvertedPendulum-v5")), g, seed=5)
    with pytest.raises(UserError, match="at step 1 of the episode with seed 5"):
        ep.step([0])
