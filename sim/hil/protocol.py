"""Host side of the UART policy link (``dwc.rtl.link``): frame encoding and decoding."""
from __future__ import annotations

from dwc.rtl.link import ACT_START, OBS_START, frame_lengths, frame_sizes
from dwc.sim.words import pack, unpack


def checksum(payload: bytes) -> int:
    return (-sum(payload)) & 0xFF


def obs_frame(q, ports: dict, seq: int = 0) -> bytes:
    """The observation frame of integer observation ``q`` with sequence byte ``seq`` (mod 256)."""
    n, _ = frame_sizes(ports)
    payload = bytes([seq & 0xFF]) + pack(q, ports["inputs"]["obs"]).to_bytes(n, "little")
    return bytes([OBS_START]) + payload + bytes([checksum(payload)])


def reply_for(frames: list, seq: int) -> tuple[tuple | None, int]:
    """The reply to observation ``seq`` among parsed reply frames (:meth:`ResponseParser.feed`) and how
    many others came with it: late replies to earlier observations, which must not be taken for it."""
    mine = [f for f in frames if f[0] == seq & 0xFF]
    return (mine[0][1:] if mine else None), len(frames) - len(mine[:1])


class ResponseParser:
    """Feed received bytes; yields (sequence, action ints, latency cycles) per good frame, skipping
    garbage and frames whose checksum fails (counted in ``bad``)."""

    def __init__(self, ports: dict):
        self.ports = ports
        self.size = frame_lengths(ports)[1] - 1  # all but the start byte
        self.buf = bytearray()
        self.bad = 0

    def feed(self, data: bytes) -> list[tuple[list[int], int]]:
        self.buf += data
        out = []
        while True:
            start = self.buf.find(ACT_START)
            if start < 0:
                self.buf.clear()
                return out
            del self.buf[:start]
            if len(self.buf) < 1 + self.size:
                return out
            frame = bytes(self.buf[1:1 + self.size])
            if sum(frame) & 0xFF:
                self.bad += 1
                del self.buf[:1]  # resynchronise on the next start byte
                continue
            del self.buf[:1 + self.size]
            word = int.from_bytes(frame[1:-2], "little")
            out.append((frame[0], unpack(word, self.ports["outputs"]["action"]), frame[-2]))

    def reset(self) -> None:
        """Forget a partial frame (after a timeout its tail is not coming)."""
        self.buf.clear()


FAULTS = ("garbage", "drop", "corrupt")
GARBAGE = b"\x13\x00\xff\x37"  # no start byte of either direction among them
# garbage on the way back with a false start byte in it: the host's parser must reject the frame it
# seems to begin by its checksum and find the real one
REPLY_GARBAGE = b"\x13" + bytes([ACT_START]) + b"\xff\x37"


class FaultyStream:
    """One direction of the link as a byte stream: counts its frames (a ``start`` byte and ``size``
    bytes in all) and injects a fault into the ``faults[n]``-th (0-based): ``garbage`` bytes before
    it, one byte ``drop``-ped (its third), one bit flipped (``corrupt``: bit 3 of its second byte),
    ``late`` (held back and passed on just before frame n + 2: a reply that comes after the host has
    resent and moved on), or ``disconnect`` (the frame and what follows it in the same chunk are cut
    off; :meth:`feed` says so). Bytes stream through as they come, a frame's tail may arrive in a
    later chunk."""

    def __init__(self, start: int, size: int, faults: dict | None = None, garbage: bytes = GARBAGE):
        self.start, self.size, self.faults, self.garbage = start, size, dict(faults or {}), garbage
        self.frames, self.injected = 0, []  # frames seen; (frame, kind) of each fault injected
        self._pos, self._kind = -1, None  # position in the current frame, -1 between frames
        self._held, self._release = bytearray(), None  # a late frame's bytes, and the frame they precede

    def feed(self, data: bytes) -> tuple[bytes, bool]:
        """The bytes to pass on, and whether the connection is to be cut here."""
        out = bytearray()
        for b in data:
            if self._pos < 0 and b == self.start:
                n, self._pos = self.frames, 0
                self.frames += 1
                if n == self._release:
                    out += self._held
                    self._held, self._release = bytearray(), None
                self._kind = self.faults.get(n)
                if self._kind == "late":
                    self._release = n + 2
                if self._kind:
                    self.injected.append((n, self._kind))
                if self._kind == "disconnect":
                    self._pos = -1
                    return bytes(out), True
                if self._kind == "garbage":
                    out += self.garbage
            if self._pos >= 0:
                pos, self._pos = self._pos, (self._pos + 1) % self.size or -1
                if self._kind == "drop" and pos == 2:
                    continue
                if self._kind == "corrupt" and pos == 1:
                    b ^= 0x08
                if self._kind == "late":
                    self._held.append(b)
                    continue
            out.append(b)
        return bytes(out), False


def faulty(frame: bytes, kind: str) -> bytes:
    """A link fault for tests (:class:`FaultyStream` on one frame): garbage bytes before the frame (no
    start byte among them), one payload byte dropped, or one payload bit flipped."""
    if kind not in FAULTS:
        raise ValueError(f"unknown fault {kind!r}; choose from {', '.join(FAULTS)}")
    return FaultyStream(frame[0], len(frame), {0: kind}).feed(frame)[0]
