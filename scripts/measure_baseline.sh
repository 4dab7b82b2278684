#!/usr/bin/env bash
# Issue 49's measurements of the baseline (BENCHMARKS §17), one stage per call, each on a quiet machine:
#   scripts/measure_baseline.sh kernels     # this machine's kernel table, measured afresh, and its candidates' times
#   scripts/measure_baseline.sh profile     # raw r(k), k = 1..8, under the measured and the legacy table (9 repeats)
#   scripts/measure_baseline.sh ab          # whole forwards and greedy AR under every table, interleaved
#   scripts/measure_baseline.sh invariance  # the row-invariance harness on SmolLM2, per table
#   scripts/measure_baseline.sh quick       # bench on the 12 quick prompts, 3 repeats: ar beside legacy, stock transformers, int4, drafters
#   scripts/measure_baseline.sh identity    # untimed: greedy identity at 256 new tokens, one repeat, every fp32 speculative mode
#   scripts/measure_baseline.sh costs       # this machine's profile with the trained drafters' c (30 repeats): what k is chosen from
#   scripts/measure_baseline.sh k           # untimed: each trained kind's k from the held-out split and that profile -> $OUT/k-baseline.env
#   scripts/measure_baseline.sh suite       # the 64-prompt re-measurement at those k, 3 repeats (hours: RESUME=1 continues it
#                                           # in a later session, on the same engine code and CPU; commit its .partial.json to carry it)
#   scripts/measure_baseline.sh sweep       # the shipped drafters at k = 1..4 on the 12 quick prompts, 2 repeats (lesson 13's exercise)
# llamacpp:ar joins the suite where `make llamacpp` has built its binding.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
OUT=${OUT:-benchmarks}
case "${1:?stage: kernels, profile, ab, invariance, quick, identity, costs, k, suite or sweep}" in
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
  identity)
    $PY -m specdec_core bench --prompts specdec_core/prompts/quick.jsonl --repeats 1 --max-new-tokens 256 \
      --modes ar,jacobi,spec:ngram,spec:quant,spec:mix,spec:draft,spec:heads,spec:eagle,spec:block,spec:block-parallel,spec:eagle@tree=dynamic \
      --out "$OUT/identity-256-quick-cpu.json" ;;
  costs)
    $PY -m specdec_core profile --tokens 1,2,3,4,5,6,7,8,9 --batch 1 --repeats 30 --drafters heads,eagle,draft,block,block-parallel \
      --out "$OUT/cost-baseline-drafters-cpu.json" ;;
  k)
    COSTS="$OUT/cost-baseline-drafters-cpu.json" OUT=test-output/baseline scripts/measure_retrained.sh k
    cp test-output/baseline/k.env "$OUT/k-baseline.env" ;;
  suite)
    # shellcheck source=/dev/null
    source "$OUT/k-baseline.env"
    chains="spec:draft@k=$K_draft,spec:heads@k=$K_heads,spec:eagle@k=$K_eagle,spec:block@k=$K_block"
    chains="$chains,spec:block-parallel@k=$K_block_parallel,spec:eagle@k=$K_eagle@tree=dynamic"
    peer=$($PY -c "import importlib.util; print(',llamacpp:ar' if importlib.util.find_spec('llama_cpp') else '')")
    $PY -m specdec_core bench --prompts specdec_core/prompts/suite.jsonl --repeats 3 ${RESUME:+--resume} \
      --modes "ar,ar@kernels=legacy,hf:ar,hf:pld$peer,ar@weights=int4,ar@weights=int8,spec:ngram,spec:quant,spec:mix,$chains" \
      --out "$OUT/baseline-suite-cpu.json" ;;
  sweep)
    $PY -m specdec_core bench --prompts specdec_core/prompts/quick.jsonl --modes ar,spec:ngram,spec:draft,spec:heads,spec:eagle \
      --k 1,2,3,4 --max-new-tokens 32 --repeats 2 --out "$OUT/retrained-sweep-k-cpu.json" ;;
  *) echo "unknown stage $1" >&2; exit 2 ;;
esac
