#!/usr/bin/env bash
# Streaming compare: `evalrun compare` of two generate results with full step logits of a real-size
# vocabulary (tiny-llama with --model-vocab 128256, as Llama 3), at two file sizes. Prints, per size,
# the file sizes, compare's wall time, peak resident set (VmHWM, from /usr/bin/time) and throughput
# (bytes of both files / wall time), beside the disk's sequential read speed measured on the same
# files in the same run (the faster of dd through the page cache after dropping it and dd with
# O_DIRECT, which is how compare reads rows: io/positioned_reader.hpp). Compares start from a cold cache.
#   BENCH_PROMPTS ("16 64"): prompt counts of the two sizes (64 new tokens each, ~0.51 MB per token)
#   BENCH_DIR (a new /tmp dir): where the files go     EVALRUN_BIN: the binary (build/src/app/evalrun)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${EVALRUN_BIN:-$root/build/src/app/evalrun}
read -r -a sizes <<< "${BENCH_PROMPTS:-16 64}"
work=${BENCH_DIR:-$(mktemp -d /tmp/evalrun-bench-compare.XXXXXX)}
mkdir -p "$work"
[ -n "${BENCH_DIR:-}" ] || trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2> /dev/null || echo "(cannot drop the page cache: reads may be warm)" >&2; }

"$bin" make-model --preset tiny-llama --model-vocab 128256 --seed 1 --out "$work/model" > /dev/null
printf '%-8s %10s %10s %12s %14s %16s %14s %12s\n' prompts ref_GB cand_GB compare_s peak_rss_MB compare_GB/s disk_GB/s share
for n in "${sizes[@]}"; do
  python3 - "$n" > "$work/prompts$n.jsonl" <<'PY'
import sys
for i in range(int(sys.argv[1])):
    print('{"id": "q%d", "prompt": "The river number %d flows through the old city of"}' % (i, i))
PY
  cat > "$work/run$n.toml" <<TOML
[run]
name = "compare-bench"
[model]
path = "$work/model"
[task]
kind = "generate"
dataset = "$work/prompts$n.jsonl"
max_new_tokens = 64
no_early_termination = true
[output]
logits = "full"
TOML
  # Same model and inputs, other batch sizes: equal tokens, logits equal to float rounding, so every
  # step of every sample is compared.
  "$bin" "$work/run$n.toml" --set task.batch_size=8 --set output.path="$work/ref$n.h5" > "$work/ref$n.log" 2>&1 ||
    { cat "$work/ref$n.log"; exit 1; }
  "$bin" "$work/run$n.toml" --set task.batch_size=3 --set output.path="$work/cand$n.h5" > "$work/cand$n.log" 2>&1 ||
    { cat "$work/cand$n.log"; exit 1; }
  # The disk's speed: the faster of a read through the page cache and a direct one (what compare does)
  drop_caches
  /usr/bin/time -f '%e' -o "$work/dd$n" dd if="$work/ref$n.h5" of=/dev/null bs=16M 2> /dev/null
  /usr/bin/time -f '%e' -o "$work/ddd$n" dd if="$work/ref$n.h5" of=/dev/null bs=16M iflag=direct 2> /dev/null ||
    cp "$work/dd$n" "$work/ddd$n"
  disk_s=$(sort -g "$work/dd$n" "$work/ddd$n" | head -1)
  drop_caches
  /usr/bin/time -f '%e %M' -o "$work/time$n" "$bin" compare "$work/ref$n.h5" "$work/cand$n.h5" \
    --json "$work/report$n.json" > "$work/compare$n.log" 2>&1 || { cat "$work/compare$n.log"; exit 1; }
  read -r secs rss_kb < "$work/time$n"
  ra=$(stat -c %s "$work/ref$n.h5")
  rb=$(stat -c %s "$work/cand$n.h5")
  awk -v n="$n" -v a="$ra" -v b="$rb" -v s="$secs" -v m="$rss_kb" -v d="$disk_s" 'BEGIN {
    g = (a + b) / s / 1e9; disk = a / d / 1e9;
    printf "%-8s %10.2f %10.2f %12.2f %14.1f %16.3f %14.3f %11.0f%%\n", n, a / 1e9, b / 1e9, s, m / 1024, g, disk, 100 * g / disk }'
done
echo "share = compare's read rate / the disk's sequential read rate (goal >= 50%); peak RSS goal < 1 GB at any size"
