#!/usr/bin/env bash
# Parallel result writes: a generate run with full step logits of a real-size vocabulary (llama-110m
# with --model-vocab 128256, as Llama 3) on 1, 2 and 4 ranks. Prints per rank count the file size,
# the run's wall time, the time rank 0 spent on its part of the file (post-processing, the small
# datasets), the longest any rank spent on its own logits rows (during the run: every prompt runs 64
# tokens, so the rows are laid out before it, io/rank_rows.hpp; a rank waits for its writer thread
# when that falls behind, and at the end), their share of the wall time, the longest a writer thread
# spent writing meanwhile, and rank 0's peak resident set against the largest of every rank's (the
# file's peak_rss_bytes_rank0 / peak_rss_bytes_max).
#   BENCH_PROMPTS (120: ~3.9 GB of logits, 64 new tokens each)   BENCH_RANKS ("1 2 4")
#   BENCH_PRESET (llama-110m): the make-model preset. Its 0.37 GFLOP a token is still 40x fewer per byte
#   of logits than Llama 3 8B's; tiny-llama (hidden 64) makes the rows faster than a disk takes them,
#   the worst case for hiding the writes
#   BENCH_DIR (a new /tmp dir): where the files go               EVALRUN_BIN: the binary
#   BENCH_EOS=1: no_early_termination = false, so the rows are kept (in each rank's scratch file)
#   until the run ends and written then
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${EVALRUN_BIN:-$root/build/src/app/evalrun}
prompts=${BENCH_PROMPTS:-120}
read -r -a rank_counts <<< "${BENCH_RANKS:-1 2 4}"
work=${BENCH_DIR:-$(mktemp -d /tmp/evalrun-bench-write.XXXXXX)}
mkdir -p "$work"
[ -n "${BENCH_DIR:-}" ] || trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v h5dump > /dev/null || { echo "needs h5dump (Debian package hdf5-tools)" >&2; exit 2; }
attr() { h5dump -a "/$2" "$1" | awk '/\(0\)/ { print $2 }'; }

"$bin" make-model --preset "${BENCH_PRESET:-llama-110m}" --model-vocab 128256 --seed 1 --out "$work/model" > /dev/null
python3 - "$prompts" > "$work/prompts.jsonl" <<'PY'
import sys
for i in range(int(sys.argv[1])):
    print('{"id": "q%d", "prompt": "The river number %d flows through the old city of"}' % (i, i))
PY
cat > "$work/run.toml" <<TOML
[run]
name = "write-bench"
threads = 1
[model]
path = "$work/model"
[task]
kind = "generate"
dataset = "$work/prompts.jsonl"
max_new_tokens = 64
no_early_termination = $([ "${BENCH_EOS:-0}" = 1 ] && echo false || echo true)
batch_size = 8
[output]
logits = "full"
TOML
printf '%-6s %9s %9s %13s %13s %12s %10s %13s %11s %6s\n' ranks file_GB wall_s rank0_part_s ranks_rows_s write_share writer_s rank0_rss_MB max_rss_MB ratio
for n in "${rank_counts[@]}"; do
  out="$work/n$n.h5"
  start=$(date +%s.%N)
  mpirun -n "$n" --oversubscribe --bind-to none "$bin" "$work/run.toml" --set output.path="$out" > "$work/n$n.log" 2>&1 ||
    { cat "$work/n$n.log"; exit 1; }
  wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')
  read -r part rows < <(sed -n "s/.*rank 0's part in \([0-9.]*\) s, every rank's rows in \([0-9.]*\) s.*/\1 \2/p" "$work/n$n.log")
  writer=$(sed -n "s/.*which wrote them in \([0-9.]*\) s.*/\1/p" "$work/n$n.log")
  r0=$(attr "$out" peak_rss_bytes_rank0)
  mx=$(attr "$out" peak_rss_bytes_max)
  awk -v n="$n" -v b="$(stat -c %s "$out")" -v w="$wall" -v p="$part" -v r="$rows" -v bg="${writer:-0}" -v r0="$r0" -v mx="$mx" 'BEGIN {
    printf "%-6s %9.2f %9.1f %13.2f %13.2f %11.1f%% %10.2f %13.0f %11.0f %6.2f\n", n, b / 1e9, w, p, r, 100 * (p + r) / w,
      bg, r0 / 1e6, mx / 1e6, r0 / mx }'
  [ -n "${BENCH_DIR:-}" ] || rm -f "$out"
done
echo "write_share = (rank 0's part + the ranks' rows) / wall (goal <= 3% at 4 ranks); writer_s = the writer threads' time, hidden"
echo "behind the computation where not in ranks_rows_s; ratio = rank 0's peak RSS / the largest rank's (goal <= 1.2)"
