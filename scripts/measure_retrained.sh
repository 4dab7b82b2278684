#!/usr/bin/env bash
# The measurements that follow the joint retraining (issue 27 §4, issue 28 §2), prepared once so a sitting
# runs them in order instead of retyping them. Stages, each named on the command line:
#   k      untimed (one core is enough): each kind's k, chosen once on the held-out split from the walked
#          tau(k) and the cost profile $COSTS (eval-draft --costs); written to $OUT/k.env. Measure $COSTS
#          on the machine that runs `bench` (`profile`, BENCHMARKS §16a): a profile from
#          another CPU can pick a k that is slow here.
#   shape  untimed: the retrained heads' rank accuracies -> their static tree's shape (tree-shape)
#   gamma  untimed: tau of block against block-parallel at gamma = 7 over the whole suite, greedy
#   bench  TIMED, nothing else may run: the 64-prompt suite (ar and every kind at its k), then the fresh
#          set (ar and the best kind at its k), interleaved per prompt, medians of 3 repeats
#   trees  TIMED, nothing else may run: the suite's chat, qa and story prompts; ar, the best kind's chain
#          at k = 1 and 4 and its trees at depth 4, the heads' static tree
# Usage: scripts/measure_retrained.sh k shape gamma      (then, on a quiet machine)  scripts/measure_retrained.sh bench trees
# Results land in $OUT (default test-output/retrained); copy the ones BENCHMARKS cites into benchmarks/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-test-output/retrained}
BEST=${BEST:-eagle}        # the drafter whose trees are measured (issue 28: the best trained drafter)
REPEATS=${REPEATS:-3}
KINDS="heads eagle draft block block-parallel"
COSTS=${COSTS:-benchmarks/cost-drafters-cpu-bench.json}
B="$PY -m specdec_core"
mkdir -p "$OUT"

stage_k() {
    : > "$OUT/k.env"
    for kind in $KINDS; do
        $B eval-draft --kind "$kind" --k 8 --limit 100 --costs "$COSTS" --json \
            > "$OUT/k-$kind.json"
        k=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['choose_k']['k'])" "$OUT/k-$kind.json")
        echo "K_${kind//-/_}=$k" | tee -a "$OUT/k.env"
    done
}

stage_bench() {
    # shellcheck source=/dev/null
    source "$OUT/k.env"
    chains="spec:heads@k=$K_heads,spec:eagle@k=$K_eagle,spec:draft@k=$K_draft,spec:block@k=$K_block"
    chains="$chains,spec:block-parallel@k=$K_block_parallel"
    best_k=$(eval echo "\$K_${BEST//-/_}")
    $B bench --prompts specdec_core/prompts/suite.jsonl --repeats "$REPEATS" --max-new-tokens 64 \
        --modes "ar,$chains" --out "$OUT/retrained-suite-cpu.json" | tee "$OUT/retrained-suite-cpu.txt"
    $B bench --prompts specdec_core/prompts/fresh.jsonl --repeats "$REPEATS" --max-new-tokens 64 \
        --modes "ar,spec:$BEST@k=$best_k" --out "$OUT/retrained-fresh-cpu.json" | tee "$OUT/retrained-fresh-cpu.txt"
}

stage_trees() {
    trees="spec:$BEST@k=1,spec:$BEST@k=4,spec:$BEST@k=4@tree=dynamic,spec:$BEST@k=4@tree=dynamic@nodes=8"
    trees="$trees,spec:$BEST@k=4@tree=dynamic@nodes=16,spec:heads@k=4@tree=static@nodes=16"
    $B bench --prompts specdec_core/prompts/suite.jsonl --categories chat,qa,story --repeats "$REPEATS" --max-new-tokens 64 \
        --modes "ar,$trees" --out "$OUT/trees-cqs-cpu.json" | tee "$OUT/trees-cqs-cpu.txt"
}

for stage in "$@"; do
    case "$stage" in
        k) stage_k ;;
        shape) $B tree-shape | tee "$OUT/tree-shape.txt" ;;
        gamma) $B bench --prompts specdec_core/prompts/suite.jsonl --k 7 --max-new-tokens 64 \
                   --modes "spec:block,spec:block-parallel" --out "$OUT/block-tau-cpu.json" | tee "$OUT/block-tau-cpu.txt" ;;
        bench) stage_bench ;;
        trees) stage_trees ;;
        *) echo "unknown stage: $stage (k, shape, gamma, bench, trees)" >&2; exit 2 ;;
    esac
done
