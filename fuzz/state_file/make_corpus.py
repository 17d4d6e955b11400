"""make_corpus.py - writes the seed corpus of fuzz_state_file (run from this directory).

Seeds in both modes of the target: raw files (mode byte 0) framed here as format 2 with
every record type, a format-1 file, and damaged copies; and framed record lists (mode
byte 1) that the target frames itself. The layouts are docs/server.md "Format 2"."""
import struct

T0 = 1796000000.0
NULL = 0xFFFF


def s(v):
    if v is None:
        return struct.pack("<H", NULL)
    b = v.encode()
    return struct.pack("<H", len(b)) + b


def fnv(b):
    h = 0xCBF29CE484222325
    for c in b:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def rec(body):
    return struct.pack("<IQ", len(body), fnv(body)) + body


def pool(name="default", level=400000.0):
    return (b"P" + s(name) + struct.pack("<4d", level, 500000, 80000, 0) +
            struct.pack("<6d", T0, 0.85, T0, -1, float("-inf"), 0) + struct.pack("<I", 0) +
            struct.pack("<dq", 7.5, 3))


def lease(i, name="default"):
    return (b"L" + struct.pack("<QQ", i, 0) + s(name) + s("agent-%d" % i) + s(None) + s("m") +
            struct.pack("<4q", 1000 * i, 100, 1, 0) + struct.pack("<qq", 0, 900 * i) +
            struct.pack("<5d", 1.0, T0, 0.0, 120.0, T0 + 120) + bytes([0, 1]))


def calib(name="default"):
    return (b"C" + s(name) + s("m") + struct.pack("<64d", *([1.1] * 5 + [0] * 59)) +
            struct.pack("<IIq", 5, 5, 5) + struct.pack("<64q", *([300] * 3 + [0] * 61)) +
            struct.pack("<II", 3, 3))


def suspended():
    return b"U" + s("runaway") + s("worker") + s("anomaly") + s("requests") + struct.pack(
        "<dqd", 7.5, 80, T0)


def reserve():
    return b"I" + struct.pack("<Q", 1 << 20)


def batch(records):
    body = b"".join(rec(r) for r in records)
    n = len(body)
    return struct.pack("<II", n, n ^ 0xFFFFFFFF) + body + b"\0" * (-n % 8)


def v2(batches, room=64, tail=b""):
    """A file of these batches; `tail`: bytes of a batch never committed, after the end."""
    body = b"".join(batch(b) for b in batches) + b"\0" * 8 + tail + b"\0" * room
    length = 24 + len(body)
    head = b"SLSTATE2" + struct.pack("<Q", length)
    return head + struct.pack("<Q", fnv(head)) + body


def chunks(bodies):
    out = b""
    for b in bodies:
        out += struct.pack("<H", len(b)) + b
    return out


snapshot = [reserve(), pool(), pool("p2", 1000.0), lease(1), calib(), suspended(), b"S"]
journal = [[lease(2), pool()], [b"E" + struct.pack("<Q", 1), pool()], [b"V" + s("runaway")]]
whole = v2([snapshot] + journal)
seeds = {
    "raw_whole.bin": b"\0" + whole,
    "raw_snapshot_only.bin": b"\0" + v2([snapshot]),
    "raw_cut.bin": b"\0" + whole[:825],
    "raw_flipped.bin": b"\0" + whole[:300] + bytes([whole[300] ^ 4]) + whole[301:],
    "raw_uncommitted_tail.bin": b"\0" + v2([snapshot, journal[0]],
                                           tail=b"".join(rec(r) for r in journal[1])),
    "raw_v1.bin": b"\0" + b"SLSTATE1" + b"".join(rec(r) for r in snapshot) + b"\0" * 16,
    "raw_not_ours.bin": b"\0hello\n",
    "framed_records.bin": b"\1" + chunks([pool(), lease(1), lease(2, "p2"), calib(),
                                          suspended()]),
    "framed_batches.bin": b"\1" + chunks([pool(), lease(1), b"", lease(2), b"",
                                          b"E" + struct.pack("<Q", 1), b"V" + s("runaway")]),
    "framed_unknown_type.bin": b"\1" + chunks([b"Zzz"]),
}
for name, data in seeds.items():
    with open("corpus/" + name, "wb") as f:
        f.write(data)
