#!/usr/bin/env bash
# The CUDA verification of issue 9, as one script for a machine with an NVIDIA GPU:
#   1. finds a CUDA-enabled libtorch (TORCH_PREFIX, else the python3 torch's cmake prefix path),
#   2. configures and builds build-cuda/ with -DEVALRUN_CUDA=ON (a CPU-only libtorch is an error),
#   3. runs the device tests and the MPI run tests,
#   4. parity: tiny QA and generation, model.device = "cuda" fp32 against the CPU fp32 run, with the CI
#      regression's limits (tests/regression/thresholds.toml: logits within 1e-4, identical tokens and
#      answers); fp16 on the GPU is compared and reported, not required to pass,
#   5. throughput: roberta-base QA and llama-110m generation (random weights of real shapes) on the CPU
#      and on the GPU, samples/s and tokens/s from the result files.
# Everything goes to $OUT (default gpu_check/): the log, the result files, summary.md.
#
#   scripts/gpu_check.sh [--quick]      --quick: skip the full test suite and the throughput runs
#
# Needs the project's build dependencies (scripts/setup.sh installs them; on a machine without Debian
# packages, the tarball of scripts/carry_deps.sh pack in .carry/, unpacked and used when h5pcc is
# missing), sentencepiece in .deps/ (or EVALRUN_DEPS_DIR), and a libtorch built with the C++11 ABI, like
# Debian's libraries (PyTorch wheels from 2.7 on are; older ones need the cxx11-abi libtorch zip).
# Exit 0: every check passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/gpu_check}
quick=0
[ "${1:-}" = "--quick" ] && quick=1
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
fail() { echo "FAIL: $*"; status=1; }
summary="$out/summary.md"
echo "# evalrun GPU check ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(git rev-parse --short HEAD 2>/dev/null))" > "$summary"

# --- 1. the machine and libtorch ------------------------------------------------------------------
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$summary" ||
  { echo "no nvidia-smi / GPU"; exit 2; }
prefix=${TORCH_PREFIX:-}
if [ -z "$prefix" ]; then
  prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
    { echo "no TORCH_PREFIX and no python3 torch: point TORCH_PREFIX at a CUDA-enabled libtorch"; exit 2; }
  python3 - <<'PY' | tee -a "$summary"
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, available {torch.cuda.is_available()}, "
      f"devices {torch.cuda.device_count()}, cxx11 ABI {torch._C._GLIBCXX_USE_CXX11_ABI}")
if not torch._C._GLIBCXX_USE_CXX11_ABI:
    raise SystemExit("this torch uses the pre-C++11 ABI: it cannot link with Debian's spdlog/toml11 builds")
PY
  [ "${PIPESTATUS[0]}" = 0 ] || exit 2
fi
gpus=$(nvidia-smi -L | wc -l)
ranks=$(( gpus >= 2 ? 2 : 1 ))

# --- 2. build -------------------------------------------------------------------------------------
# A machine without the Debian packages (the lent GPU machine): the carried ones (scripts/carry_deps.sh
# pack, here; carry .carry and .deps), unpacked outside the tree.
carry=${EVALRUN_CARRY_TARBALL:-$root/.carry/evalrun-deps.tar.xz}
if ! command -v h5pcc >/dev/null && [ -f "$carry" ]; then
  scripts/carry_deps.sh unpack "$carry" "${TMPDIR:-/tmp}/evalrun-deps" || exit 2
  # shellcheck disable=SC1091
  source "${TMPDIR:-/tmp}/evalrun-deps/env.sh"
  echo "- build dependencies: carried ($carry)" >> "$summary"
fi
deps=${EVALRUN_DEPS_DIR:-$root/.deps}
# shellcheck disable=SC2086
cmake -S . -B build-cuda -DEVALRUN_WERROR=ON -DEVALRUN_CUDA=ON -DCMAKE_PREFIX_PATH="$prefix" \
  -DEVALRUN_DEPS_DIR="$deps" ${EVALRUN_CARRY_CMAKE_ARGS:-} || { echo "configure failed"; exit 2; }
cmake --build build-cuda -j"$(nproc)" || { echo "build failed"; exit 2; }
bin=build-cuda/src/app/evalrun

# --- 3. tests -------------------------------------------------------------------------------------
(cd build-cuda && ctest -R 'Placement|AiuEnv|Plan\.|Plugin\.|DeviceRun' --output-on-failure) || fail "device tests"
if [ "$quick" = 0 ]; then
  (cd build-cuda && ctest -j"$(nproc)" --timeout 900) || fail "test suite"
fi

# --- 4. parity against the CPU fp32 run -----------------------------------------------------------
w=$out/work
mkdir -p "$w"
"$bin" make-model --head qa --preset tiny --seed 1 --out "$w/tiny-qa" >/dev/null
"$bin" make-model --preset tiny-llama --seed 1 --out "$w/tiny-llama" >/dev/null
cat > "$w/qa.toml" <<EOF
[run]
name = "gpu_qa"
[model]
path = "$w/tiny-qa"
[task]
kind = "qa"
dataset = "$root/data/demo_squad.json"
max_seq_length = 128
doc_stride = 32
EOF
cat > "$w/gen.toml" <<EOF
[run]
name = "gpu_gen"
[model]
path = "$w/tiny-llama"
[task]
kind = "generate"
prompt_set = "chat"
max_new_tokens = 32
EOF
run() {  # run CONFIG OUTFILE ranks args...
  local cfg=$1 file=$2 n=$3
  shift 3
  mpirun --allow-run-as-root --bind-to none -n "$n" "$bin" "$cfg" --set output.path="$file" "$@"
}
echo "## parity (cuda vs cpu, fp32; limits tests/regression/thresholds.toml)" >> "$summary"
for t in qa gen; do
  run "$w/$t.toml" "$out/$t-cpu.h5" 2 || fail "$t cpu run"
  run "$w/$t.toml" "$out/$t-cuda.h5" "$ranks" --set model.device=cuda || fail "$t cuda run"
  run "$w/$t.toml" "$out/$t-cuda-fp16.h5" "$ranks" --set model.device=cuda --set model.dtype=fp16 || fail "$t cuda fp16 run"
  if "$bin" compare "$out/$t-cpu.h5" "$out/$t-cuda.h5" --thresholds tests/regression/thresholds.toml \
       --report "$out/$t-cuda-fp32.md"; then
    echo "- $t fp32: pass ($t-cuda-fp32.md)" >> "$summary"
  else
    fail "$t cuda fp32 parity"; echo "- $t fp32: FAIL ($t-cuda-fp32.md)" >> "$summary"
  fi
  "$bin" compare "$out/$t-cpu.h5" "$out/$t-cuda-fp16.h5" --report "$out/$t-cuda-fp16.md" >/dev/null
  echo "- $t fp16 vs cpu fp32: exit $? with the default limits ($t-cuda-fp16.md)" >> "$summary"
  "$bin" inspect "$out/$t-cuda.h5" | grep -E 'device|compute_dtype' >> "$summary"
done

# --- 5. throughput --------------------------------------------------------------------------------
if [ "$quick" = 0 ]; then
  "$bin" make-model --head qa --preset roberta-base --seed 1 --out "$w/roberta-base" >/dev/null
  "$bin" make-model --preset llama-110m --seed 1 --out "$w/llama-110m" >/dev/null
  sed -e "s#$w/tiny-qa#$w/roberta-base#" -e 's/max_seq_length = 128/max_seq_length = 384\npad_to_max_length = true\nbatch_size = 8/' \
    "$w/qa.toml" > "$w/qa-big.toml"
  sed -e "s#$w/tiny-llama#$w/llama-110m#" -e 's/max_new_tokens = 32/max_new_tokens = 64\nbatch_size = 4/' \
    "$w/gen.toml" > "$w/gen-big.toml"
  echo "## throughput (random weights of real shapes)" >> "$summary"
  echo "| run | device | dtype | samples/s | tokens/s |" >> "$summary"
  echo "| --- | --- | --- | --- | --- |" >> "$summary"
  for t in qa-big gen-big; do
    for dev in cpu cuda; do
      for dt in fp32 fp16; do
        f="$out/$t-$dev-$dt.h5"
        run "$w/$t.toml" "$f" "$ranks" --set model.device=$dev --set model.dtype=$dt || { fail "$t $dev $dt"; continue; }
        python3 - "$f" "$t" "$dev" "$dt" >> "$summary" <<'PY' || "$bin" inspect "$f" | grep -E 'per_second' >> "$summary"
import sys, h5py
f = h5py.File(sys.argv[1], "r")
m = f["metrics"].attrs
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {m['samples_per_second']:.2f} | {m['tokens_per_second']:.1f} |")
PY
      done
    done
  done
fi

echo "status $status" >> "$summary"
cat "$summary"
exit $status
