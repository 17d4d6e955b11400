"""proxy_cases.py - the proxy's integration cases (tests/integration/proxy/test_*.py) run
again with sluiced on a private redis-server: on_redis() makes a test module of them.
Standard library only.
"""
import importlib.util
import os
import sys

from redis_harness import Redis

PROXY_TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proxy")


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load(test_file):
    """The module tests/integration/proxy/<test_file>. The proxy tests import their harness
    as `harness`, a name redis_harness gave the server tests' harness: the proxy's is
    loaded under that name while the module loads, and the server's put back after."""
    server_harness = sys.modules.get("harness")
    sys.modules["harness"] = _load("proxy_harness", os.path.join(PROXY_TESTS, "harness.py"))
    try:
        return _load("proxy_" + test_file[:-3], os.path.join(PROXY_TESTS, test_file))
    finally:
        sys.modules["harness"] = server_harness


class OnRedis:
    """One redis-server for a module of proxy cases: start() (the module's setUpModule)
    makes their backend_config name it, stop() (tearDownModule) ends it, flush() (a
    case's setUp) empties it."""

    def __init__(self, cases):
        self.cases = cases
        self.redis = None

    def start(self):
        self.redis = Redis()
        self.cases.backend_config = lambda: "backend: %s\n" % self.redis.url(
            cold_start="full", tick_ms=200, timeout_ms=300)

    def stop(self):
        self.redis.close()

    def flush(self):
        self.redis.command("FLUSHALL")

    def flushed(self, case, module):
        """A subclass of TestCase class `case`, named Redis<case> in test module `module`
        (whose setUpModule starts this), whose tests each start on an empty
        redis-server."""
        on = self

        def set_up(test):
            on.flush()
            case.setUp(test)

        return type("Redis" + case.__name__, (case,), {"setUp": set_up, "__module__": module})


def on_redis(module, test_file, *names):
    """What test module `module` (its __name__) needs to run the classes `names` of proxy
    test module `test_file` on Redis: (setUpModule, tearDownModule, [their Redis
    subclasses])."""
    on = OnRedis(load(test_file))
    return on.start, on.stop, [on.flushed(getattr(on.cases, n), module) for n in names]
