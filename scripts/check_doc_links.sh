#!/usr/bin/env bash
# Checks the relative links of README.md and docs/*.md: every linked file exists, and every #anchor
# is a heading of the linked page (GitHub's anchors: lower case, punctuation dropped, spaces to
# hyphens; headings here are ASCII apart from dashes, which are dropped too). Prints each broken link
# as FILE:LINE: TARGET and exits 1 when there is one. The ctest test docs.links runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# The anchors of one Markdown file, one per line (a repeated heading gets -1, -2, ... as on GitHub).
anchors() {
  awk '
    /^```/ { fence = !fence; next }
    fence || !/^#+ / { next }
    {
      h = $0; sub(/^#+ +/, "", h); h = tolower(h)
      gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h)
      a = (h in seen) ? h "-" seen[h] : h; seen[h]++
      print a
    }' "$1"
}

broken=0
for page in README.md docs/*.md; do
  dir=$(dirname "$page")
  # Every "](target)" outside code blocks, as LINE TARGET.
  while read -r line target; do
    case "$target" in http://* | https://* | mailto:*) continue ;; esac
    path=${target%%#*}
    anchor=
    [[ "$target" == *"#"* ]] && anchor=${target#*#}
    file=$page
    [ -n "$path" ] && file=$dir/$path
    if [ ! -e "$file" ]; then
      echo "$page:$line: $target: no such file"; broken=1; continue
    fi
    if [ -n "$anchor" ] && ! anchors "$file" | grep -qxF -- "$anchor"; then
      echo "$page:$line: $target: no heading with that anchor in $file"; broken=1
    fi
  done < <(awk '/^```/ { fence = !fence; next } !fence {
             s = $0
             while (match(s, /\]\([^) ]+\)/)) {
               print NR, substr(s, RSTART + 2, RLENGTH - 3); s = substr(s, RSTART + RLENGTH)
             }
           }' "$page")
done
[ "$broken" = 0 ] && echo "README.md and docs/*.md: every relative link and anchor resolves"
exit "$broken"
