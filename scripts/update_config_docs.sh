#!/usr/bin/env bash
# Rewrites the config-key table of docs/configuration.md (the lines between its "BEGIN evalrun
# help-config" and "END evalrun help-config" markers) from `evalrun help-config`, whose table comes
# from describe_config_keys() in src/config/config.cpp: the one source of both.
#   scripts/update_config_docs.sh [path/to/evalrun]           rewrite the page (default binary: build/)
#   scripts/update_config_docs.sh --check [path/to/evalrun]   change nothing; exit 1 and show the
#                                                             difference when the page has drifted
# The ctest test docs.config_table runs the --check form.
set -euo pipefail
check=0
if [ "${1:-}" = "--check" ]; then
  check=1
  shift
fi
root=$(cd "$(dirname "$0")/.." && pwd)
evalrun=${1:-$root/build/src/app/evalrun}
page=$root/docs/configuration.md
table=$(mktemp)
new=$(mktemp)
trap 'rm -f "$table" "$new"' EXIT

"$evalrun" help-config >"$table"
# Copy the page, replacing what lies between the markers with the table; exactly one BEGIN followed
# by one END is required.
if ! awk -v table="$table" '
  /^<!-- BEGIN evalrun help-config/ {
    print; begins++; inside = 1
    while ((getline line < table) > 0) print line
    next
  }
  /^<!-- END evalrun help-config/ { if (inside) ends++; inside = 0 }
  !inside { print }
  END { exit (begins == 1 && ends == 1) ? 0 : 1 }' "$page" >"$new"; then
  echo "$page: expected one '<!-- BEGIN evalrun help-config' line followed by one '<!-- END evalrun help-config' line" >&2
  exit 2
fi

if [ "$check" = 1 ]; then
  if ! diff -u --label "docs/configuration.md" --label "evalrun help-config" "$page" "$new"; then
    echo "docs/configuration.md: the key table differs from \`evalrun help-config\` (above);" \
         "run scripts/update_config_docs.sh to regenerate it" >&2
    exit 1
  fi
  echo "docs/configuration.md: the key table equals \`evalrun help-config\`"
elif ! cmp -s "$page" "$new"; then
  cp "$new" "$page"
  echo "docs/configuration.md: key table rewritten from \`evalrun help-config\`"
fi
