#!/usr/bin/env bash
# Set up, make tiny random RoBERTa and Llama checkpoints (with their own learned tokenizer), run the
# demo SQuAD-style QA (fp32 and INT8), masked-LM and generation jobs on 2 MPI ranks and summarise the
# QA result file.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup.sh"
cd "$root"
bin="${EVALRUN_BUILD_DIR:-$root/build}/src/app/evalrun"
[ -f demo/tiny-roberta-qa/model.safetensors ] || "$bin" make-model --head qa --preset tiny --seed 1 --out demo/tiny-roberta-qa
[ -f demo/tiny-roberta-mlm/model.safetensors ] || "$bin" make-model --head mlm --preset tiny --seed 1 --out demo/tiny-roberta-mlm
[ -f demo/tiny-llama/model.safetensors ] || "$bin" make-model --preset tiny-llama --seed 1 --out demo/tiny-llama
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe --bind-to none -n 2 "$bin" configs/demo_qa.toml
# The same model quantized to INT8 in memory (direct quantization), compared with the fp32 run.
mpirun --oversubscribe --bind-to none -n 2 "$bin" configs/roberta_int8.toml
"$bin" compare results/demo_qa.h5 results/roberta_int8.h5 || echo "demo: int8 differs from fp32 beyond the default thresholds"
mpirun --oversubscribe --bind-to none -n 2 "$bin" configs/demo_mlm.toml
mpirun --oversubscribe --bind-to none -n 2 "$bin" configs/demo_generate.toml
mpirun --oversubscribe --bind-to none -n 2 "$bin" configs/demo_loglikelihood.toml
"$bin" inspect results/demo_qa.h5
