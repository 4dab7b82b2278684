"""A/B of the small-matmul kernel choice (specdec_core/kernels.py) on this machine, interleaved.

For n new tokens on a 64-token context (costmodel.measure_forward_times): the median forward time with
nn.Linear's own kernel (x @ W.T), with the weight-left form (W @ x.T) for <= 2 rows only, and with
weight-left plus oneDNN packed weights for >= 3 rows (the default); then greedy AR tokens/s with each.
Usage: .venv/bin/python scripts/ab_kernels.py [--repeats 7]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import specdec_core as sd  # noqa: E402
from specdec_core.costmodel import measure_forward_times  # noqa: E402
from specdec_core.kernels import use_fast_small_matmuls  # noqa: E402


def use_plain(model: torch.nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.__dict__.pop("forward", None)  # back to the class's nn.Linear.forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    lm = sd.load_model("smollm2-135m", device="cpu")
    variants = {"nn.Linear (x @ W.T)": use_plain,
                "weight-left (W @ x.T)": lambda model: use_fast_small_matmuls(model, packed=False),
                "+ packed (oneDNN)": use_fast_small_matmuls}
    sizes = (1, 2, 3, 4, 5, 6, 8, 9, 12, 16, 64)
    times: dict[tuple[str, int], list[float]] = {(v, n): [] for v in variants for n in sizes}
    for _ in range(args.repeats):  # alternate the variants, one measured round each (plus its warm-up)
        for name, apply in variants.items():
            apply(lm.model)
            for row in measure_forward_times(lm, sizes, repeats=1):
                times[(name, row["tokens"])].append(row["seconds"])
    print(f"{'tokens':>6}  " + "  ".join(f"{name:>24}" for name in variants) + "   (ms per forward, median)")
    for n in sizes:
        print(f"{n:>6}  " + "  ".join(f"{1000 * statistics.median(times[(v, n)]):>24.1f}" for v in variants))
    config = sd.GenerationConfig(mode="ar", max_new_tokens=64)
    prompt = "Write a short story about a robot who learns to paint."
    rates = {name: [] for name in variants}
    for _ in range(3):
        for name, apply in variants.items():
            apply(lm.model)
            rates[name].append(sd.generate(lm, prompt, config).metrics["tokens_per_s"])
    for name, r in rates.items():
        print(f"greedy AR, 64 tokens, {name}: {statistics.median(r):.1f} tokens/s")
    use_fast_small_matmuls(lm.model)


if __name__ == "__main__":
    main()
