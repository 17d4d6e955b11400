#!/usr/bin/env bash
# run.sh - `cmake --install` into a staging DESTDIR, then build and run programs against
# the staged headers and libraries found through the staged pkg-config files only.
# usage: run.sh BUILD_DIR
set -euo pipefail
. "$(dirname "$0")/../listening.sh"
build="$1"
stage="$(mktemp -d /tmp/sluice-install.XXXXXX)"
trap 'rm -rf "$stage"' EXIT
fail() { echo "install: FAIL: $*" >&2; exit 1; }

DESTDIR="$stage" cmake --install "$build" --prefix /opt/sluice >/dev/null
root="$stage/opt/sluice"
for f in bin/sluiced bin/sluice include/sluice/common.h include/sluice/engine.h \
         include/sluice/client.h \
         lib/pkgconfig/sluice.pc lib/pkgconfig/sluice-client.pc \
         share/man/man1/sluice.1 share/man/man8/sluiced.8 share/man/man3/sluice-client.3; do
  [ -e "$root/$f" ] || fail "$f was not installed"
done
grep -q "^\.TH SLUICE 1" "$root/share/man/man1/sluice.1" || fail "sluice(1) has no .TH header"
for f in share/sluice/claude.json share/doc/sluice/examples/sluice.yaml; do
  [ -s "$root/$f" ] || fail "$f was not installed"
done

# The installed sluiced loads the installed vocabulary, never the build tree's: with it
# in place /metrics names it; moved away, the start fails naming that path.
unset SLUICE_VOCAB
printf 'pools:\n  default:\n    input_tpm: 6000\n' > "$stage/sluice.yaml"
"$root/bin/sluiced" --config "$stage/sluice.yaml" --listen 127.0.0.1:0 >"$stage/out" 2>&1 &
pid=$!
port=$(sl_wait_listening "$stage/out" "$pid")
[ -n "$port" ] || { kill "$pid" 2>/dev/null; fail "the installed sluiced did not start: $(cat "$stage/out")"; }
metric=$(curl -s "http://127.0.0.1:$port/metrics" | grep '^sluice_proxy_estimator_info' || true)
kill "$pid"; wait "$pid" || true
[ "$metric" = "sluice_proxy_estimator_info{estimator=\"tokenizer\",vocabulary=\"$root/share/sluice/claude.json\"} 1" ] \
  || fail "the installed sluiced's estimator: '$metric'"
mv "$root/share/sluice/claude.json" "$stage/moved.json"
if "$root/bin/sluiced" --config "$stage/sluice.yaml" --listen 127.0.0.1:0 >"$stage/out" 2>&1; then
  fail "the installed sluiced started without its vocabulary"
fi
grep -q "$root/share/sluice/claude.json" "$stage/out" \
  || fail "the error does not name the installed vocabulary: $(cat "$stage/out")"

export PKG_CONFIG_PATH="$root/lib/pkgconfig"
cat > "$stage/engine_user.c" <<'C'
#include <sluice/engine.h>
#include <stdio.h>
int main(void)
{
    sl_engine_t *e = sl_engine_new(NULL);
    sl_pool_config_t c;
    sl_pool_config_init(&c);
    c.input_tpm = 1000;
    if (sl_engine_configure_pool(e, "default", &c, 1.0) != SL_OK) return 1;
    sl_request_t r = {.agent = "a", .input_tokens = 10, .output_tokens = 1};
    sl_decision_t d;
    int rc = sl_engine_request(e, &r, 1.0, &d);
    printf("%s\n", rc == SL_OK && d.status == SL_GRANTED ? "granted" : "not granted");
    sl_engine_free(e);
    return 0;
}
C
cat > "$stage/client_user.c" <<'C'
#include <sluice/client.h>
#include <stdio.h>
int main(void)
{
    printf("%s\n", sl_client_strerror(0));
    return 0;
}
C
# Every installed header in one file, both libraries in one program.
headers=$(cd "$root/include" && ls sluice/*.h)
[ "$(echo "$headers" | wc -l)" -ge 3 ] || fail "expected common.h, engine.h, client.h; got: $headers"
{
  for h in $headers; do echo "#include <$h>"; done
  cat <<'C'
#include <stdio.h>
int main(void)
{
    sl_engine_t *e = sl_engine_new(NULL);
    sl_client_usage_t u;
    sl_client_usage_init(&u);
    printf("%s %s\n", sl_strerror(SL_ENOTFOUND), sl_client_strerror(SL_EMAXWAIT));
    sl_engine_free(e);
    return 0;
}
C
} > "$stage/all_headers.c"
cc -std=c11 -Wall -Wextra -Wpedantic -Werror "$stage/all_headers.c" \
  $(pkg-config --cflags --libs sluice sluice-client) -o "$stage/all_headers" \
  || fail "a program including every installed header does not build: $headers"
out=$(LD_LIBRARY_PATH="$root/lib" "$stage/all_headers")
[ "$out" = "not_found no grant before the wait ran out" ] || fail "all_headers printed '$out'"

cc -std=c11 "$stage/engine_user.c" $(pkg-config --cflags --libs sluice) -o "$stage/engine_user" \
  || fail "cannot build against libsluice via pkg-config"
out=$(LD_LIBRARY_PATH="$root/lib" "$stage/engine_user")
[ "$out" = "granted" ] || fail "engine program printed '$out'"
cc -std=c11 "$stage/client_user.c" $(pkg-config --cflags --libs sluice-client) \
  -o "$stage/client_user" || fail "cannot build against libsluice-client via pkg-config"
LD_LIBRARY_PATH="$root/lib" "$stage/client_user" >/dev/null || fail "client program failed"
echo "install: ok"
