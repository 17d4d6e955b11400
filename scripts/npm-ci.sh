# Shared by the npm setup steps (scripts/setup.d/*): installs a test directory's pinned
# packages with `npm ci` when they are missing or were installed from another
# package-lock.json, so a machine set up before a pin changed gets the new versions.
# Usage (sourced): sl_npm_ci STEP_NAME DIR
sl_npm_ci() {
  local step="$1" dir="$2"
  local stamp="$dir/node_modules/.sluice-lock.sha256"
  local want
  want="$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)"
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && return 0
  command -v npm >/dev/null || { echo "$step: npm is required" >&2; return 1; }
  echo "$step: npm ci in $dir"
  (cd "$dir" && npm ci --silent --no-audit --no-fund) || return 1
  echo "$want" >"$stamp"
}
