#!/usr/bin/env bash
# Builds sentencepiece from Debian's source package against the system protobuf (3.21) and installs the
# shared library into .deps/sentencepiece (Debian patches out the static one). Debian's own libsentencepiece embeds protobuf 3.14 and
# crashes before main() in any process that also loads libtorch (which links protobuf 3.21), so we
# never link it.
# Usage: build_sentencepiece.sh [PREFIX [CMAKE_ARGS...]] (default PREFIX .deps/sentencepiece; scripts/fuzz.sh
# builds an instrumented copy with clang flags this way).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix="${1:-$root/.deps/sentencepiece}"
shift || true
[ -f "$prefix/lib/libsentencepiece.so" ] && exit 0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
apt-get source -q sentencepiece >/dev/null 2>&1 || { echo "apt-get source sentencepiece failed (is a deb-src entry configured?)" >&2; exit 1; }
src=$(find . -maxdepth 1 -type d -name 'sentencepiece-*' | head -n1)
# init.h names the bundled protobuf-lite header by path even when the bundled copy is disabled.
sed -i 's|#include "third_party/protobuf-lite/google/protobuf/message_lite.h"|#include <google/protobuf/message_lite.h>|' "$src/src/init.h"
cmake -S "$src" -B build -DCMAKE_BUILD_TYPE=Release -DSPM_USE_BUILTIN_PROTOBUF=OFF \
  -DSPM_ENABLE_SHARED=ON "$@" >/dev/null
cmake --build build --target sentencepiece -j"${EVALRUN_JOBS:-$(nproc)}" >/dev/null
mkdir -p "$prefix/lib" "$prefix/include"
cp -P build/src/libsentencepiece.so* "$prefix/lib/"
cp "$src/src/sentencepiece_processor.h" "$prefix/include/"
echo "sentencepiece built into $prefix"
