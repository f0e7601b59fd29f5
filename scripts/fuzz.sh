#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang with ASan + UBSan) in build-fuzz/ and fuzzes each for
# SECONDS_PER_TARGET seconds (default 60), then prints per target: runs, coverage, findings.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]      targets: safetensors config squad prompts
#                                                          text_dataset bpe sentencepiece journal h5result
#                                                          (default: all)
#
# Each target starts from its committed corpus fuzz/corpus/TARGET (read only) plus what earlier runs
# found (build-fuzz/corpus/TARGET, where new inputs go); after a finding it is restarted for the time
# left. Finding inputs land in build-fuzz/findings/TARGET/ (crash-*, leak-*, timeout-*, oom-*). Reproduce one with `build-fuzz/fuzz/fuzz_TARGET FILE`; once fixed, copy it into
# fuzz/corpus/TARGET/ so the test suite replays it (tests/fuzz).
#
# Environment: EVALRUN_FUZZ_BUILD_DIR (default build-fuzz), EVALRUN_JOBS (build parallelism, 2),
# EVALRUN_FUZZ_ARGS (extra libFuzzer flags, e.g. -max_len=8192).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
shift || true
all_targets=(safetensors config squad prompts text_dataset bpe sentencepiece journal h5result)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")
build=${EVALRUN_FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${EVALRUN_JOBS:-2}

cxx=$(command -v clang++-14 || command -v clang++ || true)
cc=$(command -v clang-14 || command -v clang || true)
[ -n "$cxx" ] && [ -n "$cc" ] || { echo "fuzz.sh: clang is needed (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }

# sentencepiece instrumented for coverage and ASan, so the fuzzer sees inside the model loader and
# encoder (the copy in .deps is a plain build). Falls back to that copy when the source is unavailable.
deps="$build/deps"
if [ ! -f "$deps/sentencepiece/lib/libsentencepiece.so" ]; then
  echo "== building an instrumented sentencepiece into $deps/sentencepiece"
  flags="-fsanitize=fuzzer-no-link,address -fno-omit-frame-pointer -g"
  if ! EVALRUN_JOBS=$jobs bash "$root/scripts/build_sentencepiece.sh" "$deps/sentencepiece" \
        -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
        -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags"; then
    echo "fuzz.sh: note: instrumented sentencepiece build failed; using the uninstrumented .deps copy" >&2
    deps="$root/.deps"
  fi
fi

echo "== configuring and building the fuzz targets in $build"
mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEVALRUN_FUZZ=ON -DEVALRUN_BUILD_TESTS=OFF \
  -DEVALRUN_DEPS_DIR="$deps" >"$build/fuzz-configure.log" 2>&1 || { cat "$build/fuzz-configure.log"; exit 1; }
cmake --build "$build" -j"$jobs" --target $(printf 'fuzz_%s ' "${targets[@]}") >"$build/fuzz-build.log" 2>&1 ||
  { tail -50 "$build/fuzz-build.log"; exit 1; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
summary=()
for t in "${targets[@]}"; do
  bin="$build/fuzz/fuzz_$t"
  work="$build/corpus/$t"
  found="$build/findings/$t"
  log="$build/logs/$t.log"
  mkdir -p "$work" "$found" "$(dirname "$log")"
  : >"$log"
  dict=()
  [ -f "$root/fuzz/dict/$t.dict" ] && dict=(-dict="$root/fuzz/dict/$t.dict")
  before=$(find "$found" -type f | wc -l)
  echo "== fuzzing $t for ${secs}s (log: $log)"
  # One libFuzzer process at a time (fork mode re-runs its corpus in every child, several times
  # slower on the tokenizer targets). A finding stops it: it is restarted for the time left, at most
  # 25 times (a shallow finding would otherwise be re-found over and over).
  deadline=$((SECONDS + secs))
  runs=0 cov="?" ft="?" corp="?" restarts=0 rc=0
  while :; do
    left=$((deadline - SECONDS))
    [ "$left" -le 0 ] && break
    seg="$build/logs/$t.segment.log"
    # -timeout: one input taking 10 s is a hang; 2 GB for one small input is a finding.
    # shellcheck disable=SC2086
    "$bin" -max_total_time="$left" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -artifact_prefix="$found/" "${dict[@]}" ${EVALRUN_FUZZ_ARGS:-} "$work" "$root/fuzz/corpus/$t" >"$seg" 2>&1 &&
      rc=0 || rc=$?
    cat "$seg" >>"$log"
    # Status lines: "#RUNS  NEW|REDUCE|pulse|DONE  cov: C ft: F corp: N/SIZE ...".
    last=$(grep -aE '^#[0-9]+[[:space:]].* cov: ' "$seg" | tail -1 || true)
    if [ -n "$last" ]; then
      runs=$((runs + $(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$last")))
      cov=$(sed -nE 's/.* cov: ([0-9]+) .*/\1/p' <<<"$last")
      ft=$(sed -nE 's/.* ft: ([0-9]+) .*/\1/p' <<<"$last")
      corp=$(sed -nE 's#.* corp: ([0-9]+)/.*#\1#p' <<<"$last")
    fi
    [ "$rc" -eq 0 ] && break
    restarts=$((restarts + 1))
    [ "$restarts" -ge 25 ] && break
  done
  rm -f "$build/logs/$t.segment.log"
  new=$(( $(find "$found" -type f | wc -l) - before ))
  summary+=("$(printf '%-14s runs %-10s cov %-6s ft %-7s corpus %-6s findings %s' \
    "$t" "$runs" "$cov" "$ft" "$corp" "$new")")
  echo "${summary[-1]}"
done
echo
echo "== summary (${secs}s per target; findings: crash-*/leak-*/timeout-*/oom-* in $build/findings/TARGET/)"
printf '%s\n' "${summary[@]}"
