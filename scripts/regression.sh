#!/usr/bin/env bash
# The numerics regression CI runs: float32 runs of the demo's tiny models (and of stories260K when
# EVALRUN_DATA_DIR points at the shared data) compared with the references committed under
# tests/regression/ by `evalrun batch`. Exit status as evalrun batch: 0 pass, 1 a run moved, 2 bad input.
#   scripts/regression.sh [--update] [--reports DIR]
# --update rewrites the references from this build (after an intended numerics change; commit them).
# Reports (Markdown, JSON, HTML with plots) go to results/regression-reports unless --reports says.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=${EVALRUN_BIN:-${EVALRUN_BUILD_DIR:-$root/build}/src/app/evalrun}
update=0
reports=results/regression-reports
while [ $# -gt 0 ]; do
  case "$1" in
    --update) update=1 ;;
    --reports) reports=$2; shift ;;
    *) echo "usage: scripts/regression.sh [--update] [--reports DIR]" >&2; exit 2 ;;
  esac
  shift
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# The demo models, as scripts/demo.sh makes them (fixed seeds: the same weights on every machine).
[ -f demo/tiny-roberta-qa/model.safetensors ] || "$bin" make-model --head qa --preset tiny --seed 1 --out demo/tiny-roberta-qa
[ -f demo/tiny-roberta-mlm/model.safetensors ] || "$bin" make-model --head mlm --preset tiny --seed 1 --out demo/tiny-roberta-mlm
[ -f demo/tiny-llama/model.safetensors ] || "$bin" make-model --preset tiny-llama --seed 1 --out demo/tiny-llama
# One tiny model per further family of jobs/ci.toml (fixed seeds too; the demo itself does not use them).
for family in mistral qwen2 mixtral gemma starcoder2 gpt-bigcode gpt2; do
  [ -f "demo/tiny-$family/model.safetensors" ] || "$bin" make-model --preset "tiny-$family" --seed 1 --out "demo/tiny-$family"
done
[ -f demo/tiny-bert-qa/model.safetensors ] || "$bin" make-model --head qa --preset tiny-bert --seed 1 --out demo/tiny-bert-qa
# tiny-llama's weights with rope_scaling: linear (factor 4) and dynamic NTK (factor 4 over a context of
# 64, shorter than the chat prompts, so every prompt and decode step rescales).
for scaling in linear dynamic; do
  dir=demo/tiny-llama-rope-$scaling
  [ -f "$dir/model.safetensors" ] && continue
  rm -rf "$dir.tmp" && cp -r demo/tiny-llama "$dir.tmp"
  python3 - "$dir.tmp/config.json" "$scaling" <<'PY'
import json, sys
path, scaling = sys.argv[1], sys.argv[2]
config = json.load(open(path))
config["rope_scaling"] = {"type": scaling, "factor": 4.0}
if scaling == "dynamic":
    config["max_position_embeddings"] = 64
json.dump(config, open(path, "w"), indent=2)
PY
  mv "$dir.tmp" "$dir"
done

jobs=(jobs/ci.toml)
if [ -n "${EVALRUN_DATA_DIR:-}" ]; then
  jobs+=(jobs/ci_stories.toml)
else
  echo "regression: EVALRUN_DATA_DIR is not set: skipping jobs/ci_stories.toml (stories260K)"
fi

if [ "$update" = 1 ]; then
  # Each run of the jobs files, once, as evalrun batch would run it, written over its reference.
  for j in "${jobs[@]}"; do
    python3 - "$j" "$bin" <<'PY'
import subprocess, sys, tomllib
jobs, exe = sys.argv[1], sys.argv[2]
spec = tomllib.load(open(jobs, "rb"))
ranks = spec.get("batch", {}).get("ranks", 0)
for run in spec["run"]:
    # A tensor-parallel run is checked against the unsplit run's reference; it never writes it.
    if any(o.startswith("parallel.tensor_parallel=") for o in run.get("set", [])):
        continue
    cmd = ["mpirun", "-n", str(ranks), "--bind-to", "none", "--oversubscribe"] if ranks else []
    cmd += [exe, run["config"]]
    for o in run.get("set", []) + ["output.path=" + run["reference"]]:
        cmd += ["--set", o]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    print("regression: wrote", run["reference"])
PY
  done
fi

status=0
for j in "${jobs[@]}"; do
  "$bin" batch "$j" --reports "$reports" || status=$?
done
echo "regression: reports in $reports"
exit $status
