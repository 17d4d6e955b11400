#!/bin/sh
# systemd_inside.sh - run by systemd.sh's check unit inside the booted container (root,
# systemd as PID 1): sluiced.service as systemd runs it from the package. Writes one line
# per check to RESULT_DIR/log ("ok: ..." or "FAIL: ..."), the journal to
# RESULT_DIR/journal, and "all checks passed" last when every check passed.
# usage: sluice-systemd-check RESULT_DIR
set -u
out=$1
log="$out/log"
: >"$log"
S=http://127.0.0.1:8750
EMU_KEY=sk-ant-credential-check-0001
ADMIN=change-me-admin-check-0001
failed=0
ok() { echo "ok: $*" >>"$log"; }
bad() { echo "FAIL: $*" >>"$log"; failed=1; }
finish() {
  journalctl --no-pager -o short-iso -u sluiced -u sluice-emu >"$out/journal" 2>&1
  [ "$failed" -eq 0 ] && echo "all checks passed" >>"$log"
  exit 0
}
wait_active() {
  i=0
  while [ "$i" -lt 100 ]; do
    [ "$(systemctl is-active "$1")" = active ] && curl -fs "$2" >/dev/null 2>&1 && return 0
    sleep 0.2
    i=$((i + 1))
  done
  return 1
}
journal_has() { journalctl --no-pager -u sluiced | grep -q "$1"; }

# 1. Enabled by the package's postinst and started at boot.
[ "$(systemctl is-enabled sluiced)" = enabled ] && ok "sluiced.service is enabled" \
  || bad "sluiced.service is $(systemctl is-enabled sluiced), not enabled"
wait_active sluiced "$S/readyz" && ok "systemd started sluiced at boot; /readyz answers" \
  || { bad "sluiced is $(systemctl is-active sluiced) after boot"; finish; }

# 2. Its user and its sandbox, as systemd made them.
pid=$(systemctl show -p MainPID --value sluiced)
uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
if [ "$uid" -ge 61184 ] && [ "$uid" -le 65519 ]; then ok "runs as dynamic user $uid"
else bad "runs as uid $uid, not a DynamicUser uid"; fi
grep -q '^NoNewPrivs:[[:space:]]*1' "/proc/$pid/status" && ok "no new privileges" \
  || bad "NoNewPrivs is not set"
grep -q '^CapEff:[[:space:]]*0000000000000000' "/proc/$pid/status" && ok "no capabilities" \
  || bad "effective capabilities: $(grep CapEff "/proc/$pid/status")"
grep -q '^Seccomp:[[:space:]]*2' "/proc/$pid/status" && ok "a system call filter is on" \
  || bad "no seccomp filter"
[ -d /tmp ] && [ "$(readlink "/proc/$pid/ns/mnt")" != "$(readlink /proc/1/ns/mnt)" ] \
  && ok "its own mount namespace (ProtectSystem, PrivateTmp)" || bad "no mount namespace of its own"

# 3. It works: a lease, the vocabulary, the state file and the event log where the unit
# puts them (DynamicUser keeps them under /var/lib/private and /var/log/private).
grant=$(curl -s -X POST "$S/v1/leases" -H 'content-type: application/json' \
          -d '{"agent":"systemd-check","input_tokens":100,"output_tokens":10,"wait":10}')
echo "$grant" | grep -q '"status":"granted"' && ok "a lease granted" || bad "no lease: $grant"
journal_has "tokenizer vocabulary /usr/share/sluice/claude.json" \
  && ok "the journal shows the vocabulary loaded" || bad "no vocabulary line in the journal"
state=/var/lib/private/sluice/state
i=0
while [ ! -s "$state" ] && [ "$i" -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
[ -s "$state" ] && [ "$(stat -c %u "$state")" = "$uid" ] \
  && ok "state file in the StateDirectory, owned by the dynamic user" \
  || bad "no state file $state owned by $uid: $(ls -l /var/lib/private/sluice 2>&1)"
events=/var/log/private/sluice/events.jsonl
i=0
while [ ! -s "$events" ] && [ "$i" -lt 50 ]; do sleep 0.2; i=$((i + 1)); done  # flushed every 250 ms
grep -q '"event":"granted"' "$events" && ok "event log in the LogsDirectory" \
  || bad "no event log: $(ls -l /var/log/private/sluice 2>&1)"

# 4. systemctl reload (ExecReload: SIGHUP) rereads the configuration.
systemctl reload sluiced && sleep 0.5
journal_has "configuration reloaded" && ok "systemctl reload reread the configuration" \
  || bad "no reload in the journal"

# 5. A provider key from LoadCredential=, a proxied call with a token minted by the CLI.
systemd-run --quiet --unit=sluice-emu -p DynamicUser=yes /usr/bin/sluice-emu \
  --listen 127.0.0.1:8760 --input-tpm 100000 --output-tpm 100000 --rpm 1000 --api-key "$EMU_KEY"
umask 077
printf '%s\n' "$EMU_KEY" >/etc/sluice/anthropic.key
mkdir -p /etc/systemd/system/sluiced.service.d
printf '[Service]\nLoadCredential=anthropic:/etc/sluice/anthropic.key\n' \
  >/etc/systemd/system/sluiced.service.d/key.conf
cat >/etc/sluice/sluice.yaml <<YAML
listen: 127.0.0.1:8750
state_file: /var/lib/sluice/state
event_log: /var/log/sluice/events.jsonl
proxy:
  estimator: tokenizer
auth:
  admin_token: "$ADMIN"
pools:
  default:
    input_tpm: 100000
    output_tpm: 100000
    rpm: 1000
    upstream_url: http://127.0.0.1:8760
    provider: anthropic
    api_key_file: /run/credentials/sluiced.service/anthropic
YAML
systemctl daemon-reload
systemctl restart sluiced
wait_active sluiced "$S/readyz" && ok "restarted with a LoadCredential= key" \
  || { bad "sluiced is $(systemctl is-active sluiced) with the credential"; finish; }
wait_active sluice-emu http://127.0.0.1:8760/stats || bad "sluice-emu did not start"
minted=$(sluice token create --agent fleet-1 --server "$S" --token "$ADMIN" 2>/dev/null |
         awk '$1 == "token" {print $2}')
[ -n "$minted" ] && ok "sluice token create minted a token" || bad "no token minted"
call() {
  curl -s -o "$out/answer.json" -w '%{http_code}' -X POST "$S/anthropic/v1/messages" \
    -H 'content-type: application/json' -H "x-api-key: $1" -H 'anthropic-version: 2023-06-01' \
    -d '{"model":"claude-emu-1","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}'
}
st=$(call "$minted")
[ "$st" = 200 ] && grep -q '"usage"' "$out/answer.json" \
  && ok "a proxied call with the minted token reached the provider with the credential key" \
  || bad "proxied call: $st $(cat "$out/answer.json" 2>/dev/null)"
st=$(call not-a-token)
[ "$st" = 401 ] && ok "an unknown token is refused (401)" || bad "an unknown token got $st"
curl -s http://127.0.0.1:8760/stats | grep -q '^{"requests": *1,' \
  && ok "the provider saw exactly one call" || bad "provider stats: $(curl -s http://127.0.0.1:8760/stats)"
systemctl restart sluiced
wait_active sluiced "$S/readyz" || bad "no restart"
st=$(call "$minted")
[ "$st" = 200 ] && ok "the minted token survives a restart (kept hashed in the StateDirectory)" \
  || bad "after a restart the minted token got $st"

# 6. How exposed the unit is, as systemd rates it (printed, not judged).
score=$(systemd-analyze security --no-pager sluiced 2>/dev/null | tail -n 1)
echo "info: systemd-analyze security: $score" >>"$log"

# 7. systemctl stop: SIGTERM, drained, a clean exit.
systemctl stop sluiced
[ "$(systemctl show -p Result --value sluiced)" = success ] \
  && [ "$(systemctl show -p ExecMainStatus --value sluiced)" = 0 ] \
  && ok "systemctl stop: exit 0" \
  || bad "stop: Result=$(systemctl show -p Result --value sluiced) status=$(systemctl show -p ExecMainStatus --value sluiced)"
finish
