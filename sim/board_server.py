"""The socket side of a virtual board (``dwc board-sim``; the simulation side is
:func:`dwc.sim.cocotb_bench.board`): one TCP client at a time, a new connection replacing the current
one, the faults injected into the N-th observation frame received or the N-th reply sent, events
written as JSON lines as they happen and the counters to a status file. No cocotb here: the bench
hands it the bytes decoded from ``tx`` and takes the bytes for ``rx``."""
from __future__ import annotations

import json
import os
import select
import socket

from dwc.rtl.link import ACT_START, OBS_START, frame_lengths
from dwc.sim.hil.protocol import REPLY_GARBAGE, FaultyStream


class BoardServer:
    """Listens on the job's ``host:port`` (raises OSError where it cannot). ``counters()``: the
    simulation's (cycles, frames the chip took, frames it refused), for the status."""

    def __init__(self, b: dict, ports: dict, counters):
        obs_len, act_len = frame_lengths(ports)
        self.incoming = FaultyStream(OBS_START, obs_len, {int(k): v for k, v in b["faults_in"].items()})
        self.outgoing = FaultyStream(ACT_START, act_len, {int(k): v for k, v in b["faults_out"].items()}, REPLY_GARBAGE)
        self.events, self.status_file, self.counters = b["events"], b["status"], counters
        family = socket.AF_INET6 if ":" in b["host"] else socket.AF_INET
        self.server = socket.create_server((b["host"], b["port"]), family=family)
        self.server.setblocking(False)
        self.client, self.peer, self.served = None, None, 0
        self.seen = [0, 0]  # faults already reported, per direction

    def stop(self) -> None:
        """Stop listening (the client, if any, is left as it is)."""
        self.server.close()

    def event(self, **kw) -> None:
        with open(self.events, "a") as f:
            f.write(json.dumps(kw) + "\n")

    def listening(self) -> None:
        self.event(event="listening", host=self.server.getsockname()[0], port=self.server.getsockname()[1])

    def status(self) -> dict:
        cycles, ok, bad = self.counters()
        s = {"connections": self.served, "frames_received": self.incoming.frames, "replies_sent": self.outgoing.frames,
             "cycles": cycles, "frames_ok_on_chip": ok, "frames_bad_on_chip": bad,
             "faults_injected": [[n, k] for n, k in self.incoming.injected]
             + [[n, k + "-reply"] for n, k in self.outgoing.injected]}
        with open(self.status_file + ".tmp", "w") as f:
            json.dump(s, f)
        os.replace(self.status_file + ".tmp", self.status_file)
        return s

    def close(self, why: str) -> None:
        self.client.close()
        self.client = None
        self.event(event="disconnected", peer=self.peer, why=why, **self.status())

    def report_faults(self) -> None:
        for i, (stream, suffix) in enumerate([(self.incoming, ""), (self.outgoing, "-reply")]):
            for n, kind in stream.injected[self.seen[i]:]:
                self.event(event="fault", kind=kind + suffix, frame=n)
            self.seen[i] = len(stream.injected)

    def reply(self, byte: int) -> None:
        """A byte decoded from ``tx``: through the reply faults, to the client."""
        data, _ = self.outgoing.feed(bytes([byte]))
        self.report_faults()
        if self.client is not None and data:
            try:
                self.client.sendall(data)
            except OSError as e:
                self.close(f"sending failed: {e.strerror or e}")

    def poll(self, timeout: float, rx) -> None:
        """Wait up to ``timeout`` seconds for a connection or bytes from the client; each byte received
        (through the observation faults) goes to ``rx``."""
        ready, _, _ = select.select([self.server] + ([self.client] if self.client else []), [], [], timeout)
        if self.server in ready:
            new, addr = self.server.accept()
            if self.client is not None:
                self.close("replaced by a new connection")
            new.setblocking(True)
            new.settimeout(5.0)  # a host that stops reading cannot stall the board for longer
            new.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each byte as it leaves tx
            self.client, self.peer, self.served = new, f"{addr[0]}:{addr[1]}", self.served + 1
            self.event(event="connected", peer=self.peer)
        if self.client is not None and self.client in ready:
            try:
                data = self.client.recv(4096)
            except OSError:
                data = b""
            if not data:
                self.close("closed by the host")
            else:
                data, cut = self.incoming.feed(data)
                for byte in data:
                    rx(byte)
                self.report_faults()
                if cut:
                    self.close(f"disconnect injected at frame {self.incoming.injected[-1][0]}")
