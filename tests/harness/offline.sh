#!/bin/sh
# offline.sh - runs a harness test in a network namespace of its own with only loopback
# up, so that no packet a harness sends can leave the machine (DNS included); the test's
# strace check still sees, and fails on, any connection it tries beyond loopback. Where
# this machine refuses a new namespace, says so and runs the test as it is.
#   tests/harness/offline.sh node --test claude.test.mjs
ip=$(command -v ip || echo /usr/sbin/ip)
if unshare -n "$ip" link set lo up 2>/dev/null; then
  exec unshare -n sh -c '"$0" link set lo up && exec "$@"' "$ip" "$@"
fi
echo "offline.sh: no network namespace here (unshare -n refused); strace still checks every connection" >&2
exec "$@"
