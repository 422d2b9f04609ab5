"""Fixtures shared by the test modules (plain helpers: helpers.py)."""
import pytest

# CI runs the suite on two workers a file at a time (--dist loadfile), in collection order
# (--no-loadscope-reorder: xdist would otherwise put the files with most tests first, and a long
# one-test file such as the Ant check last, one worker idle while it runs): the files that take longest go
# first. Measured in a CI run (pytest --durations); the rest keep their order.
LONGEST_FIRST = ("test_sac_learns_ant.py", "test_sweep_resume.py", "test_verify.py", "test_train_learns.py",
                 "test_build.py", "test_bitstream.py", "test_synth.py", "test_distill.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: tests keep their order in a file


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
