"""The virtual board (dwc board-sim): the board top's logic in Verilator behind a TCP socket, driven by
dwc hil --port socket://... through pyserial, the code path of a board on /dev/ttyUSB0; faults
injected at the socket in both directions, a dropped connection reopened, every action equal to the
reference executor's."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dwc.cli import main
from dwc.sim.hil.protocol import FAULTS, FaultyStream, faulty

POLICY = Path(__file__).parent.parent / "policies" / "inverted-pendulum-v5-gates"


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = tmp_path_factory.mktemp("board")
    assert main(["compile", str(POLICY), "--out", str(out), "--pipeline", "1"]) == 0
    return out


class BoardSim:
    """``dwc board-sim BUILD --listen 127.0.0.1:0`` in its own process (as a user runs it); ``url`` is
    where it listens, ``lines`` what it printed; stopped with Ctrl-C (SIGINT) on exit."""

    def __init__(self, build: Path, *args: str, start_s: float = 600):
        self.proc = subprocess.Popen([sys.executable, "-m", "dwc", "board-sim", str(build), "--listen", "127.0.0.1:0",
                                      *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True,  # its own process group: see stop()
                                     # Ctrl-C reaches it as in a terminal, also when pytest itself was started in the
                                     # background (nohup ... &), where SIGINT is ignored and children inherit that
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        # stderr drained from the start: a full pipe (a first Verilator build's output, warnings) would block
        # the board-sim process, before it listens or when it should exit on Ctrl-C
        self.lines, self.errors, self.url = [], [], None
        self.readers = [threading.Thread(target=self._read, args=(self.proc.stderr, self.errors), daemon=True)]
        self.readers[0].start()
        deadline = time.monotonic() + start_s  # the first Verilator build of the board top
        while self.url is None:
            line = self.proc.stdout.readline()
            assert line and time.monotonic() < deadline, f"no start: {self.lines} {self.errors}"
            self.lines.append(line.rstrip("\n"))
            found = re.search(r"listening on (socket://[\d.]+:\d+)", line)
            self.url = found and found.group(1)
        self.readers.append(threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True))
        self.readers[1].start()

    @staticmethod
    def _read(stream, into: list):
        for line in stream:
            into.append(line.rstrip("\n"))

    def stop(self) -> tuple[int, str]:
        """Ctrl-C; the exit code and stderr."""
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # the failure stands, and nothing of it stays running
            os.killpg(self.proc.pid, signal.SIGKILL)  # with the simulator process it started
            self.proc.wait()
            raise
        for r in self.readers:
            r.join(timeout=10)
        return code, "\n".join(self.errors)


def hil(build, url, *args) -> tuple[int, dict]:
    code = main(["hil", str(build), "--port", url, "--board-episodes", "1", "--max-steps", "30", *args])
    return code, json.loads((build / "hil_report.json").read_text())


@pytest.mark.slow  # not in CI: test_verify's dwc hil --sim covers the UART link and its faults
def test_hil_over_a_virtual_board_recovers_from_every_fault(build, capsys):
    """Every fault kind at the socket, both directions, and a dropped connection: the host resends,
    skips garbage, reconnects; every action equals the reference's. A second host session on the same
    running board (a new connection) passes too, and Ctrl-C stops the board with one line."""
    # frames and replies are counted from 0 since the board started, resent frames included
    faults = ["garbage@2", "drop@5", "corrupt@8", "disconnect@11", "garbage-reply@16", "drop-reply@19",
              "corrupt-reply@23", "late-reply@27"]
    board = BoardSim(build, *[a for f in faults for a in ("--inject", f)])
    try:
        assert board.url.startswith("socket://127.0.0.1:")
        # --timeout 1.5: this simulator answers in ~0.1-0.3 s per step on a loaded 2-core machine
        code, r = hil(build, board.url, "--timeout", "1.5", "--reconnect", "5")
        out = capsys.readouterr().out
        assert code == 0 and "PASS" in out and "1 reconnections" in out, out
        assert r["steps"] == 30 and r["action_mismatches"] == 0 and r["return_hil"] == r["return_ref"]
        assert r["latency_cycles_on_chip"] == [r["latency_cycles_declared"]]
        # resent: the dropped byte, the flipped bit, the frame cut by the disconnect, the lost, the
        # corrupted and the held-back reply; garbage before a frame is skipped by the link, before a
        # reply by the host
        assert r["retries"] == 6 and r["reconnects"] == 1
        # the held-back reply arrives during the next step, and its sequence byte says it is not that step's
        assert r["late_replies_dropped"] == 1
        assert r["bad_frames_at_host"] >= 2  # the false start in the reply garbage, the corrupted reply
        assert r["mode"] == f"serial {board.url}"
        # a second board on the same build (and address) is refused by the build's lock: one line naming
        # the running board, no traceback, and the running board is left alone
        assert main(["board-sim", str(build), "--listen", board.url.removeprefix("socket://")]) == 2
        err = capsys.readouterr().err
        assert f"is in use: dwc board-sim by pid {board.proc.pid}" in err and "Traceback" not in err, err
        # the board keeps running: a second session is a new connection to the same board
        code, r2 = hil(build, board.url, "--max-steps", "5", "--timeout", "1.5")
        assert code == 0 and r2["action_mismatches"] == 0 and r2["retries"] == 0 and r2["reconnects"] == 0
    finally:
        code, err = board.stop()
    text = "\n".join(board.lines)
    for f in faults:
        kind, n = f.split("@")
        assert f"fault injected: {kind} on {'reply' if kind.endswith('-reply') else 'frame'} {n}" in text
    assert "disconnected (disconnect injected at frame 11)" in text and "closed by the host" in text
    assert code == 0 and "Traceback" not in err, err
    last = board.lines[-1]
    assert last.startswith("virtual board stopped: 3 connection(s)") and "faults injected 8" in last, last
    # frames received: 30 + 5 steps and 6 resent
    s = json.loads((build / "hil" / "sim-verilator" / "board_status.json").read_text())
    assert s["frames_received"] == 41 and s["frames_bad_on_chip"] == 2  # the dropped byte and the flipped bit


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_hil_port_errors_are_one_line(build, capsys):
    """Nothing listening, a malformed URL, an unknown scheme, a board that goes away for good: each is
    one line naming the port and what to check, exit 2."""
    cases = [(f"socket://127.0.0.1:{free_port()}", "Connection refused; is dwc board-sim (or ser2net"),
             ("socket://127.0.0.1", "expected socket://HOST:PORT"),
             ("socket://127.0.0.1:99999", "expected socket://HOST:PORT"),
             ("ftp://127.0.0.1:21", "protocol 'ftp' not known; a port is a device"),
             ("/dev/ttyDWC_NONE", "No such file or directory")]
    for url, text in cases:
        assert main(["hil", str(build), "--port", url, "--max-steps", "3"]) == 2
        err = capsys.readouterr().err.strip()
        assert text in err and err.startswith(f"dwc hil: error: --port {url}") and "\n" not in err, err

    assert main(["hil", str(build), "--port", "socket://127.0.0.1:5555", "--inject", "drop@3"]) == 2
    assert "dwc board-sim BUILD --inject KIND@FRAME" in capsys.readouterr().err

    # a peer that takes the connection, hangs up at the first frame and stops listening
    server = socket.create_server(("127.0.0.1", 0))
    url = f"socket://127.0.0.1:{server.getsockname()[1]}"

    def hang_up():
        conn, _ = server.accept()
        conn.recv(64)
        server.close()
        conn.close()
    threading.Thread(target=hang_up, daemon=True).start()
    t = time.monotonic()
    (build / "hil_report.json").unlink(missing_ok=True)
    assert main(["hil", str(build), "--port", url, "--max-steps", "3", "--reconnect", "0.5"]) == 1  # ran, not as asked
    err = capsys.readouterr().err.strip()
    assert time.monotonic() - t < 10
    assert err.startswith(f"dwc hil: error: lost the connection to {url} (") and "could not reopen it in " in err
    assert "over 0.5 s: Connection refused" in err and "\n" not in err, err
    assert "; 0 of 1 episode(s) finished (0 steps in all, 0 of the episode in progress)" in err, err
    r = json.loads((build / "hil_report.json").read_text())  # what finished is kept, and where it stopped
    assert not r["passed"] and r["lost"]["episodes_done"] == 0 and r["return_hil"] == [] and r["steps"] == 0


def test_board_sim_errors(build, capsys):
    assert main(["board-sim", str(build), "--listen", "nowhere"]) == 2
    assert "expected HOST:PORT" in capsys.readouterr().err
    assert main(["board-sim", str(build), "--inject", "melt@3"]) == 2
    assert "KIND@FRAME with KIND one of garbage, drop, corrupt, disconnect, garbage-reply" in capsys.readouterr().err
    assert main(["board-sim", str(build), "--inject", "drop-reply@3", "--inject", "corrupt-reply@3"]) == 2
    assert "frame 3 is given twice (drop-reply and corrupt-reply)" in capsys.readouterr().err
    assert main(["board-sim", str(build), "--baud", "3000000", "--clock", "1"]) == 2
    assert "at least 2 clock cycles per bit" in capsys.readouterr().err


def test_faults_stream_byte_by_byte():
    """The socket's faults are the hil --sim faults, applied to a stream that arrives in pieces."""
    frame = bytes([0xA5, 1, 2, 3, 0xF7])
    for kind in FAULTS:  # one implementation: a frame through the stream equals faulty()
        out, cut = FaultyStream(0xA5, 5, {1: kind}).feed(frame + frame)
        assert out == frame + faulty(frame, kind) and not cut
    s = FaultyStream(0xA5, 5, {1: "drop", 2: "disconnect"})
    pieces = [frame[:3], frame[3:] + frame[:2], frame[2:], frame + frame]
    outs = [s.feed(p) for p in pieces]
    assert b"".join(o for o, _ in outs[:3]) == frame + faulty(frame, "drop")
    assert outs[3] == (b"", True) and s.injected == [(1, "drop"), (2, "disconnect")] and s.frames == 3
    f = [bytes([0xA5, i, 2, 3, 0xF7 - i]) for i in range(4)]  # four frames told apart by their second byte
    late = FaultyStream(0xA5, 5, {0: "late"})
    # frame 0 held back, passed on just before frame 2, whichever chunks the bytes come in
    assert b"".join(late.feed(bytes([b]))[0] for b in b"".join(f)) == f[1] + f[0] + f[2] + f[3]
