#!/usr/bin/env bash
# RoBERTa-base SQuAD throughput benchmark: evalrun end to end against the machine's GEMM ceiling.
#
#   EVALRUN_DATA_DIR=/path/to/data bench/roberta_squad.sh
#
# What it does, in one run and with one thread count:
#   1. builds `evalrun` and `gemm_ceiling` into the build dir (configuring a Release build if needed);
#   2. makes, once, a roberta-base-shaped QA checkpoint (random weights, real roberta-base tokenizer)
#      under the work dir and reuses it afterwards (the answers are nonsense; the cost is the real one);
#   3. measures the GEMM ceiling (bench/gemm_ceiling.cpp: the four linear-layer products of one
#      roberta-base layer at 3072 x 768 inputs) for fp32 and bf16;
#   4. runs evalrun on the first BENCH_SAMPLES SQuAD v1.1 dev questions at max_seq_length 384,
#      doc_stride 128, pad_to_max_length = true (every window is exactly 384 tokens, so the FLOP count
#      below is exact), output.logits = "full" (for evalrun compare; well under 1% of the time), 1 rank, for dtype fp32/bf16 x batch 1/8;
#   5. prints features/s, questions/s, achieved GFLOP/s and the fraction of the ceiling. The issue's
#      target is >= 60% of the ceiling at batch 8.
#   6. for the INT8 "dtypes" (the fp32 checkpoint quantized directly in memory, W8A8 with oneDNN's
#      integer products): throughput relative to the fp32 run of the same batch size, measured in
#      this run, and answer agreement with it (`evalrun compare` of the two result files: the share
#      of questions with the same answer text, F1 of both). The issue's target is >= 2x fp32.
#
# Environment:
#   EVALRUN_DATA_DIR   required: $EVALRUN_DATA_DIR/tokenizers/roberta-base (vocab.json, merges.txt)
#                      and $EVALRUN_DATA_DIR/squad/dev-v1.1.json
#   EVALRUN_BUILD_DIR  build dir (default <repo>/build)
#   BENCH_WORK_DIR     checkpoint, configs, result files, logs (default ${TMPDIR:-/tmp}/evalrun-bench)
#   BENCH_THREADS      torch threads for evalrun and gemm_ceiling (default: nproc)
#   BENCH_SAMPLES      SQuAD questions (default 200; e.g. 16 for a quick plumbing check)
#   BENCH_BATCHES      batch sizes (default "1 8");  BENCH_DTYPES  dtypes (default "fp32 bf16"), also
#                      int8 (direct, per_token activations) and int8-static (direct, per_tensor_symm
#                      activations with SmoothQuant, calibrated on BENCH_CALIBRATION_SAMPLES questions,
#                      default 32) and int8-attn16 (int8 with quantization.attention = "bf16": the
#                      attention products on bfloat16 operands); INT8 rows need fp32 in the list for their ratio
#   BENCH_STRICT_INT8=1 exit 3 when an INT8 run is below 2x its fp32 run (default: only report)
#   BENCH_GEMM_REPS    timed repetitions per GEMM (default 5, best taken)
#   BENCH_STRICT=1     exit 3 when a batch-8 run is below 60% of its ceiling (default: only report)
#   BENCH_SKIP_BUILD=1 use the binaries already in the build dir
#
# Model FLOPs per 384-token window (S = 384 tokens, H = 768 hidden, I = 3072 FFN, L = 12 layers,
# one multiply-add = 2 FLOPs; the head count does not change the total):
#   per layer:  Q, K, V projections       3 * 2*S*H*H  = 6*S*H^2
#               attention output proj.        2*S*H*H  = 2*S*H^2
#               scores Q K^T (all heads)      2*S*S*H
#               context  P V (all heads)      2*S*S*H
#               FFN up + down             2 * 2*S*H*I  = 4*S*H*I
#               -> 8*S*H^2 + 4*S*H*I + 4*S^2*H
#   QA head (H -> 2 logits):                  2*S*H*2  = 4*S*H
#   total = L*(8*S*H^2 + 4*S*H*I + 4*S^2*H) + 4*S*H = 70.667 GFLOP per window.
# Embedding lookups, layer norms, softmax, GELU and biases are not multiply-adds and are left out
# (well under 1% of the total). Every window costs the same because each is padded to 384 tokens and
# the padded positions are computed (only masked); the last, partial batch costs per window the same.
# The GEMM ceiling covers the linear layers (92% of the FLOPs); the attention products run at a
# lower rate, so 100% of the ceiling is not reachable end to end.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "roberta_squad.sh: $*" >&2; exit 2; }

# --- inputs ---------------------------------------------------------------------------------------
[ -n "${EVALRUN_DATA_DIR:-}" ] || die "set EVALRUN_DATA_DIR to the data directory (it must hold
  tokenizers/roberta-base/{vocab.json,merges.txt} and squad/dev-v1.1.json)"
data_dir=$(cd "$EVALRUN_DATA_DIR" 2>/dev/null && pwd) || die "EVALRUN_DATA_DIR=$EVALRUN_DATA_DIR is not a directory"
tokenizer_dir="$data_dir/tokenizers/roberta-base"
squad="$data_dir/squad/dev-v1.1.json"
for f in "$tokenizer_dir/vocab.json" "$tokenizer_dir/merges.txt" "$squad"; do
  [ -f "$f" ] || die "missing $f (EVALRUN_DATA_DIR=$EVALRUN_DATA_DIR)"
done
command -v h5dump >/dev/null || die "h5dump not found (Debian package hdf5-tools)"

build_dir=${EVALRUN_BUILD_DIR:-$root/build}
work=${BENCH_WORK_DIR:-${TMPDIR:-/tmp}/evalrun-bench}
threads=${BENCH_THREADS:-$(nproc)}
samples=${BENCH_SAMPLES:-200}
batches=${BENCH_BATCHES:-1 8}
dtypes=${BENCH_DTYPES:-fp32 bf16}
gemm_reps=${BENCH_GEMM_REPS:-5}
is_int() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
is_int "$threads" || die "BENCH_THREADS must be a positive integer (got '$threads')"
is_int "$samples" || die "BENCH_SAMPLES must be a positive integer (got '$samples')"
is_int "$gemm_reps" || die "BENCH_GEMM_REPS must be a positive integer (got '$gemm_reps')"
for b in $batches; do is_int "$b" || die "BENCH_BATCHES must be positive integers (got '$b')"; done
for d in $dtypes; do
  [[ "$d" == fp32 || "$d" == bf16 || "$d" == int8 || "$d" == int8-static || "$d" == int8-attn16 ]] ||
    die "BENCH_DTYPES: fp32, bf16, int8, int8-static, int8-attn16 (got '$d')"
done
calibration_samples=${BENCH_CALIBRATION_SAMPLES:-32}
is_int "$calibration_samples" || die "BENCH_CALIBRATION_SAMPLES must be a positive integer (got '$calibration_samples')"
mkdir -p "$work"
work=$(cd "$work" && pwd)

# --- build ----------------------------------------------------------------------------------------
if [ "${BENCH_SKIP_BUILD:-0}" != 1 ]; then
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    echo "== configuring $build_dir (Release)"
    cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >"$work/cmake-configure.log" 2>&1 ||
      { tail -n 30 "$work/cmake-configure.log" >&2; die "cmake configure failed (log: $work/cmake-configure.log)"; }
  fi
  build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build_dir/CMakeCache.txt")
  [ "$build_type" = Release ] || echo "warning: $build_dir is a '${build_type:-no type}' build; timings of a non-Release build mean little" >&2
  echo "== building evalrun and gemm_ceiling in $build_dir"
  cmake --build "$build_dir" --target evalrun gemm_ceiling -j"$(nproc)" >"$work/build.log" 2>&1 ||
    { tail -n 30 "$work/build.log" >&2; die "build failed (log: $work/build.log)"; }
fi
evalrun="$build_dir/src/app/evalrun"
gemm_ceiling="$build_dir/src/model/gemm_ceiling"
[ -x "$evalrun" ] || die "no $evalrun (build it or unset BENCH_SKIP_BUILD)"
[ -x "$gemm_ceiling" ] || die "no $gemm_ceiling (build it or unset BENCH_SKIP_BUILD)"

# --- checkpoint (made once; written to a temporary dir and renamed, so an interrupted run leaves none)
model="$work/roberta-base-qa"
if [ ! -f "$model/model.safetensors" ] || [ ! -f "$model/config.json" ]; then
  echo "== making the roberta-base QA checkpoint in $model (once)"
  rm -rf "$model.tmp"
  "$evalrun" make-model --preset roberta-base --head qa --seed 0 --tokenizer-from "$tokenizer_dir" \
    --out "$model.tmp" >"$work/make-model.log" 2>&1 ||
    { tail -n 30 "$work/make-model.log" >&2; die "make-model failed (log: $work/make-model.log)"; }
  rm -rf "$model"
  mv "$model.tmp" "$model"
fi

# --- GEMM ceiling ---------------------------------------------------------------------------------
echo "== GEMM ceiling: $gemm_ceiling $threads $gemm_reps"
"$gemm_ceiling" "$threads" "$gemm_reps" >"$work/gemm_ceiling.txt" 2>&1 ||
  { cat "$work/gemm_ceiling.txt" >&2; die "gemm_ceiling failed"; }
sed 's/^/   /' "$work/gemm_ceiling.txt"
# gemm_ceiling's summary line: "ceiling fp32 <x> GFLOP/s, bf16 <y> GFLOP/s"
ceiling_of() {
  sed -n "s/^ceiling .*\\b$1 \\([0-9][0-9.]*\\) GFLOP\\/s.*/\\1/p" "$work/gemm_ceiling.txt" | tail -n 1
}
declare -A ceiling
for d in fp32 bf16; do
  ceiling[$d]=$(ceiling_of "$d")
  [ -n "${ceiling[$d]}" ] || die "could not read the $d ceiling from gemm_ceiling's output ($work/gemm_ceiling.txt)"
done

# --- evalrun runs -----------------------------------------------------------------------------------
config="$work/roberta_squad_bench.toml"
cat >"$config" <<EOF
# Written by bench/roberta_squad.sh; each run adds --set model.dtype, task.batch_size, run.name and
# output.path.
[run]
name = "roberta_squad_bench"
threads = $threads

[model]
path = "$model"
dtype = "fp32"
device = "cpu"

[task]
kind = "qa"
dataset = "$squad"
max_samples = $samples
batch_size = 8
max_seq_length = 384
doc_stride = 128
pad_to_max_length = true

[parallel]
tensor_parallel = 1

[output]
path = "$work/roberta_squad_bench.h5"
logits = "full"   # for evalrun compare of the INT8 runs (copying them costs well under 1% of the time)
EOF

# attribute value from a result file: h5dump prints "(0): <value>" inside DATA { }
h5attr() {
  h5dump -m %.9g -a "$2" "$1" 2>/dev/null | sed -n 's/^ *(0): *\([^ ]*\).*/\1/p' | head -n 1
}

flop_per_feature=$(awk 'BEGIN { S = 384; H = 768; I = 3072; L = 12;
  printf "%.0f", L * (8*S*H*H + 4*S*H*I + 4*S*S*H) + 4*S*H }')

rows=()
for d in $dtypes; do
  for b in $batches; do
    name="roberta_squad_${d}_b${b}"
    out="$work/$name.h5"
    log="$work/$name.log"
    rm -f "$out"
    case "$d" in
      int8) quant=(--set 'quantization.method="int8"' --set quantization.direct=true) ;;
      int8-static) quant=(--set 'quantization.method="int8"' --set quantization.direct=true
                          --set 'quantization.activations="per_tensor_symm"' --set quantization.smoothquant=true
                          --set "quantization.calibration_samples=$calibration_samples") ;;
      int8-attn16) quant=(--set 'quantization.method="int8"' --set quantization.direct=true
                          --set 'quantization.attention="bf16"') ;;
      *) quant=() ;;
    esac
    model_dtype=$d
    [[ "$d" == int8* ]] && model_dtype=fp32
    cmd=("$evalrun" "$config" --set "model.dtype=\"$model_dtype\"" --set "task.batch_size=$b"
         --set "run.name=\"$name\"" --set "output.path=\"$out\"" "${quant[@]}")
    echo "== $d batch $b: ${cmd[*]}"
    (cd "$work" && "${cmd[@]}") >"$log" 2>&1 || { tail -n 30 "$log" >&2; die "evalrun failed (log: $log)"; }
    features=$(h5attr "$out" /metrics/n_features)
    questions=$(h5attr "$out" /metrics/n_examples)
    secs=$(h5attr "$out" /timing/inference_seconds)
    [ -n "$features" ] && [ -n "$questions" ] && [ -n "$secs" ] ||
      die "could not read n_features / n_examples / inference_seconds from $out"
    rows+=("$d $b $questions $features $secs ${ceiling[$d]:-0}")
  done
done

# --- table ----------------------------------------------------------------------------------------
echo
echo "RoBERTa-base SQuAD v1.1 dev, $samples questions, 384-token windows (stride 128, padded), 1 rank x $threads thread(s)"
echo "model FLOPs per window: $(awk -v f="$flop_per_feature" 'BEGIN { printf "%.3f", f / 1e9 }') GFLOP; ceiling = gemm_ceiling, same threads"
status=0
printf '%s\n' "${rows[@]}" | awk -v fpf="$flop_per_feature" -v strict="${BENCH_STRICT:-0}" '
  BEGIN {
    printf "%-11s %5s %9s %8s %9s %11s %10s %10s %10s %8s\n", "dtype", "batch", "questions", "features",
           "seconds", "features/s", "questions/s", "GFLOP/s", "ceiling", "of ceil."
  }
  {
    d = $1; b = $2; q = $3; f = $4; s = $5; c = $6
    gflops = f * fpf / s / 1e9
    if (c == 0) {  # int8: no float ceiling to hold it against
      printf "%-11s %5d %9d %8d %9.2f %11.3f %10.3f %10.1f %10s %8s\n", d, b, q, f, s, f / s, q / s, gflops, "-", "-"
      next
    }
    frac = gflops / c
    printf "%-11s %5d %9d %8d %9.2f %11.3f %10.3f %10.1f %10.1f %7.1f%%\n", d, b, q, f, s, f / s, q / s, gflops, c,
           100 * frac
    if (b == 8) {
      line[++n8] = sprintf("target (>= 60%% of ceiling at batch 8), %s: %.1f%%, %s", d, 100 * frac,
                           frac >= 0.6 ? "meets the target" : "below the target")
      if (frac < 0.6) below = 1
    }
  }
  END {
    for (i = 1; i <= n8; ++i) print line[i]
    if (strict == 1 && below) exit 3
  }' || status=$?
# --- INT8 against fp32 (same batch size, same run) ----------------------------------------------------
for d in int8 int8-static int8-attn16; do
  [[ " $dtypes " == *" $d "* && " $dtypes " == *" fp32 "* ]] || continue
  for b in $batches; do
    ref="$work/roberta_squad_fp32_b${b}.h5"
    cand="$work/roberta_squad_${d}_b${b}.h5"
    # compare's exit code: 0 = every metric within the default thresholds (docs/compare.md: they suit
    # the same model at another precision), 1 = some metric beyond them.
    verdict=pass
    "$evalrun" compare "$ref" "$cand" >"$work/compare_${d}_b${b}.txt" 2>&1 || verdict="fail (exit $?)"
    field() { awk -v k="$1" '$1 == k { print $2; exit }' "$work/compare_${d}_b${b}.txt"; }
    agreement=$(field answer_agreement)
    [ -n "$agreement" ] || die "evalrun compare failed (log: $work/compare_${d}_b${b}.txt)"
    fp32_secs=$(h5attr "$ref" /timing/inference_seconds)
    int8_secs=$(h5attr "$cand" /timing/inference_seconds)
    awk -v d="$d" -v b="$b" -v r="$fp32_secs" -v c="$int8_secs" -v a="$agreement" -v f1r="$(field f1_ref)" \
        -v f1c="$(field f1_cand)" -v maxd="$(field max_logit_diff)" -v meand="$(field mean_logit_diff)" \
        -v strict="${BENCH_STRICT_INT8:-0}" -v compared="$verdict" 'BEGIN {
      x = r / c
      verdict = x >= 2 ? "met" : "missed"
      fmt = "%s vs fp32, batch %d: %.2fx throughput (target >= 2x: %s); answer agreement %.4f, F1 %s (fp32 %s), "
      fmt = fmt "max |logit diff| %s, mean %s; evalrun compare, default thresholds: %s\n"
      printf fmt, d, b, x, verdict, a, f1c, f1r, maxd, meand, compared
      if (strict == 1 && x < 2) exit 3
    }' || status=$?
  done
done
echo "results, configs and logs: $work"
exit "$status"
