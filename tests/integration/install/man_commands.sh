#!/usr/bin/env bash
# man_commands.sh - sluice(1) documents every subcommand of src/cli/commands.def: each name
# appears in its SYNOPSIS as `.B sluice NAME` (or after `|` as `.B NAME`), so a new command
# cannot ship without its page.
# usage: man_commands.sh SOURCE_DIR
set -euo pipefail
src=$1
page="$src/docs/man/sluice.1"
synopsis=$(sed -n '/^\.SH SYNOPSIS/,/^\.SH /p' "$page" | sed 's/\\-/-/g')
missing=()
for name in $(sed -n 's/^SL_CLI_COMMAND([^,]*, *"\([^"]*\)".*/\1/p' "$src/src/cli/commands.def"); do
  grep -Eq "^\.B (sluice )?$name( |$)" <<<"$synopsis" || missing+=("$name")
done
[ ${#missing[@]} -eq 0 ] || { echo "man_commands.sh: sluice(1) SYNOPSIS lacks: ${missing[*]}"; exit 1; }
echo "man_commands.sh: sluice(1) lists every subcommand"
