#!/usr/bin/env bash
# Grow the committed training corpus on the H200 machine the device tool lends (never CI, never tests):
# `make-data --resume` for as many shards as ~7 minutes allow, all 64 sequences of a shard in flight, on
# the GPU with the fp32 target (the distribution the CPU lab decodes with). The finished shards and the
# manifest come back in $OUT/data: copy them into data/ here, verify (`python -m specdec_core eval-draft
# --kind heads` refuses a corrupted shard in one line) and commit them like any other shard. A shard
# cut off by the timeout is simply not written; the next run resumes after the last finished one.
# Each shard's manifest entry records its machine, so a CPU regeneration test knows it ran elsewhere.
# Wheels travel as for gpu_bench.sh (scripts/gpu_pack.sh). Budget: <= 8 minutes on the H200.
# Rehearse on a CPU with SPECDEC_GPU_DEVICE=cpu SPECDEC_DATA_SECONDS=60.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
STAGE=${SPECDEC_GPU_STAGE:-/tmp/specdec-gpu}
OUT=${OUT:-test-output/gpu-data}
DEVICE=${SPECDEC_GPU_DEVICE:-cuda}
SECONDS_FOR_DATA=${SPECDEC_DATA_SECONDS:-400}
source scripts/gpu_stage.sh

B="$PY -m specdec_core"
timeout 60 $B prepare
timeout "$SECONDS_FOR_DATA" $B make-data --resume --until-tokens 100000000 --concurrency 64 --device "$DEVICE" \
    --dtype float32 | tee "$OUT/make-data.txt" || echo "make-data stopped at the time limit (finished shards are kept)"
cp -r data "$OUT/data"
"$PY" -c "import json; t = json.load(open('$OUT/data/smollm2-135m/manifest.json'))['totals']; print('corpus:', t)"
