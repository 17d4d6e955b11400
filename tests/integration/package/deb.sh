#!/usr/bin/env bash
# deb.sh - the Debian packages, for real: `make deb`'s script builds them, `dpkg -i` installs
# them on this machine, `systemd-analyze verify` accepts the installed unit, and sluiced
# started with the unit's own ExecStartPre and ExecStart lines, the shipped
# /etc/sluice/sluice.yaml and the unit's user setup (an unprivileged user, no new
# privileges, StateDirectory and LogsDirectory made as systemd makes them) serves a lease,
# has loaded /usr/share/sluice/claude.json, journals its state, reloads on SIGHUP
# (ExecReload) and drains on SIGTERM. libsluice-dev builds a program. Everything is
# purged afterwards. Needs root (dpkg); refuses to touch a machine where sluice is installed.
# usage: deb.sh SOURCE_DIR OUT_DIR
set -euo pipefail
. "$(dirname "$0")/../listening.sh"
src=$1
out=$2
fail() { echo "package: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root (dpkg -i)"
for p in sluice libsluice0 libsluice-client0 libsluice-dev; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
    fail "$p is already installed here; this test installs and purges its own build"
  fi
done
for d in /var/lib/sluice /var/lib/private/sluice /var/log/sluice /etc/sluice; do
  [ ! -e "$d" ] || fail "$d exists; this test would remove it"
done

tmp=$(mktemp -d /tmp/sluice-package.XXXXXX)
pid=""
cleanup() {
  [ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null || true
  dpkg --purge sluice libsluice-dev libsluice-client0 libsluice0 >/dev/null 2>&1 || true
  rm -rf /var/lib/sluice /var/log/sluice "$tmp"
}
trap cleanup EXIT

# 1. Build.
start=$(date +%s)
bash "$src/scripts/deb.sh" "$out" >"$tmp/build.out" || { cat "$tmp/build.out"; fail "the build failed"; }
echo "package: built in $(( $(date +%s) - start )) s: $(cd "$out" && ls ./*.deb | grep -v dbgsym | tr '\n' ' ')"
debs=()
for p in sluice libsluice0 libsluice-client0 libsluice-dev; do
  f=$(ls "$out/${p}_"*.deb 2>/dev/null | head -n 1)
  [ -n "$f" ] || fail "no ${p}_*.deb in $out"
  debs+=("$f")
done

# 2. Install.
dpkg -i "${debs[@]}" >"$tmp/dpkg.out" 2>&1 || { cat "$tmp/dpkg.out"; fail "dpkg -i failed"; }
for f in /usr/bin/sluiced /usr/bin/sluice /usr/bin/sluice-emu /usr/share/sluice/claude.json \
         /etc/sluice/sluice.yaml /lib/systemd/system/sluiced.service \
         /usr/share/man/man8/sluiced.8.gz /usr/share/man/man1/sluice.1.gz \
         /usr/include/sluice/engine.h /usr/share/doc/sluice/examples/sluice.yaml; do
  [ -e "$f" ] || fail "$f is not installed"
done
grep -qx /etc/sluice/sluice.yaml /var/lib/dpkg/info/sluice.conffiles || fail "sluice.yaml is not a conffile"

# 3. The unit. systemd-analyze verify reads the unit files and needs no running manager.
unit=/lib/systemd/system/sluiced.service
systemd-analyze verify "$unit" >"$tmp/verify.out" 2>&1 || { cat "$tmp/verify.out"; fail "systemd-analyze verify refused the unit"; }
[ ! -s "$tmp/verify.out" ] || { cat "$tmp/verify.out"; fail "systemd-analyze verify complained"; }
for key in DynamicUser=yes StateDirectory=sluice LogsDirectory=sluice LimitNOFILE= \
           'ExecReload=/bin/sh -c "kill -HUP $MAINPID"' EnvironmentFile=-/etc/sluice/sluice.env \
           ProtectSystem=strict ProtectHome=yes PrivateTmp=yes NoNewPrivileges=yes \
           RestrictAddressFamilies= SystemCallFilter=@system-service; do
  grep -q "^$key" "$unit" || fail "the unit has no $key"
done

# 4. The unit's command lines, as its user would run them. systemd is not PID 1 on every
# test machine, so the unit's user and directories are made as systemd makes them.
uid=61900
exec_line() { sed -n "s/^$1=//p" "$unit" | head -n 1; }
pre=$(exec_line ExecStartPre)
cmd=$(exec_line ExecStart)
[ -n "$cmd" ] || fail "no ExecStart"
install -d -m 0700 -o "$uid" -g "$uid" /var/lib/sluice
install -d -m 0750 -o "$uid" -g "$uid" /var/log/sluice
# The unit's environment: an unprivileged user, no new privileges, only what the unit sets.
unit_user=(env -i PATH=/usr/bin:/bin "SLUICED_OPTS=--listen 127.0.0.1:0"
           setpriv --reuid="$uid" --regid="$uid" --clear-groups --no-new-privs)
(cd / && "${unit_user[@]}" sh -c "umask 0077; exec $pre") >"$tmp/pre.out" 2>&1 \
  || { cat "$tmp/pre.out"; fail "ExecStartPre failed"; }
# exec all the way down: the background job's pid is sluiced's, so signals reach it.
(cd / && exec "${unit_user[@]}" sh -c "umask 0077; exec $cmd") >"$tmp/sluiced.out" 2>&1 &
pid=$!
port=$(sl_wait_listening "$tmp/sluiced.out" "$pid")
[ -n "$port" ] || { cat "$tmp/sluiced.out"; fail "the installed sluiced did not start"; }
S="http://127.0.0.1:$port"
grant=$(curl -s -X POST "$S/v1/leases" -H 'content-type: application/json' \
          -d '{"agent":"package-test","input_tokens":100,"output_tokens":10,"wait":10}')
grep -q '"status":"granted"' <<<"$grant" || fail "no lease granted: $grant"
metric=$(curl -s "$S/metrics" | grep '^sluice_proxy_estimator_info' || true)
[ "$metric" = 'sluice_proxy_estimator_info{estimator="tokenizer",vocabulary="/usr/share/sluice/claude.json"} 1' ] \
  || fail "estimator: '$metric'"
grep -q "tokenizer vocabulary /usr/share/sluice/claude.json" "$tmp/sluiced.out" \
  || fail "no start line naming the vocabulary: $(cat "$tmp/sluiced.out")"
[ -s /var/lib/sluice/state ] && [ "$(stat -c %u /var/lib/sluice/state)" = "$uid" ] \
  || fail "no state file owned by the unit's user in the StateDirectory"
kill -HUP "$pid"   # ExecReload
for _ in $(seq 1 50); do grep -q "configuration reloaded" "$tmp/sluiced.out" && break; sleep 0.1; done
grep -q "configuration reloaded" "$tmp/sluiced.out" || fail "SIGHUP did not reload: $(cat "$tmp/sluiced.out")"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
[ "$rc" -eq 0 ] || { cat "$tmp/sluiced.out"; fail "sluiced exited $rc on SIGTERM"; }
[ -s /var/log/sluice/events.jsonl ] || fail "no event log in the LogsDirectory"

# 5. The development package.
cat > "$tmp/engine_user.c" <<'C'
#include <sluice/engine.h>
#include <stdio.h>
int main(void)
{
    sl_engine_t *e = sl_engine_new(NULL);
    printf("%s\n", e ? "engine" : "none");
    sl_engine_free(e);
    return 0;
}
C
cc -std=c11 "$tmp/engine_user.c" $(pkg-config --cflags --libs sluice) -o "$tmp/engine_user" \
  || fail "cannot build against the installed libsluice-dev"
[ "$("$tmp/engine_user")" = engine ] || fail "a program linked with libsluice0 failed"

# 6. Removal.
dpkg --purge sluice libsluice-dev libsluice-client0 libsluice0 >"$tmp/purge.out" 2>&1 \
  || { cat "$tmp/purge.out"; fail "dpkg --purge failed"; }
[ ! -e /etc/sluice/sluice.yaml ] && [ ! -e /usr/bin/sluiced ] || fail "purge left files"
echo "package: ok (dpkg -i, systemd-analyze verify, ExecStart served a lease with the vocabulary, purged)"
