"""scripts/float_vs_frozen.py: the float policy and its frozen circuit compared state by state on the
evaluation episodes, on a shipped DWC."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("float_vs_frozen", ROOT / "scripts" / "float_vs_frozen.py")
fvf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fvf)


def test_the_circuit_acts_as_its_float_policy_up_to_the_tables_rounding(tmp_path, capsys):
    from dwc.flows.evaluate import evaluate_run
    run = ROOT / "policies" / "inverted-pendulum-v5-dwc"
    r = fvf.compare(run, episodes=1)
    ev = evaluate_run(run, 1, frozen=True, write=False)
    assert r["float_returns"] == ev["returns"] and r["frozen_returns"] == ev["frozen"]["returns"]
    assert r["states"] == int(ev["returns"][0])  # InvertedPendulum pays 1 a step survived
    assert 0 <= r["states_popcounts_differ"] < r["states"]
    a = r["action_difference"]  # 16-bit action tables: a rounding step is far below 1e-3 of the range
    assert a["median"] < 1e-3 and a["median"] <= a["p99"] <= a["max"]
    assert fvf.main([str(run), "--episodes", "1", "--json", str(tmp_path / "f.json")]) == 0
    assert "popcounts differ on" in capsys.readouterr().out and (tmp_path / "f.json").exists()
    with pytest.raises(SystemExit) as e:
        fvf.main([str(tmp_path / "nothing"), "--episodes", "1"])
    assert e.value.code == 2
