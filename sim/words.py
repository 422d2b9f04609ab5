"""Integer fields <-> the packed port words described by ``dwc_core.json`` (field ``lsb``/``width``)."""


def pack(values, fields) -> int:
    word = 0
    for v, f in zip(values, fields):
        word |= (int(v) & ((1 << f["width"]) - 1)) << f["lsb"]
    return word


def unpack(word: int, fields) -> list[int]:
    out = []
    for f in fields:
        v = (word >> f["lsb"]) & ((1 << f["width"]) - 1)
        out.append(v - (1 << f["width"]) if f["signed"] and v >> (f["width"] - 1) else v)
    return out
