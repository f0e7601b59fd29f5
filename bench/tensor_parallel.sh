#!/usr/bin/env bash
# Tensor parallelism on one node: the same generation run with tp 1 (1 rank) and tp 2 (2 ranks), on
# the llama-110m preset (12 layers, hidden 768, 12 heads, 4 key/value heads, vocab 32000). Prints,
# from each run's result file, the weights one rank holds, rank 0's peak resident set, the inference
# time and the share of it spent in all-reduces, then the tp 2 / tp 1 ratios.
#   BENCH_THREADS (1): threads per rank    BENCH_TOKENS (32): new tokens per prompt
#   BENCH_PRESET (llama-110m)              EVALRUN_BIN: the binary (default build/src/app/evalrun)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${EVALRUN_BIN:-$root/build/src/app/evalrun}
threads=${BENCH_THREADS:-1}
tokens=${BENCH_TOKENS:-32}
preset=${BENCH_PRESET:-llama-110m}
work=$(mktemp -d /tmp/evalrun-bench-tp.XXXXXX)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

"$bin" make-model --preset "$preset" --seed 1 --out "$work/model" > /dev/null
cat > "$work/run.toml" <<TOML
[run]
name = "tp-bench"
threads = $threads
[model]
path = "$work/model"
[task]
kind = "generate"
dataset = "$root/tests/data/decoder_prompts.jsonl"
max_new_tokens = $tokens
no_early_termination = true
batch_size = 5
[output]
logits = "none"
TOML

attr() { "$bin" inspect "$1" | awk -v k="$2" '$1 == k { print $2; exit }'; }
printf '%-4s %-6s %18s %18s %14s %14s %10s\n' tp ranks weight_MB/rank peak_rss_MB/rank0 inference_s allreduce_s allreduce%
declare -A w r t a
for tp in 1 2; do
  out="$work/tp$tp.h5"
  mpirun --oversubscribe --bind-to none -n "$tp" "$bin" "$work/run.toml" --set parallel.tensor_parallel=$tp \
    --set output.path="$out" > "$work/tp$tp.log" 2>&1 || { cat "$work/tp$tp.log"; exit 1; }
  w[$tp]=$(attr "$out" weight_bytes_per_rank)
  r[$tp]=$(attr "$out" peak_rss_bytes_rank0)
  t[$tp]=$(attr "$out" inference_seconds)
  a[$tp]=$(attr "$out" allreduce_seconds)
  awk -v tp=$tp -v w="${w[$tp]}" -v r="${r[$tp]}" -v t="${t[$tp]}" -v a="${a[$tp]}" \
    'BEGIN { printf "%-4s %-6s %18.1f %18.1f %14.3f %14.3f %9.1f%%\n", tp, tp, w/1e6, r/1e6, t, a, 100*a/t }'
done
awk -v w1="${w[1]}" -v w2="${w[2]}" -v r1="${r[1]}" -v r2="${r[2]}" -v t1="${t[1]}" -v t2="${t[2]}" \
  'BEGIN { printf "tp2/tp1: weights per rank %.3fx, peak RSS rank 0 %.3fx, inference time %.3fx (speed-up %.2fx)\n", w2/w1, r2/r1, t2/t1, t1/t2 }'
