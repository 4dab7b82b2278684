#!/usr/bin/env bash
# Issue 49's measurements of the baseline (BENCHMARKS §17), one stage per call, each on a quiet machine:
#   scripts/measure_baseline.sh kernels     # this machine's kernel table, measured afresh, and its candidates' times
#   scripts/measure_baseline.sh profile     # raw r(k), k = 1..8, under the measured and the legacy table (9 repeats)
#   scripts/measure_baseline.sh ab          # whole forwards and greedy AR under every table, interleaved
#   scripts/measure_baseline.sh invariance  # the row-invariance harness on SmolLM2, per table
#   scripts/measure_baseline.sh quick       # bench on the 12 quick prompts, 3 repeats: ar beside legacy, stock transformers, int4, drafters
#   scripts/measure_baseline.sh suite       # the 64-prompt re-measurement, 3 repeats (hours: resumes with --resume across sessions)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
OUT=${OUT:-benchmarks}
case "${1:?stage: kernels, profile, ab, invariance, quick or suite}" in
  kernels) $PY -m specdec_core profile --kernels --remeasure-kernels ;;
  profile)
    for table in measured legacy; do
      $PY -m specdec_core profile --kernels "$table" --tokens 1,2,3,4,5,6,7,8,9 --batch 1 --repeats 9 --drafters ngram \
        --out "$OUT/cost-baseline-$table-cpu.json"
    done ;;
  ab) $PY scripts/ab_kernels.py --repeats 5 --out "$OUT/ab-kernels-cpu.json" ;;
  invariance) $PY scripts/row_invariance.py --out "$OUT/row-invariance-cpu.json" ;;
  quick)
    $PY -m specdec_core bench --prompts specdec_core/prompts/quick.jsonl --repeats 3 ${RESUME:+--resume} \
      --modes ar,ar@kernels=legacy,hf:ar,hf:ar@kernels=engine,ar@weights=int4,spec:ngram,spec:quant,spec:eagle@k=3 \
      --out "$OUT/baseline-quick-cpu.json" ;;
  suite)
    $PY -m specdec_core bench --prompts specdec_core/prompts/suite.jsonl --repeats 3 ${RESUME:+--resume} \
      --modes ar,ar@kernels=legacy,hf:ar,hf:pld,ar@weights=int4,ar@weights=int8,spec:ngram,spec:quant,spec:mix,spec:draft,spec:heads,spec:eagle,spec:block,spec:block-parallel,spec:eagle@tree=dynamic \
      --out "$OUT/baseline-suite-cpu.json" ;;
  *) echo "unknown stage $1" >&2; exit 2 ;;
esac
