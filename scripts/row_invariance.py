"""The row-invariance harness (specdec_core/kernels/invariance.py) on SmolLM2, per kernel table.

For n = 1..9 rows, chains and binary trees, cache lengths 16/63/64/200: is row j of one n-row forward
bitwise equal to the same token scored by 1-row forwards (logits and every hidden state), and if not, the
largest difference. Prints one line per table and case kind, writes everything with --out.
Usage: .venv/bin/python scripts/row_invariance.py [--tables measured,legacy,onednn] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import specdec_core as sd  # noqa: E402
from specdec_core.kernels import NAMED, kernel_table, using  # noqa: E402
from specdec_core.kernels.invariance import binary_tree, row_invariance  # noqa: E402
from specdec_core.provenance import cpu_name, git_commit  # noqa: E402

CACHE_LENGTHS = (16, 63, 64, 200)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default="measured,legacy,onednn")
    parser.add_argument("--rows", type=int, default=9)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lm = sd.load_model("smollm2-135m", device="cpu", kernels="measured")
    out = {"cpu": cpu_name(), "commit": git_commit(), "tables": {}}
    for name in args.tables.split(","):
        with using(lm.model, NAMED.get(name)):
            label = kernel_table(lm.model).label()
            shapes = [(n, None) for n in range(1, args.rows + 1)] + [(n, binary_tree(n)) for n in range(3, args.rows + 1)]
            results = [row_invariance(lm.model, n, c, tree) for n, tree in shapes for c in CACHE_LENGTHS]
        out["tables"][name] = {"label": label, "cases": [asdict(r) for r in results]}
        for tree in (False, True):
            cases = [r for r in results if r.tree == tree]
            if not cases:
                continue
            bitwise = sum(r.bitwise for r in cases)
            worst = max(cases, key=lambda r: r.max_logit_diff)
            print(f"{name:9s} {'trees ' if tree else 'chains'}: {bitwise}/{len(cases)} bitwise; largest logit difference "
                  f"{worst.max_logit_diff:.2e} (n = {worst.rows}, cache {worst.cache_len}), hidden "
                  f"{max(r.max_hidden_diff for r in cases):.2e}; {label}")
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
