"""test_cluster.py - two sluiced replicas on a Redis Cluster of three masters share one quota.

The cluster is started as tests/integration/redis/cluster.sh starts it (private, free
ports, `redis-cli --cluster create`). Pools are chosen so that their `{pool}` slots are
on different masters; the replicas must route every call by its key's slot, load the
libraries on every master, and follow MOVED and ASK when a pool's slot is moved to
another master while they run. Checked: a provider limit is never exceeded over both
replicas (grants counted), action limits stay exact through both, a suspension made on
one replica is refused on the other, leases keep working across a slot migration, and a
db other than 0 is refused at start (SELECT does not exist on a Cluster)."""
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from redis_harness import REDIS_SERVER, Sluiced, redis_command, resp_read, wait_until

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "src", "backend", "redis")


def library_version(name):
    """The VERSION a Lua library of src/backend/redis declares."""
    with open(os.path.join(SRC, name)) as f:
        for line in f:
            if line.startswith("local VERSION = "):
                return line.split("'")[1]
    raise AssertionError("no VERSION in " + name)
from harness import SLUICED

REDIS_CLI = os.environ.get("REDIS_CLI") or shutil.which("redis-cli") or os.path.join(
    os.path.dirname(REDIS_SERVER), "redis-cli")

# The library as Redis loads it: sluice.lua with fcall.def's names as its prelude (the
# build writes it; src/backend/redis/CMakeLists.txt).
LUA = os.environ["SLUICE_REDIS_LIBRARY"]
ADMIN = "admin-secret-1"
AGENT = "fleet-token"

# Capacity 5100 input tokens (6000 x 0.85) refilled at 85 tokens/s; a request that would
# wait more than 1 s is rejected, so 1,000-token requests get 5 grants per pool.
CONFIG = """auth:
  admin_token: %s
  tokens:
    - {token: %s, agent_prefix: ""}
limits:
  calls: {algorithm: sliding_window, rate: 10, period_s: 600, per: global}
pools:
%%s""" % (ADMIN, AGENT)

POOL = """  %s:
    input_tpm: 6000
    output_tpm: 600000
    max_queue_wait_s: 1
"""


def free_ports(n):
    """n ports the kernel says are free now, held open together so they differ."""
    ss = [socket.socket() for _ in range(n)]
    for s in ss:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in ss]
    for s in ss:
        s.close()
    return ports


class Cluster:
    """Three private masters in cluster mode, every slot assigned."""

    def __init__(self, password=None):
        self.password = password
        auth = ["--requirepass", password, "--masterauth", password] if password else []
        self.dir = tempfile.TemporaryDirectory(prefix="sluice-cluster-")
        ports = free_ports(6)
        self.ports, buses = ports[:3], ports[3:]
        self.procs = []
        for port, bus in zip(self.ports, buses):
            d = os.path.join(self.dir.name, str(port))
            os.mkdir(d)
            self.procs.append(subprocess.Popen(
                [REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(port), "--cluster-port",
                 str(bus), "--dir", d, "--save", "", "--appendonly", "no",
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", "2000", "--logfile", os.path.join(d, "redis.log")]
                + auth,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for port in self.ports:
            if not wait_until(lambda p=port: self.answers(p), 10):
                self.close()
                raise RuntimeError("cluster node %d did not start" % port)
        subprocess.run([REDIS_CLI] + (["-a", password, "--no-auth-warning"] if password else []) +
                       ["--cluster", "create"] +
                       ["127.0.0.1:%d" % p for p in self.ports] +
                       ["--cluster-replicas", "0", "--cluster-yes"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                       timeout=60)
        ok = wait_until(lambda: all("cluster_state:ok" in self.command(p, "CLUSTER", "INFO")
                                    for p in self.ports), 20, step_s=0.1)
        if not ok:
            self.close()
            raise RuntimeError("cluster_state never ok")

    def answers(self, port):
        try:
            return self.command(port, "PING") == "PONG"
        except OSError:
            return False

    def command(self, port, *args):
        """One command on the node at `port` (after AUTH when the cluster has a password)."""
        if not self.password:
            return redis_command(port, *args)
        out = b""
        for cmd in (("AUTH", self.password), args):
            out += b"*%d\r\n" % len(cmd)
            for a in cmd:
                a = a if isinstance(a, bytes) else str(a).encode()
                out += b"$%d\r\n%s\r\n" % (len(a), a)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(out)
            with sock.makefile("rb") as f:
                resp_read(f)  # +OK
                return resp_read(f)

    def slot(self, key):
        return self.command(self.ports[0], "CLUSTER", "KEYSLOT", key)

    def owner(self, slot):
        """The port of the master serving `slot`."""
        for lo, hi, master, *_ in self.command(self.ports[0], "CLUSTER", "SLOTS"):
            if lo <= slot <= hi:
                return master[1]
        raise KeyError(slot)

    def node_id(self, port):
        return self.command(port, "CLUSTER", "MYID")

    def pools_on_two_masters(self):
        """Two pool names whose keys live on different masters."""
        by_master = {}
        for i in range(100):
            name = "p%d" % i
            by_master.setdefault(self.owner(self.slot("sluice:{%s}:pool" % name)), name)
            if len(by_master) >= 2:
                break
        return list(by_master.values())[:2]

    def migrate_slot(self, slot, to_port, between=None):
        """Moves `slot` and its keys to the master on `to_port` (CLUSTER SETSLOT and
        MIGRATE, as redis-cli --cluster reshard does). `between()` runs after the keys
        moved and before the slot is reassigned: the old owner then answers ASK."""
        src = self.owner(slot)
        src_id, dst_id = self.node_id(src), self.node_id(to_port)
        self.command(to_port, "CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        self.command(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        for _ in range(100):
            keys = self.command(src, "CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not keys:
                break
            self.command(src, "MIGRATE", "127.0.0.1", to_port, "", 0, 5000, "KEYS", *keys)
        if between:
            between()
        for p in self.ports:
            self.command(p, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        return src

    def url(self, db=0, **opts):
        q = "&".join("%s=%s" % kv for kv in opts.items())
        auth = ":%s@" % self.password if self.password else ""
        return "redis://%s127.0.0.1:%d/%d%s" % (auth, self.ports[0], db, "?" + q if q else "")

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.dir.cleanup()


def lease(r, pool, agent, tokens=1000):
    return r.call("POST", "/v1/leases", {"agent": agent, "input_tokens": tokens,
                                         "output_tokens": 1, "pool": pool}, token=AGENT)


class OnACluster(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        cls.pools = cls.cluster.pools_on_two_masters()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def setUp(self):
        self.replicas = []

    def tearDown(self):
        for r in self.replicas:
            r.stop()

    def start(self, pools, n=2):
        url = self.cluster.url(tick_ms=200, timeout_ms=500, cold_start="full")
        text = "backend: %s\n" % url + CONFIG % "".join(POOL % p for p in pools)
        for _ in range(n):
            self.replicas.append(Sluiced(text))
            self.replicas[-1].token = AGENT
        for r in self.replicas:
            self.assertTrue(wait_until(lambda r=r: r.call("GET", "/readyz")[0] == 200, 15),
                            r.call("GET", "/readyz"))
        return self.replicas

    def test_pools_on_two_masters_share_their_quota_over_two_replicas(self):
        pa, pb = self.pools
        self.assertNotEqual(self.cluster.owner(self.cluster.slot("sluice:{%s}:pool" % pa)),
                            self.cluster.owner(self.cluster.slot("sluice:{%s}:pool" % pb)))
        a, b = self.start([pa, pb])
        # Both masters hold both libraries (FUNCTION LOAD is per node).
        for port in self.cluster.ports:
            self.assertEqual(self.cluster.command(port, "FCALL", "sluice_version", "0"),
                             library_version("sluice.lua"))
            self.assertEqual(self.cluster.command(port, "FCALL", "sluice_limits_version", "0"),
                             library_version("limits.lua"))
        results = {pa: [], pb: []}
        lock = threading.Lock()
        t0 = time.monotonic()

        def run(r, pool, agent):
            for _ in range(6):
                st, body, _ = lease(r, pool, agent)
                with lock:
                    results[pool].append((st, body))

        threads = [threading.Thread(target=run, args=(r, p, "w%d" % i))
                   for i, (r, p) in enumerate([(a, pa), (b, pa), (a, pb), (b, pb)])]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed_s = time.monotonic() - t0
        for pool in (pa, pb):
            sts = [st for st, _ in results[pool]]
            self.assertEqual(len(sts), 12)
            self.assertEqual(set(sts) - {200, 429}, set(), results[pool])
            granted = sts.count(200)
            # 5,100 tokens at start, 85 more per second: never a grant beyond that.
            self.assertGreaterEqual(granted, 5, results[pool])
            self.assertLessEqual(granted, int((5100 + 85 * elapsed_s) // 1000), results[pool])
            print("pool %s: %d of 12 granted over two replicas in %.2f s"
                  % (pool, granted, elapsed_s))
            # Each replica sees the pool's one bucket.
            la = a.pool(pool)["buckets"]["input_tokens"]["level"]
            lb = b.pool(pool)["buckets"]["input_tokens"]["level"]
            self.assertLess(abs(la - lb), 200)
        # A lease of pa granted on A settles through B.
        st, body, _ = a.call("POST", "/v1/leases", {"agent": "s1", "input_tokens": 1,
                                                    "output_tokens": 1, "pool": pa}, token=AGENT)
        self.assertEqual(st, 200, body)
        st, s, _ = b.call("POST", "/v1/leases/%s/settle" % body["lease"],
                          {"input_tokens": 1, "output_tokens": 1}, token=AGENT)
        self.assertEqual(st, 200, s)

    def test_action_limits_stay_exact_through_both_replicas(self):
        a, b = self.start([self.pools[0]])
        results = []
        lock = threading.Lock()

        def run(r, agent):
            for _ in range(8):
                st, body, _ = r.call("POST", "/v1/limits/calls/check", {"agent": agent},
                                     token=AGENT)
                with lock:
                    results.append((st, body))

        threads = [threading.Thread(target=run, args=(r, "ag-%d" % i))
                   for i, r in enumerate((a, b, a, b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        allowed = [body for st, body in results if st == 200]
        self.assertEqual(len(results), 32)
        self.assertEqual(len(allowed), 10, results)  # each replica alone would allow 10
        self.assertEqual(sorted(body["remaining"] for body in allowed), list(range(10)))

    def test_a_suspension_on_one_replica_is_refused_on_the_other(self):
        pool = self.pools[1]
        a, b = self.start([pool])
        self.assertEqual(lease(a, pool, "looper", 1)[0], 200)
        st, body, _ = b.call("POST", "/v1/agents/looper/suspend", token=ADMIN)
        self.assertEqual((st, body.get("reason")), (200, "admin"), body)

        def refused(r):
            st, body, _ = lease(r, pool, "looper", 1)
            return st == 429 and body.get("reason") == "suspended"

        self.assertTrue(wait_until(lambda: refused(a), 10), "A still serves the agent")
        st, body, _ = a.call("POST", "/v1/agents/looper/release", token=ADMIN)
        self.assertEqual(st, 200, body)
        self.assertTrue(wait_until(lambda: lease(b, pool, "looper", 1)[0] == 200, 10))

    def test_leases_keep_working_when_a_pools_slot_moves_to_another_master(self):
        pa, pb = self.pools
        a, b = self.start([pa, pb])
        st, held, _ = lease(a, pa, "m0", 10)
        self.assertEqual(st, 200, held)
        slot = self.cluster.slot("sluice:{%s}:pool" % pa)
        to = [p for p in self.cluster.ports if p != self.cluster.owner(slot)][0]
        asked = []

        def during():  # keys on the new master, the slot still the old one's: ASK
            asked.append(lease(b, pa, "m1", 10))

        src = self.cluster.migrate_slot(slot, to, between=during)
        self.assertEqual(self.cluster.owner(slot), to)
        self.assertEqual(asked[0][0], 200, asked[0])
        self.assertEqual(self.cluster.command(src, "CLUSTER", "COUNTKEYSINSLOT", slot), 0)
        self.assertGreater(self.cluster.command(to, "CLUSTER", "COUNTKEYSINSLOT", slot), 0)
        # Both replicas still lease from pa (MOVED followed) and settle the old lease.
        for r, agent in ((a, "m2"), (b, "m3"), (a, "m4")):
            st, body, _ = lease(r, pa, agent, 10)
            self.assertEqual(st, 200, body)
        st, s, _ = b.call("POST", "/v1/leases/%s/settle" % held["lease"],
                          {"input_tokens": 10, "output_tokens": 1}, token=AGENT)
        self.assertEqual(st, 200, s)
        self.assertEqual(lease(b, pb, "m5", 10)[0], 200)
        for r in (a, b):
            self.assertEqual(r.call("GET", "/readyz")[0], 200)
        # One bucket still: A's and B's levels agree after the move.
        la = a.pool(pa)["buckets"]["input_tokens"]["level"]
        lb = b.pool(pa)["buckets"]["input_tokens"]["level"]
        self.assertLess(abs(la - lb), 50)

    def test_a_master_that_stops_answering_takes_the_backend_down_until_it_answers(self):
        pa, pb = self.pools
        a, b = self.start([pa, pb])
        self.assertEqual(lease(a, pb, "o0", 10)[0], 200)
        port = self.cluster.owner(self.cluster.slot("sluice:{%s}:pool" % pb))
        proc = self.cluster.procs[self.cluster.ports.index(port)]
        # Stopped for less than the cluster's node timeout (2 s): the other masters never
        # mark it failed, so what is seen is sluiced's own deadline (timeout_ms 500).
        proc.send_signal(signal.SIGSTOP)
        try:
            st, body, _ = lease(a, pb, "o1", 10)
            self.assertEqual((st, body["error"]["type"]), (503, "backend_unavailable"), body)
            # Down as a whole, as with one node (fail: closed): pa's master answers, but
            # the replica does not decide for some pools and not others.
            self.assertEqual(a.call("GET", "/readyz")[0], 503)
            self.assertEqual(lease(a, pa, "o2", 10)[0], 503)
        finally:
            proc.send_signal(signal.SIGCONT)
        self.assertTrue(wait_until(lambda: a.call("GET", "/readyz")[0] == 200, 10))
        for pool in (pa, pb):
            self.assertEqual(lease(a, pool, "o3", 10)[0], 200)
            self.assertEqual(lease(b, pool, "o4", 10)[0], 200)

    def test_a_master_holding_another_library_version_keeps_the_replica_down(self):
        with open(LUA) as f:
            source = f.read()
        other = re.sub(r"local VERSION = '(\d+)'", "local VERSION = '1'", source, count=1)
        self.assertNotEqual(other, source)
        odd = self.cluster.ports[2]  # not the seed, which the start-up check reads
        self.cluster.command(odd, "FUNCTION", "LOAD", "REPLACE", other)
        try:
            url = self.cluster.url(tick_ms=200, timeout_ms=500)
            r = Sluiced("backend: %s\npools:\n%s" % (url, POOL % "vcheck"))
            self.replicas.append(r)
            time.sleep(1.5)  # several ticks: each reconnects and checks every master
            self.assertEqual(r.call("GET", "/readyz")[0], 503)
            # Refused before configuring anything: the pool was never created.
            key = "sluice:{vcheck}:pool"
            self.assertEqual(self.cluster.command(self.cluster.owner(self.cluster.slot(key)),
                                                  "EXISTS", key), 0)
            self.assertEqual(self.cluster.command(odd, "FCALL", "sluice_version", "0"), "1")
        finally:
            self.cluster.command(odd, "FUNCTION", "LOAD", "REPLACE", source)

    def test_a_db_other_than_0_is_refused_on_a_cluster(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            f.write("backend: %s\npools:\n%s" % (self.cluster.url(db=3), POOL % "x"))
            f.flush()
            p = subprocess.run([SLUICED, "--config", f.name, "--listen", "127.0.0.1:0"],
                               capture_output=True, text=True, timeout=20)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("db", p.stderr)
        self.assertIn("3", p.stderr)
        self.assertIn("Cluster", p.stderr)


class OnAClusterWithAPassword(unittest.TestCase):
    """Every master asks for the password: the seed, each master's connection and the
    subscriber send AUTH."""

    def test_two_replicas_share_a_pool_and_an_event_on_a_cluster_with_a_password(self):
        cluster = Cluster(password="s3cret")
        replicas = []
        try:
            pa, pb = cluster.pools_on_two_masters()
            url = cluster.url(tick_ms=200, timeout_ms=500, cold_start="full")
            queueing = POOL.replace("max_queue_wait_s: 1", "max_queue_wait_s: 600")
            text = "backend: %s\n" % url + CONFIG % "".join(queueing % p for p in (pa, pb))
            for _ in range(2):
                replicas.append(Sluiced(text))
                replicas[-1].token = AGENT
            a, b = replicas
            for r in replicas:
                self.assertTrue(wait_until(lambda r=r: r.call("GET", "/readyz")[0] == 200, 15))
            for pool in (pa, pb):
                st, d, _ = lease(a, pool, "pw", 10)
                self.assertEqual(st, 200, d)
                st, s, _ = b.call("POST", "/v1/leases/%s/settle" % d["lease"],
                                  {"input_tokens": 10, "output_tokens": 1})
                self.assertEqual(st, 200, s)
            # A ticket queued through A is granted by B's settle and answered on A: the
            # grant was published on one master and heard through A's subscription.
            st, hog, _ = lease(b, pa, "hog", 5000)
            self.assertEqual(st, 200, hog)
            got = []
            t = threading.Thread(target=lambda: got.append(a.call(
                "POST", "/v1/leases", {"agent": "waiter", "input_tokens": 3000,
                                       "output_tokens": 1, "pool": pa, "wait": 20},
                timeout_s=30)))
            t.start()
            self.assertTrue(wait_until(lambda: b.pool(pa)["queue"]["depth"] == 1, 5))
            st, s, _ = b.call("POST", "/v1/leases/%s/settle" % hog["lease"],
                              {"input_tokens": 10, "output_tokens": 1})
            self.assertEqual(st, 200, s)
            t.join(30)
            self.assertEqual(got[0][0], 200, got)
            # Granted, not answered 202 after its 20 s: the refill alone would take 34 s.
            self.assertEqual(got[0][1]["status"], "granted", got)
        finally:
            for r in replicas:
                r.stop()
            cluster.close()


if __name__ == "__main__":
    unittest.main()
