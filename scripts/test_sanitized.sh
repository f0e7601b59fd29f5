#!/usr/bin/env bash
# Builds the library unit tests with AddressSanitizer + UndefinedBehaviorSanitizer
# (-DEVALRUN_SANITIZE=address,undefined, the default compiler) in build-asan/ and runs them:
# `ctest -L library` = every test under tests/unit/ plus the replay of each fuzz target's committed
# corpus (tests/fuzz). Extra arguments go to ctest.
#   scripts/test_sanitized.sh --all [CTEST ARGS]   every target and every test (cli, mpi, e2e, slurm
#                                                   included); hours on 2 cores, see
#                                                   docs/building-and-testing.md
#
# That includes tests/unit/quant's evalrun_int8_cli_test, which runs the sanitized evalrun binary
# (also under mpirun -n 2). Left out: the other tests that run the binary (tests/cli, tests/mpi,
# tests/e2e), to keep the time in bounds (docs/building-and-testing.md, "Fuzzing and sanitizers").
# Any ASan or UBSan report fails the test (abort_on_error / halt_on_error). Leak checking is on;
# scripts/sanitizer/lsan.supp suppresses Open MPI's process-lifetime allocations (the reasons are in
# the file). With EVALRUN_DATA_DIR set, the tests on the shared data run too.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${EVALRUN_ASAN_BUILD_DIR:-$root/build-asan}
jobs=${EVALRUN_JOBS:-2}

export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
export LSAN_OPTIONS="suppressions=$root/scripts/sanitizer/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1"
# Tests start mpirun themselves; as root Open MPI needs these (as in scripts/test.sh).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The build runs the test binaries too (gtest test discovery), so the options apply from here on.
# -O1 -g1 (line tables): what ASan's reports need, at well under the compile time of -O2 -g on the files
# that include libtorch's headers.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DEVALRUN_SANITIZE=address,undefined -DEVALRUN_WERROR=OFF >/dev/null
if [[ "${1:-}" == "--all" ]]; then
  shift
  cmake --build "$build" -j"$jobs"
  cd "$build"
  # 3600 s: the bad-input table runs about 200 sanitized evalrun processes one after another.
  ctest --output-on-failure -j"$jobs" --timeout 3600 "$@"
else
  cmake --build "$build" -j"$jobs" --target library_tests
  cd "$build"
  ctest -L library --output-on-failure -j"$jobs" --timeout 900 "$@"
fi
