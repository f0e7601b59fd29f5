#!/usr/bin/env bash
# Rewrites the config-key table in README.md from `evalrun help-config` (the one source of truth).
# Usage: scripts/update_readme_config.sh [path/to/evalrun]
set -euo pipefail
cd "$(dirname "$0")/.."
evalrun=${1:-build/src/app/evalrun}
table=$("$evalrun" help-config)
python3 - "$table" <<'PY'
import sys
table = sys.argv[1].rstrip("\n").split("\n")
lines = open("README.md").read().split("\n")
start = next(i for i, l in enumerate(lines) if l.startswith("| key "))
end = start
while end < len(lines) and lines[end].startswith("|"):
    end += 1
lines[start:end] = table
open("README.md", "w").write("\n".join(lines))
PY
