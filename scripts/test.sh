#!/usr/bin/env bash
# Set up (apt packages, sentencepiece, build) and run the whole test suite with ctest.
# With EVALRUN_DATA_DIR pointing at the shared data (oracle checkpoints, SQuAD, ...) the tests that
# compare against Hugging Face reference outputs run too; without it they are skipped.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
build_dir=${EVALRUN_BUILD_DIR:-$root/build}
cd "$build_dir"
# Tests start mpirun themselves; as root Open MPI needs these.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --output-on-failure --timeout 900 "$@"
