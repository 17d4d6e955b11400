#!/usr/bin/env bash
# systemd.sh - the packaged unit under a real systemd: a minimal Debian 12 root (debootstrap,
# cached under /var/cache/sluice-test) booted with systemd-nspawn, so systemd is PID 1 in
# the container even where it is not on the machine. The packages are installed in it with
# dpkg -i (their postinst enables sluiced.service), the container boots, and
# systemd_inside.sh checks as systemd runs it: the unit is started at boot under a dynamic
# user in its sandbox, serves a lease with the vocabulary loaded, keeps its state in the
# StateDirectory, reloads on `systemctl reload`, reads a provider key from LoadCredential=
# and proxies a call to sluice-emu with it, and stops cleanly; `systemd-analyze security`
# prints its exposure. The container has its own network namespace (loopback only).
# Needs root, systemd-nspawn and debootstrap (scripts/setup.d/60-deb-tools.sh) and, the
# first time on a machine, Debian's mirror (about 2.5 min; later runs reuse the root).
# usage: systemd.sh SOURCE_DIR DEB_DIR   (DEB_DIR: package_deb's .deb files, built if absent)
set -euo pipefail
src=$1
debs_dir=$2
here="$(cd "$(dirname "$0")" && pwd)"
fail() { echo "systemd: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root (systemd-nspawn)"
command -v systemd-nspawn >/dev/null || fail "systemd-nspawn is missing (scripts/setup.d/60-deb-tools.sh)"
command -v debootstrap >/dev/null || fail "debootstrap is missing (scripts/setup.d/60-deb-tools.sh)"

# 1. The packages (package_deb leaves them in DEB_DIR).
if ! ls "$debs_dir"/sluice_*.deb >/dev/null 2>&1; then
  bash "$src/scripts/deb.sh" "$debs_dir" >/dev/null || fail "make deb's build failed"
fi
debs=()
for p in sluice libsluice0 libsluice-client0; do
  f=$(ls "$debs_dir/${p}_"*.deb 2>/dev/null | head -n 1)
  [ -n "$f" ] || fail "no ${p}_*.deb in $debs_dir"
  debs+=("$f")
done

# 2. The root: what the packages depend on (from their own control files), systemd as
# init, curl for the checks. Cached by that list: a new dependency makes a new root.
deps=$(for f in "${debs[@]}"; do dpkg-deb -f "$f" Depends; done | tr ',' '\n' |
       sed -e 's/(.*)//' -e 's/|.*//' -e 's/[[:space:]]//g' | grep -v '^$' |
       grep -v -e '^libsluice' -e '^sluice' | sort -u | tr '\n' ',')
include="${deps}systemd,systemd-sysv,dbus,curl,ca-certificates"
key=$(printf '%s' "$include" | sha256sum | cut -c1-12)
cache_dir=/var/cache/sluice-test
cache="$cache_dir/bookworm-$key"
if [ ! -x "$cache/usr/bin/systemctl" ]; then
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/*$/\1/p' /etc/apt/sources.list.d/debian.sources \
           2>/dev/null | head -n 1)
  mirror=${mirror:-http://deb.debian.org/debian}
  mkdir -p "$cache_dir"
  rm -rf "$cache.tmp"
  start=$(date +%s)
  debootstrap --variant=minbase --include="$include" bookworm "$cache.tmp" "$mirror" \
    >"$cache_dir/debootstrap-$key.log" 2>&1 \
    || { tail -n 20 "$cache_dir/debootstrap-$key.log"; fail "debootstrap failed (log above)"; }
  mv "$cache.tmp" "$cache"
  echo "systemd: made the container root in $(( $(date +%s) - start )) s ($cache)"
fi

tmp=$(mktemp -d /tmp/sluice-systemd.XXXXXX)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
root="$tmp/root"
cp -a "$cache" "$root"
mkdir -p "$tmp/result" "$root/debs"
cp "${debs[@]}" "$root/debs/"
cp "$here/systemd_inside.sh" "$root/usr/local/sbin/sluice-systemd-check"
chmod 0755 "$root/usr/local/sbin/sluice-systemd-check"

nspawn=(systemd-nspawn --quiet --register=no --keep-unit --private-network -D "$root")

# 3. Install as a machine without a running systemd would: the postinst enables the unit.
"${nspawn[@]}" --pipe sh -c 'dpkg -i /debs/*.deb' >"$tmp/dpkg.out" 2>&1 \
  || { cat "$tmp/dpkg.out"; fail "dpkg -i in the container failed"; }
[ -L "$root/etc/systemd/system/multi-user.target.wants/sluiced.service" ] \
  || { cat "$tmp/dpkg.out"; fail "the postinst did not enable sluiced.service"; }

# 4. Boot. The check runs as a unit once the system is up, writes what it saw into
# /result and powers the container off.
cat > "$root/etc/systemd/system/sluice-systemd-check.service" <<'UNIT'
[Unit]
Description=sluice package test: sluiced.service under systemd
After=multi-user.target sluiced.service
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/sluice-systemd-check /result
ExecStopPost=/bin/systemctl poweroff --no-block
[Install]
WantedBy=multi-user.target
UNIT
ln -s /etc/systemd/system/sluice-systemd-check.service \
  "$root/etc/systemd/system/multi-user.target.wants/sluice-systemd-check.service"
start=$(date +%s)
rc=0
timeout --kill-after=10 300 "${nspawn[@]}" --console=read-only --bind="$tmp/result:/result" -b \
  >"$tmp/console.out" 2>&1 || rc=$?
echo "systemd: the container booted, ran the checks and powered off in $(( $(date +%s) - start )) s (nspawn exit $rc)"
[ -s "$tmp/result/log" ] || { tail -n 40 "$tmp/console.out"; fail "the check did not run (console above)"; }
cat "$tmp/result/log"
grep -q '^FAIL' "$tmp/result/log" && { [ ! -s "$tmp/result/journal" ] || tail -n 60 "$tmp/result/journal"; fail "a check failed (log above)"; }
grep -qx 'all checks passed' "$tmp/result/log" || fail "the checks did not finish"
echo "systemd: ok (sluiced.service enabled by the package, started at boot by systemd, sandboxed, served, reloaded, credential key, stopped)"
