"""A/B of kernel tables (specdec_core/kernels/) on this machine, interleaved.

For n new tokens on a 64-token context (costmodel.measure_forward_times), the median whole-forward time
under each variant, alternated round by round so that machine noise hits all alike: this machine's
measured table, `legacy` (the fixed dispatch tuned on one AMD CPU), `torch` (nn.Linear) and `onednn`. Then r(k) = t(k+1)/t(1) per variant and greedy AR tokens/s with each (64 tokens, 3 rounds).
Usage: .venv/bin/python scripts/ab_kernels.py [--repeats 7] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import specdec_core as sd  # noqa: E402
from specdec_core.costmodel import measure_forward_times  # noqa: E402
from specdec_core.kernels import NAMED, kernel_table, using  # noqa: E402
from specdec_core.provenance import cpu_name, git_commit  # noqa: E402

SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lm = sd.load_model("smollm2-135m", device="cpu", kernels="measured")
    measured = kernel_table(lm.model)
    variants = {"measured": lambda: using(lm.model, None),
                **{name: (lambda t=table: using(lm.model, t)) for name, table in NAMED.items()}}
    times: dict[tuple[str, int], list[float]] = {(v, n): [] for v in variants for n in SIZES}
    for round_ in range(args.repeats):  # one measured round of every variant (plus its warm-up), alternating
        order = list(variants) if round_ % 2 == 0 else list(variants)[::-1]
        for name in order:
            with variants[name]():
                for row in measure_forward_times(lm, SIZES, repeats=1):
                    times[(name, row["tokens"])].append(row["seconds"])
    ms = {v: {n: 1000 * statistics.median(times[(v, n)]) for n in SIZES} for v in variants}
    print(f"{cpu_name()}, measured table {measured.label()}")
    print(f"{'tokens':>6}  " + "  ".join(f"{name:>18}" for name in variants) + "   (ms per forward, median)")
    for n in SIZES:
        print(f"{n:>6}  " + "  ".join(f"{ms[v][n]:>18.1f}" for v in variants))
    print(f"{'r(k)':>6}  " + "  ".join(f"{', '.join(f'{ms[v][k + 1] / ms[v][1]:.2f}' for k in (1, 2, 3)):>18}" for v in variants)
          + "   (k = 1, 2, 3)")
    config = sd.GenerationConfig(mode="ar", max_new_tokens=64)
    prompt = "Write a short story about a robot who learns to paint."
    rates = {name: [] for name in variants}
    for _ in range(3):
        for name, enter in variants.items():
            with enter():
                rates[name].append(sd.generate(lm, prompt, config).metrics["tokens_per_s"])
    for name, r in rates.items():
        print(f"greedy AR, 64 tokens, {name}: {statistics.median(r):.1f} tokens/s")
    if args.out:
        args.out.write_text(json.dumps({"cpu": cpu_name(), "commit": git_commit(), "measured": measured.summary(),
                                        "ms": ms, "ar_tokens_per_s": {k: statistics.median(v) for k, v in rates.items()}},
                                       indent=1))


if __name__ == "__main__":
    main()
