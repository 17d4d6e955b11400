#!/usr/bin/env bash
# Exactness test: token counts of `sluice count-tokens` equal @anthropic-ai/tokenizer's
# (run with node) on every corpus file whose name matches the extended regex PATTERN.
# usage: exactness.sh SLUICE GEN_CORPUS NODE_DIR PATTERN
# Fails when node or the pinned npm package is missing: `make test` installs them.
set -euo pipefail
sluice="$1" gen="$2" node_dir="$3" pattern="$4"

if ! command -v node >/dev/null || [ ! -d "$node_dir/../node_modules/@anthropic-ai/tokenizer" ]; then
  echo "FAIL: node or tests/node_modules missing (run scripts/setup.d/20-node-tests.sh)"
  exit 1
fi
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
"$gen" "$dir"

files=()
for f in "$dir"/*; do
  [[ "$(basename "$f")" =~ $pattern ]] && files+=("$f")
done
[ ${#files[@]} -gt 0 ] || { echo "no corpus file matches $pattern"; exit 1; }

(cd "$node_dir" && node count.js "${files[@]}") > "$dir/node.out"
fail=0
total_bytes=0
while IFS=$'\t' read -r expected f; do
  actual="$("$sluice" count-tokens "$f")"
  bytes=$(stat -c %s "$f")
  total_bytes=$((total_bytes + bytes))
  if [ "$actual" = "$expected" ]; then
    printf 'ok   %-24s %9d bytes %8d tokens\n' "$(basename "$f")" "$bytes" "$actual"
  else
    printf 'FAIL %-24s %9d bytes: sluice %s, npm %s\n' "$(basename "$f")" "$bytes" "$actual" "$expected"
    fail=1
  fi
done < "$dir/node.out"
echo "compared $total_bytes bytes in ${#files[@]} files"
exit $fail
