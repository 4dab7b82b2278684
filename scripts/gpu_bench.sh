#!/usr/bin/env bash
# The GPU benchmark: one prepared run for the H200 machine the device tool lends (never CI, never tests).
#
# That machine has torch 2.11 / transformers 5.17 and no network. `scripts/gpu_pack.sh` (run here)
# packs the wheels it lacks into .gpu/1, .gpu/2, ...; each device call carries one part and runs this
# script, which stages the part in $STAGE and, once every part is there, installs the wheels and runs:
#   1. the cost model in bf16: forward time over new tokens x batch size, draft steps, copy bandwidth;
#   2. the suite (every 3rd prompt: all 10 categories) x every drafter and the hf:* peers at k = 4,
#      timed with CUDA synchronisation, greedy, 64 tokens, interleaved per prompt;
#   3. the serving cost grid (packed batched forwards, 1..256 requests x 1..9 tokens each), for
#      `load-test --replay benchmarks/load-cpu.json --costs serving-cost-gpu.json` here (simulated curves).
# Results land in $OUT (the device tool brings them back); run `python -m specdec_core report` here.
# Budget: <= 8 minutes on the H200. Rehearse on a CPU with SPECDEC_GPU_DEVICE=cpu SPECDEC_GPU_DTYPE=float32.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
STAGE=${SPECDEC_GPU_STAGE:-/tmp/specdec-gpu}
OUT=${OUT:-test-output/gpu}
DEVICE=${SPECDEC_GPU_DEVICE:-cuda}
DTYPE=${SPECDEC_GPU_DTYPE:-bfloat16}
STRIDE=${SPECDEC_GPU_STRIDE:-3}  # every STRIDE-th suite prompt (22 of 64, every category)
MODES=${SPECDEC_GPU_MODES:-ar,spec:ngram,spec:ngram-fixed,spec:early-exit,spec:sim,hf:ar,hf:pld,hf:assisted}
source scripts/gpu_stage.sh  # stage the carried wheels, install them, record the environment

# 4. Measure. Each step has its own time limit, so one slow step cannot take the others' results with it.
B="$PY -m specdec_core"
prompts="$STAGE/suite-every-$STRIDE.jsonl"
awk -v s="$STRIDE" '(NR - 1) % s == 0' specdec_core/prompts/suite.jsonl > "$prompts"
timeout 90 $B prepare
timeout 120 $B profile --device "$DEVICE" --dtype "$DTYPE" --batch 1,2,4,8,16 --out "$OUT/cost-gpu.json" \
    | tee "$OUT/cost-gpu.txt" || echo "profile did not finish"
timeout 270 $B bench --device "$DEVICE" --dtype "$DTYPE" --prompts "$prompts" --modes "$MODES" --k 4 \
    --out "$OUT/results-suite-gpu.json" | tee "$OUT/results-suite-gpu.txt" || echo "bench did not finish"
timeout 90 $B profile --serving --device "$DEVICE" --dtype "$DTYPE" --rows 1,2,4,8,16,32,64,128,256 --repeats 3 \
    --out "$OUT/serving-cost-gpu.json" | tee "$OUT/serving-cost-gpu.txt" || echo "serving profile did not finish"
ls -l "$OUT"
