"""A failed stage, a full disk or a folder that refuses writes: one line that names the file and says what was kept,
never a traceback, never a truncated output, and a training run that resumes from its last checkpoint.
The failure is injected into the writes of dwc.core.rundir (every output goes through them), because a real
small filesystem needs root to mount."""
import errno
import os
import tempfile
import types
from pathlib import Path

import torch

from dwc.core import rundir
from dwc.cli import main
from helpers import small_args

POLICY = str(Path(__file__).parent.parent / "policies" / "inverted-pendulum-v5-gates")


class DiskFull:
    """Stands in for ``os``/``tempfile`` inside dwc.core.rundir: once ``armed(name)`` is true for the file being
    written, its writes fail with ENOSPC part-way, as on a full disk."""

    def __init__(self, armed):
        self.armed, self.name = armed, None
        self.os = types.SimpleNamespace(**{k: getattr(os, k) for k in dir(os) if not k.startswith("__")})
        self.os.fdopen = self.fdopen
        self.tempfile = types.SimpleNamespace(mkstemp=self.mkstemp, mkdtemp=tempfile.mkdtemp)

    def mkstemp(self, dir, prefix, suffix):
        self.name = prefix[1:-1]  # ".NAME." -> the file being written
        return tempfile.mkstemp(dir=dir, prefix=prefix, suffix=suffix)

    def fdopen(self, fd, mode):
        f = os.fdopen(fd, mode)
        return NearlyFull(f) if self.armed(self.name) else f


class NearlyFull:
    """A file on a disk with room for 1000 more bytes: a write beyond them stores what fits, then fails."""

    def __init__(self, f):
        self.f, self.room = f, 1000

    def write(self, b):
        b = bytes(b)
        self.f.write(b[: self.room])
        if len(b) > self.room:
            self.room = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(b)
        return len(b)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def inject(monkeypatch, fault):
    monkeypatch.setattr(rundir, "os", fault.os)
    monkeypatch.setattr(rundir, "tempfile", fault.tempfile)


def one_line(err: str) -> str:
    lines = [l for l in err.strip().splitlines() if l]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_full_disk_while_training_keeps_the_last_checkpoint_and_resumes(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    # the first checkpoint (step 200) lands; the second one meets a full disk inside torch.save
    inject(monkeypatch, DiskFull(lambda name: name == "checkpoint.pt" and (run / "checkpoint.pt").exists()))
    assert main(small_args(run, steps=600)) == 1
    line = one_line(capsys.readouterr().err)
    assert "No space left on device" in line and str(run / "checkpoint.pt") in line
    assert f"dwc train --out {run} --resume" in line
    assert torch.load(run / "checkpoint.pt", weights_only=False)["step"] == 200  # intact, not half-written
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    monkeypatch.undo()  # space freed: the command it printed finishes the run
    assert main(["train", "--out", str(run), "--resume", "--no-progress"]) == 0
    assert torch.load(run / "checkpoint.pt", weights_only=False)["step"] == 600


def test_full_disk_while_compiling_leaves_no_truncated_verilog(tmp_path, monkeypatch, capsys):
    out = tmp_path / "c"
    inject(monkeypatch, DiskFull(lambda name: name == "dwc_core.v"))
    assert main(["compile", POLICY, "--out", str(out)]) == 1
    line = one_line(capsys.readouterr().err)
    assert line.startswith("dwc compile: error: No space left on device") and str(out / "dwc_core.v") in line
    assert not out.exists()  # a new folder: nothing (no graph.json without its Verilog, no temp files)


def test_a_folder_that_refuses_writes_is_one_line(tmp_path, monkeypatch, capsys):
    def refuse(dir, prefix, suffix=None):
        raise PermissionError(errno.EACCES, "Permission denied", dir)
    monkeypatch.setattr(rundir, "tempfile", types.SimpleNamespace(mkstemp=refuse, mkdtemp=refuse))
    assert main(["compile", POLICY, "--out", str(tmp_path / "c")]) == 1
    line = one_line(capsys.readouterr().err)
    assert "Permission denied" in line and str(tmp_path / "c") in line


def test_outputs_get_the_usual_file_mode(tmp_path):
    rundir.write_json(tmp_path / "r.json", {})
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == rundir.FILE_MODE  # not mkstemp's 0600


def test_a_failed_compile_leaves_the_last_good_outputs_or_nothing(tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["compile", POLICY, "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["compile", POLICY, "--out", str(out), "--pipeline", "99"]) == 2  # fails after freezing
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no half-new graph.json, no leftovers
    assert main(["compile", POLICY, "--out", str(tmp_path / "new"), "--pipeline", "99"]) == 2
    assert not (tmp_path / "new").exists()
    assert "pipeline must be in 0.." in capsys.readouterr().err
