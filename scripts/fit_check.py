"""Check dwc.fpga.fit's prediction on a design dwc synth refused (or any it synthesised): synthesise core +
shell as dwc synth does, pack it with nextpnr (--pack-only: nextpnr's own cell count, no placement) and
print nextpnr's count next to the predictions, as JSON. Run from the repository root after
dwc synth BUILD --target TARGET:

    .venv/bin/python scripts/fit_check.py BUILD TARGET
"""
import json, sys, time
from pathlib import Path
from dwc.fpga import fit
from dwc.fpga.synth import TARGETS, default_options, _yosys
from dwc.core.tools import run_tool
from dwc.rtl.shell import shell_verilog
build = Path(sys.argv[1]); target = sys.argv[2]; t = TARGETS[target]
work = build / "synth" / target
if not (work / "core_net.json").exists():  # a refused design: dwc synth keeps its files in <target>.failed
    work = build / "synth" / f"{target}.failed"
ports = json.loads((build / "dwc_core.json").read_text())
opts = default_options(t, ports)
(work / "shell.v").write_text(shell_verilog(ports))
t0 = time.time()
_yosys(work, f"read_verilog core.v shell.v\n{t.synth} {opts} -top dwc_shell -json top.json\ntee -q -o top_stat.json stat -json\n", "top")
t1 = time.time()
need = fit.predict([(json.loads((work / "top.json").read_text()), "dwc_shell")], t.family)
core = fit.predict([(json.loads((work / "core_net.json").read_text()), "dwc_core")], t.family)
try:
    run_tool(f"yowasp-nextpnr-{t.family}", [*t.nextpnr, "--json", "top.json", "--pack-only"], work / "nextpnr_pack_only.log", cwd=work)
except RuntimeError as e:
    print("pack-only:", str(e)[:300])
u = fit.nextpnr_utilisation(work / "nextpnr_pack_only.log")
k = fit.CELL_KIND[t.family]
print(json.dumps({"target": target, "kind": k, "nextpnr_pack_only": u.get(k), "predicted_core_shell": need[k],
                  "predicted_core_alone": core[k], "detail": need["detail"], "yosys_top_s": round(t1 - t0)}))
