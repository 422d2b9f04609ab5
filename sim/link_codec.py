"""Host side of the UART policy link (``dwc.rtl.link``): frame encoding and decoding."""
from __future__ import annotations

from dwc.rtl.link import ACT_START, OBS_START, frame_sizes
from dwc.sim.words import pack, unpack


def checksum(payload: bytes) -> int:
    return (-sum(payload)) & 0xFF


def obs_frame(q, ports: dict) -> bytes:
    n, _ = frame_sizes(ports)
    payload = pack(q, ports["inputs"]["obs"]).to_bytes(n, "little")
    return bytes([OBS_START]) + payload + bytes([checksum(payload)])


class ResponseParser:
    """Feed received bytes; yields (action ints, latency cycles) per good frame, skipping garbage and
    frames whose checksum fails (counted in ``bad``)."""

    def __init__(self, ports: dict):
        self.ports = ports
        self.size = frame_sizes(ports)[1] + 2  # action bytes, latency, checksum
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
            word = int.from_bytes(frame[:-2], "little")
            out.append((unpack(word, self.ports["outputs"]["action"]), frame[-2]))

    def reset(self) -> None:
        """Forget a partial frame (after a timeout its tail is not coming)."""
        self.buf.clear()


FAULTS = ("garbage", "drop", "corrupt")


def faulty(frame: bytes, kind: str) -> bytes:
    """A link fault for tests: garbage bytes before the frame (no start byte among them), one payload
    byte dropped, or one payload bit flipped."""
    if kind == "garbage":
        return b"\x13\x00\xff\x37" + frame
    if kind == "drop":
        return frame[:2] + frame[3:]
    if kind == "corrupt":
        return frame[:1] + bytes([frame[1] ^ 0x08]) + frame[2:]
    raise ValueError(f"unknown fault {kind!r}; choose from {', '.join(FAULTS)}")
