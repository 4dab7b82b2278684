"""A/B of the written-out forward (specdec_core/llama.py) against transformers' model(...), interleaved.

Both run the same weights, kernels and KV cache type. For n new tokens on a 64-token context the two
alternate call by call (ours, theirs, ours, theirs, …; who goes first alternates from round to round),
each call timed alone and its cache rolled back, so a burst of machine noise hits both alike.
Prints the median ms per forward over all calls and transformers ÷ ours.
Usage: .venv/bin/python scripts/ab_forward.py [--rounds 9] [--steps 10]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import specdec_core as sd  # noqa: E402
from specdec_core import llama  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    lm = sd.load_model("smollm2-135m", device="cpu")
    model = lm.model
    variants = {"ours (llama.forward)": lambda cache, ids: llama.forward(model, cache, ids),
                "transformers (model(...))": lambda cache, ids: model(input_ids=ids, cache=cache, use_cache=True)}
    context = torch.randint(100, 10000, (1, 64), generator=torch.Generator().manual_seed(0))
    sizes = (1, 2, 3, 4, 8, 16)
    times: dict[tuple[str, int], list[float]] = {(v, n): [] for v in variants for n in sizes}
    with torch.inference_mode():
        caches = {v: DynamicCache(config=model.config) for v in variants}
        for cache in caches.values():
            llama.forward(model, cache, context)
        for round_index in range(args.rounds + 1):  # round 0 warms up and is discarded
            order = list(variants) if round_index % 2 else list(reversed(variants))
            for n in sizes:
                ids = torch.randint(100, 10000, (1, n))
                for _ in range(args.steps):
                    for name in order:
                        start = time.perf_counter()
                        variants[name](caches[name], ids)
                        if round_index:
                            times[(name, n)].append(time.perf_counter() - start)
                        caches[name].crop(-n)
    ours, theirs = variants
    print(f"{'tokens':>6}  {ours:>22}  {theirs:>26}  {'theirs / ours':>13}   (ms per forward, median)")
    for n in sizes:
        a, b = (1000 * statistics.median(times[(v, n)]) for v in (ours, theirs))
        print(f"{n:>6}  {a:>22.1f}  {b:>26.1f}  {b / a:>13.3f}")


if __name__ == "__main__":
    main()
