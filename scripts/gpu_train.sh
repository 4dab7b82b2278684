#!/usr/bin/env bash
# The drafter-training pipeline as one prepared run for the H200 machine the device tool lends (never
# CI, never tests): the same commands as on the CPU, with more data and more steps.
#   1. make-data: grow the committed corpus (data/) to SPECDEC_TRAIN_TOKENS response tokens, 64 requests
#      in flight, on the GPU (new shards come back in $OUT/data: commit them like any other shard);
#   2. train-draft --kind heads, eagle, then draft, on the GPU (bigger batches, more steps);
#   3. eval-draft for each, and the weights + model cards, copied to $OUT for review here
#      (commit them only if they beat the shipped ones: see each model card's offline tau).
# Wheels travel as for gpu_bench.sh (scripts/gpu_pack.sh). Budget: <= 8 minutes on the H200.
# Rehearse on a CPU with SPECDEC_GPU_DEVICE=cpu SPECDEC_TRAIN_TOKENS=<current + 8000> SPECDEC_TRAIN_STEPS=20.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
STAGE=${SPECDEC_GPU_STAGE:-/tmp/specdec-gpu}
OUT=${OUT:-test-output/gpu-train}
DEVICE=${SPECDEC_GPU_DEVICE:-cuda}
TOKENS=${SPECDEC_TRAIN_TOKENS:-3000000}
STEPS=${SPECDEC_TRAIN_STEPS:-4000}
source scripts/gpu_stage.sh

B="$PY -m specdec_core"
timeout 90 $B prepare
# fp32 target, as on the CPU: the drafters learn the distribution the CPU lab decodes with
timeout 200 $B make-data --resume --until-tokens "$TOKENS" --concurrency 64 --device "$DEVICE" --dtype float32 \
    | tee "$OUT/make-data.txt" || echo "make-data stopped (the shards it finished are kept)"
cp -r data "$OUT/data"
for kind in heads eagle draft; do
    timeout 80 $B train-draft --kind "$kind" --steps "$STEPS" --batch-size 32 --device "$DEVICE" --resume \
        | tee "$OUT/train-$kind.txt" || echo "train-draft $kind did not finish (resume it with the same command)"
    timeout 30 $B eval-draft --kind "$kind" --json > "$OUT/eval-$kind.json" || echo "eval-draft $kind did not finish"
done
cp -r specdec_core/weights "$OUT/weights"
ls -l "$OUT" "$OUT/weights"/*
