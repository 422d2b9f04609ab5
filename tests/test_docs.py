"""The documentation as a user follows it: every relative link in the tracked Markdown files (the
README's figures link to the artefacts that hold them) points to a file or folder that exists."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).parent.parent


def markdown_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.md"], capture_output=True, text=True, cwd=ROOT)
    if out.returncode == 0 and out.stdout.strip():
        return [ROOT / f for f in out.stdout.split()]
    return [f for f in ROOT.rglob("*.md") if not {".venv", "build", ".git"} & set(f.relative_to(ROOT).parts)]


def test_relative_links_resolve():
    files, broken = markdown_files(), []
    assert any(f.name == "README.md" and f.parent == ROOT for f in files)
    for f in files:
        text = re.sub(r"```.*?```", "", f.read_text(), flags=re.S)  # code blocks hold commands, not links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL or an anchor in the same page
            if not (f.parent / target.split("#")[0]).exists():
                broken.append(f"{f.relative_to(ROOT)}: {target}")
    assert not broken, "links to nothing:\n" + "\n".join(broken)


def test_five_task_returns_in_the_readme_are_the_archived_runs():
    """The five-task tables (README, docs/results.md) give, per task and policy, the median over the archived seeds
    and each seed's return: they are the deployed returns (the frozen circuit's for a DWC) that the
    runs in docs/five-tasks/sweep recorded, so a newly finished seed cannot leave a stale figure."""
    import json
    import statistics
    runs = ROOT / "docs" / "five-tasks" / "sweep" / "runs"
    rows = (re.findall(r"^\| (\w+-v5) \| (.*?) \| (.*?) \| \d+ \| \d+ \|", (ROOT / "README.md").read_text(), re.M)
            + re.findall(r"^\| (\w+-v5) \| (.*?) \| (.*?) \| \d+ / \d+ \|", (ROOT / "docs/results.md").read_text(), re.M))
    checked = []
    for task, dwc_cell, mlp_cell in rows:
        if not (runs / task).is_dir():
            continue  # Hopper: its own shipped runs, not the sweep's
        for cell, configs in ((dwc_cell, [c for c in (runs / task).iterdir() if c.name.startswith("dwc")]),
                              (mlp_cell, [runs / task / "mlp"])):
            (config,) = configs
            results = [json.loads(r.read_text()) for r in sorted(config.glob("seed*/result.json"),
                                                                  key=lambda p: int(p.parent.name[4:]))]
            deployed = [r["frozen_return"] if r.get("frozen_return") is not None else r["float_return"]
                        for r in results]
            returns = [round(x, 1) for x in deployed]
            shown = [float(x) for x in re.findall(r"\d+\.\d", cell)]
            assert shown[0] == round(statistics.median(deployed), 1), (task, config.name, cell, returns)
            assert f"n = {len(returns)}" in cell, (task, config.name, cell)
            if len(returns) > 1:
                assert shown[1:1 + len(returns)] == returns, (task, config.name, cell, returns)
            checked.append((task, config.name))
    assert len(checked) == 16, checked  # 4 tasks x 2 policies, in the README and in docs/results.md
