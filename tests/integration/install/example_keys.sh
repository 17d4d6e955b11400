#!/usr/bin/env bash
# example_keys.sh - examples/sluice.yaml "documents every key": each top-level key the
# config parser knows (the rows of root_fields[], the top level's field table in
# src/server/core/config_sections.c, and each feature's section, the `.key` of its
# sl_config_section_t in its src/server/FEATURE/config_*.c) appears in
# it, set or commented out (`key:` or `# key:` at the start of a line).
# usage: example_keys.sh SOURCE_DIR
set -euo pipefail
src=$1
example="$src/examples/sluice.yaml"
table="$src/src/server/core/config_sections.c"
[ -f "$table" ] || { echo "example_keys.sh: $table not found"; exit 1; }
keys=$( (sed -n '/^static const sl_config_field_t root_fields/,/^};/p' "$table" |
         grep -oE '^ +([A-Z]+\(|\{")[a-z_]+' | sed -E 's/^ +([A-Z]+\(|\{")//'
         grep -hoE 'sl_config_section_t sl__[a-z_]+ = \{\.key = "[a-z_]+"' \
              "$src"/src/server/*/config_*.c |
         sed 's/.*"\(.*\)"/\1/') | sort -u)
[ "$(wc -w <<<"$keys")" -gt 20 ] || { echo "example_keys.sh: the top-level keys were not found"; exit 1; }
missing=()
for k in $keys; do
  grep -Eq "^(# ?)?$k:" "$example" || missing+=("$k")
done
[ ${#missing[@]} -eq 0 ] || { echo "example_keys.sh: examples/sluice.yaml lacks: ${missing[*]}"; exit 1; }
echo "example_keys.sh: examples/sluice.yaml has all $(wc -w <<<"$keys") top-level keys"
