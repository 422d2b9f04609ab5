"""Fixtures shared by the test modules (plain helpers: helpers.py)."""
import pytest


@pytest.fixture(scope="module")
def small_build(tmp_path_factory):
    """A small untrained DWC at InvertedPendulum's dimensions (2 x 32 LUT4, 7 thresholds per dim)."""
    from dwc.flows.compile import emit_verilog
    from dwc.frontends.freeze import untrained_graph
    from dwc.models import ActorConfig
    out = tmp_path_factory.mktemp("small")
    g = untrained_graph(4, 1, ActorConfig(width=32, lut_inputs=4, thermo_bits=7), env="InvertedPendulum-v5")
    g.save(out / "graph.json")
    emit_verilog(g, out, pipeline=1)
    return out
