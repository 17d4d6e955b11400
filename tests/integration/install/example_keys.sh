#!/usr/bin/env bash
# example_keys.sh - examples/sluice.yaml "documents every key": each top-level key the
# config parser knows (the `strcmp(kname, "...")` of parse_root, in src/server/)
# appears in it, set or commented out (`key:` or `# key:` at the start of a line).
# usage: example_keys.sh SOURCE_DIR
set -euo pipefail
src=$1
example="$src/examples/sluice.yaml"
parser=$(grep -rl '^static int parse_root' "$src/src/server" --include='*.c' | head -n 1)
[ -n "$parser" ] || { echo "example_keys.sh: parse_root not found under src/server"; exit 1; }
keys=$(sed -n '/^static int parse_root/,/^}/p' "$parser" |
       grep -o 'strcmp(kname, "[a-z_]*")' | sed 's/.*"\(.*\)".*/\1/' | sort -u)
[ -n "$keys" ] || { echo "example_keys.sh: no keys found in parse_root"; exit 1; }
missing=()
for k in $keys; do
  grep -Eq "^(# ?)?$k:" "$example" || missing+=("$k")
done
[ ${#missing[@]} -eq 0 ] || { echo "example_keys.sh: examples/sluice.yaml lacks: ${missing[*]}"; exit 1; }
echo "example_keys.sh: examples/sluice.yaml has all $(wc -w <<<"$keys") top-level keys"
