"""test_state_damage.py - a damaged state file restores all or nothing (issue 25, item 3).

Nine leases held (the input level at ~73,000 of 510,000), sluiced killed with SIGKILL, then
the state file damaged the ways a disk or an operator damages one: cut short (at 825 bytes,
and part way through its journal) or one bit flipped in its journal. Each restart must
either give back the whole state (nine leases, the level as it was) or start cold with the
alert `state_file_damaged` and the file kept aside: never some of the leases with a level
that lets a 50% lease through at once. The undamaged file, after the same kill -9, must
give back everything (the journal is written before every answer)."""
import glob
import os
import struct
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_restart import POOL, WithStateDir  # noqa: E402

LEASES = 9
EACH = 48500  # nine of them: 436,500 of 510,000 held, the level at 73,500


def used_end(data):
    """The offset just past the last nonzero byte (the file is preallocated with zeros)."""
    return len(data.rstrip(b"\0"))


def damaged_copies(data):
    end = used_end(data)
    flip = lambda at: data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1:]  # noqa: E731
    return [("cut at 825 bytes", data[:825]),
            ("cut at 60% of what is written", data[:end * 6 // 10]),
            ("one bit flipped at 60% of what is written", flip(end * 6 // 10)),
            ("one bit flipped at 90% of what is written", flip(end * 9 // 10))]


def fnv1a(data):
    h = 0xCBF29CE484222325
    for c in data:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def format2(records):
    """A state file of format 2 (docs/server.md "Format 2") holding one snapshot batch."""
    body = b"".join(struct.pack("<IQ", len(r), fnv1a(r)) + r for r in records)
    batch = struct.pack("<II", len(body), len(body) ^ 0xFFFFFFFF) + body + b"\0" * (-len(body) % 8)
    length = 24 + len(batch) + 64
    head = b"SLSTATE2" + struct.pack("<Q", length)
    return head + struct.pack("<Q", fnv1a(head)) + batch + b"\0" * 64


def name(text):
    return struct.pack("<H", len(text)) + text.encode()


RESERVE = b"I" + struct.pack("<Q", 1 << 20)


def pool_record(at, level=1000):
    """A 'P' record of pool default: input level `level` at Unix time `at`."""
    return (b"P" + name("default") + struct.pack("<4d", level, 510000, 85000, 0) +
            struct.pack("<6d", at, 0.85, at, -1, float("-inf"), 0) + struct.pack("<I", 0) +
            struct.pack("<dq", 0, 0))


class StateDamage(WithStateDir):
    PREFIX = "sluiced-damage-"

    def alert(self, d):
        """The /metrics line of the alert state_file_damaged (None when there is none)."""
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % d.port, timeout=10) as r:
            lines = r.read().decode().splitlines()
        return next((l for l in lines if 'name="state_file_damaged"' in l), None)

    def hold_nine_and_kill(self, state):
        d = self.start("cold_start: full\nstate_file: %s\n%s" % (state, POOL))
        for i in range(LEASES):
            status, body = d.lease("a%d" % i, EACH, ttl=300)
            self.assertEqual(status, 200, body)
        self.assertLess(d.input_level(), 510000 - LEASES * EACH + 8500 * 5)
        d.kill9()
        return d

    def test_a_kill9_alone_restores_every_lease_and_raises_no_alert(self):
        state = os.path.join(self.tmp.name, "state")
        d = self.hold_nine_and_kill(state)
        d.start()
        self.assertEqual(d.pool()["leases_in_flight"], LEASES)
        self.assertEqual(self.alert(d), 'sluice_alert{name="state_file_damaged",pool=""} 0')
        status, body = d.lease("half", 255000)
        self.assertEqual(status, 429, body)

    def test_a_damaged_file_restores_nothing_raises_the_alert_and_is_kept(self):
        state = os.path.join(self.tmp.name, "state")
        d = self.hold_nine_and_kill(state)
        with open(state, "rb") as f:
            intact = f.read()
        partial = []
        for what, copy in damaged_copies(intact):
            with open(state, "wb") as f:
                f.write(copy)
            for kept in glob.glob(state + ".damaged-*"):
                os.unlink(kept)
            d.start()
            leases = d.pool()["leases_in_flight"]
            level = d.input_level()
            if leases != 0:  # partly or wholly restored: only the whole state would do
                partial.append((what, leases, level))
            else:
                cold = 8500 * (time.monotonic() - d.started_at + 0.5)
                self.assertLessEqual(level, cold, what)
                self.assertEqual(self.alert(d), 'sluice_alert{name="state_file_damaged",pool=""} 1',
                                 what)
                kept = glob.glob(state + ".damaged-*")
                self.assertEqual(len(kept), 1, what)
                with open(kept[0], "rb") as f:
                    self.assertEqual(f.read(), copy, what)  # kept as it was found
                status, body = d.lease("half", 255000)
                self.assertEqual(status, 429, (what, body))
            err = d.kill9()
            if leases == 0:
                self.assertIn("does not verify", err, what)
        self.assertEqual(partial, [], "damaged copies restored part of the state")

    def test_a_clean_file_with_a_record_the_engine_refuses_restores_nothing(self):
        # Checksums all good, but the lease's weight is 0 (the engine takes none): the pool
        # record beside it (level 1,000) must not come back alone.
        state = os.path.join(self.tmp.name, "state")
        now = time.time()
        lease = (b"L" + struct.pack("<QQ", 7, 0) + name("default") + name("a") +
                 struct.pack("<HH", 0xFFFF, 0xFFFF) + struct.pack("<4q", 400000, 1, 1, 0) +
                 struct.pack("<qq", 0, 0) + struct.pack("<5d", 0.0, now, 0, 300, now + 300) +
                 bytes([0, 1]))
        with open(state, "wb") as f:
            suspended = (b"U" + name("runaway") + name("worker") + name("admin") + name("") +
                         struct.pack("<dqd", 0, 0, now))
            f.write(format2([RESERVE, pool_record(now), lease, suspended, b"S"]))
        d = self.start("cold_start: full\nstate_file: %s\n%s" % (state, POOL))
        self.assertEqual(d.pool()["leases_in_flight"], 0)
        self.assertLessEqual(d.input_level(), 8500 * (time.monotonic() - d.started_at + 0.5))
        self.assertEqual(self.alert(d), 'sluice_alert{name="state_file_damaged",pool=""} 1')
        self.assertEqual(len(glob.glob(state + ".damaged-*")), 1)
        time.sleep(0.3)  # a little refill
        status, body = d.lease("runaway", 10)  # the file's suspension is not restored either
        self.assertEqual(status, 200, body)
        self.assertIn("the engine refuses a lease", d.kill9())

    def test_a_file_whose_times_run_days_ahead_is_not_believed(self):
        state = os.path.join(self.tmp.name, "state")
        with open(state, "wb") as f:
            f.write(format2([RESERVE, pool_record(time.time() + 10 * 86400), b"S"]))
        d = self.start("cold_start: full\nstate_file: %s\n%s" % (state, POOL))
        self.assertEqual(self.alert(d), 'sluice_alert{name="state_file_damaged",pool=""} 1')
        self.assertLessEqual(d.input_level(), 8500 * (time.monotonic() - d.started_at + 0.5))
        self.assertIn("ahead of this clock", d.kill9())
        # A file a few seconds ahead (the wall clock set back) is still believed.
        for kept in glob.glob(state + ".damaged-*"):
            os.unlink(kept)
        with open(state, "wb") as f:
            f.write(format2([RESERVE, pool_record(time.time() + 5, 300000), b"S"]))
        d.start()
        self.assertEqual(self.alert(d), 'sluice_alert{name="state_file_damaged",pool=""} 0')
        self.assertGreater(d.input_level(), 290000)


if __name__ == "__main__":
    unittest.main()
