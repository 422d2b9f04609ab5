"""The documentation as a user follows it: every relative link in the tracked Markdown files (the
README's figures link to the artefacts that hold them) points to a file or folder that exists, and
that git keeps (a clone has no ignored file)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def markdown_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.md"], capture_output=True, text=True, cwd=ROOT)
    if out.returncode == 0 and out.stdout.strip():
        return [ROOT / f for f in out.stdout.split()]
    return [f for f in ROOT.rglob("*.md") if not {".venv", "build", ".git"} & set(f.relative_to(ROOT).parts)]


def relative_links() -> list[tuple[Path, str]]:
    """(Markdown file, link target) for every relative link outside code blocks (those hold commands)."""
    links = []
    for f in markdown_files():
        text = re.sub(r"```.*?```", "", f.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if not (re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#")):  # URL, same-page anchor
                links.append((f, target))
    return links


def test_relative_links_resolve():
    assert any(f.name == "README.md" and f.parent == ROOT for f in markdown_files())
    broken = [f"{f.relative_to(ROOT)}: {t}" for f, t in relative_links() if not (f.parent / t.split("#")[0]).exists()]
    assert not broken, "links to nothing:\n" + "\n".join(broken)


def test_linked_artefacts_are_not_ignored():
    """A link to a file .gitignore drops resolves here and breaks in every clone."""
    targets = set()
    for f, t in relative_links():
        path = (f.parent / t.split("#")[0]).resolve()
        targets |= {p for p in path.rglob("*") if p.is_file()} if path.is_dir() else {path}
    out = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], input="\n".join(map(str, targets)),
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode == 128:
        pytest.skip("not a git checkout")
    assert out.returncode in (0, 1), out.stderr  # 1: nothing ignored
    assert not out.stdout.strip(), "linked but ignored by git:\n" + out.stdout


RUNS = ROOT / "results" / "five-tasks" / "sweep" / "runs"


def archived_returns(task: str, config: str) -> list[float]:
    """The deployed return (the frozen circuit's for a DWC, else the float policy's) of each finished
    seed of TASK and CONFIG in the five-task archive, by seed."""
    import json
    results = [json.loads(r.read_text()) for r in (RUNS / task / config).glob("seed*/result.json")]
    return [r["frozen_return"] if r.get("frozen_return") is not None else r["float_return"]
            for r in sorted(results, key=lambda r: r["seed"])]


def test_five_task_returns_in_the_docs_are_the_archived_runs():
    """The five-task tables give, per task and policy, the median over the archived seeds and each
    seed's return: they are what the runs in results/five-tasks/sweep recorded, so a newly finished
    seed cannot leave a stale figure. docs/results.md: one cell per policy (median
    first, then the seeds); results/five-tasks/README.md: one row per config (the seeds, then the median)."""
    import statistics
    one = lambda x: round(x, 1)  # noqa: E731 (the docs give one decimal)
    numbers = lambda cell: [float(x) for x in re.findall(r"\d+\.\d", cell)]  # noqa: E731
    rows = re.findall(r"^\| (\w+-v5) \| (.*?) \| (.*?) \| \d+ / \d+ \|", (ROOT / "docs/results.md").read_text(), re.M)
    checked = []
    for task, dwc_cell, mlp_cell in rows:
        if not (RUNS / task).is_dir():
            continue  # Hopper: its own shipped runs, not the sweep's
        (dwc_config,) = [c.name for c in (RUNS / task).iterdir() if c.name.startswith("dwc")]
        for cell, config in ((dwc_cell, dwc_config), (mlp_cell, "mlp")):
            deployed, shown = archived_returns(task, config), numbers(cell)
            assert shown[0] == one(statistics.median(deployed)), (task, config, cell, deployed)
            assert f"n = {len(deployed)}" in cell, (task, config, cell)
            if len(deployed) > 1:
                assert shown[1:1 + len(deployed)] == [one(x) for x in deployed], (task, config, cell, deployed)
            checked.append((task, config))
    assert len(checked) == 8, checked  # 4 tasks x 2 policies in docs/results.md
    rows = re.findall(r"^\| (\w+-v5) \| ([\w-]+) \| (\d+) of \d+ \| (.*?) \|",
                      (ROOT / "results/five-tasks/README.md").read_text(), re.M)
    for task, config, finished, cell in rows:
        deployed, shown = archived_returns(task, config), numbers(cell)
        assert int(finished) == len(deployed) and shown[:len(deployed)] == [one(x) for x in deployed], (task, config, cell)
        if len(deployed) > 1:
            assert f"median {one(statistics.median(deployed))}" in cell, (task, config, cell)
    assert len(rows) == 8, rows


def test_the_python_example_on_the_front_page_runs(tmp_path):
    """The README's Python block, run as a user would from the repository root: it loads a shipped
    policy, freezes it, acts with both and writes the Verilog."""
    block = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    (tmp_path / "policies").symlink_to(ROOT / "policies")
    res = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "cycles" in res.stdout and (tmp_path / "builds/api/dwc_core.v").stat().st_size > 10_000
