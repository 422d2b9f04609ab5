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
