#!/usr/bin/env python3
"""run_python.py - the conformance runner of the Python client (clients/python).

usage: run_python.py CASES_FILE   (sluiced at $SLUICE_URL; driver.py starts one)

Maps each op of tests/clients/README.md onto the package's public API, one Client per
(agent, pool, role), and prints a line per case (conformance.py).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))
sys.path.insert(0, HERE)
import conformance  # noqa: E402
import sluice  # noqa: E402

DEFAULT_AGENT = "conformance"
CLIENT_MAX_WAIT_S = 30.0

clients = {}
owner = {}  # lease id -> the client that acquired it


def client(agent=None, pool=None, role=None):
    key = (agent or DEFAULT_AGENT, pool, role)
    if key not in clients:
        clients[key] = sluice.Client(agent=key[0], pool=pool, role=role,
                                     request_timeout_s=5.0)
    return clients[key]


def class_of(e):
    for cls in type(e).__mro__:
        if cls.__name__ in conformance.CLASSES:
            return cls.__name__
    return "Error"


def acquire(args, options):
    a = dict(args)
    c = client(a.pop("agent", None), a.pop("pool", None), a.pop("role", None))
    lease = c.acquire(a.pop("input_tokens"), a.pop("output_tokens"), a.pop("cached_tokens", 0),
                      max_wait_s=options.get("max_wait_s", CLIENT_MAX_WAIT_S),
                      request_id=a.pop("request_id", None), **a)
    owner[lease.id] = c
    return lease.raw


def settle(args, options):
    a = dict(args)
    lease = a.pop("lease")
    return owner.get(lease, client()).settle(lease, usage=sluice.Usage(
        input_tokens=a.get("input_tokens", 0), output_tokens=a.get("output_tokens", 0),
        cache_creation_input_tokens=a.get("cache_creation_input_tokens", 0),
        cache_read_input_tokens=a.get("cache_read_input_tokens", 0),
        got_429=a.get("got_429", False), retry_after=a.get("retry_after"),
        failed=a.get("failed", False), headers=a.get("headers") or {})).raw


def limit_check(args, options):
    c = client(args.get("agent"))
    kw = dict(key=args.get("key"), hits=args.get("hits", 1), action=args.get("action"),
              wait=args.get("wait", 0.0))
    if options.get("enforce"):
        with c.limit(args["limit"], **kw) as answer:
            return answer.raw
    return c.check(args["limit"], **kw).raw


OPS = {
    "acquire": acquire,
    "settle": settle,
    "cancel": lambda a, o: owner.get(a["lease"], client()).cancel(a["lease"]),
    "renew": lambda a, o: owner.get(a["lease"], client()).extend(a["lease"], a["ttl"]),
    "get_lease": lambda a, o: client().ticket(a["ticket"], a.get("wait", 0)),
    "estimate": lambda a, o: client().estimate(a["request"], a.get("api"), a.get("pool"),
                                               a.get("model")).raw,
    "limit_check": limit_check,
    "limit_release": lambda a, o: client(a.get("agent")).release(a["limit"], a.get("key")),
    "limit_report": lambda a, o: client(a.get("agent")).report(
        a["limit"], a.get("successes", 0), a.get("errors", 0), a.get("key")),
    "task_put": lambda a, o: client().put_task(a["task"], a.get("role"), a.get("depends_on"),
                                               a.get("state")),
    "pool_get": lambda a, o: client().get_pool(a["pool"]),
}


def do_step(op, args, options):
    try:
        return ("ok", OPS[op](args, options))
    except sluice.Error as e:
        return ("error", class_of(e), e.code, dict(e.answer, message=e.message))


if __name__ == "__main__":
    sys.exit(conformance.run(sys.argv[-1], do_step, set(sys.argv[1:-1]) or None))
