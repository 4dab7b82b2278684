"""A/B of the written-out forward (specdec_core/llama.py) against transformers' model(...) and, with
--before REV, against the lab's own forward as it was at a git revision, interleaved.

All run the same weights and kernel table; ours on the lab's KV cache (`kvcache.py`), transformers' and
the old forward on transformers' DynamicCache (as they ran). For n new tokens on a --context-token cache
the variants alternate call by call (the order reversing from round to round), each call timed with its
rollback (the n positions forgotten, as a rejected draft is), so a burst of machine noise hits all alike.
Prints the median ms per forward + rollback over all calls and each variant ÷ ours.
Usage: .venv/bin/python scripts/ab_forward.py [--rounds 9] [--steps 10] [--context 64] [--before HEAD]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import torch
from transformers import DynamicCache

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import specdec_core as sd  # noqa: E402
from specdec_core import llama  # noqa: E402
from specdec_core.kvcache import KVCache  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def forward_at(revision: str) -> types.ModuleType:
    """specdec_core/llama.py as it was at `revision`, importable beside today's (its relative imports
    resolve inside today's package)."""
    source = subprocess.run(["git", "show", f"{revision}:specdec_core/llama.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType("specdec_core._llama_before")
    module.__package__ = "specdec_core"
    exec(compile(source, f"llama.py@{revision}", "exec"), module.__dict__)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--context", type=int, default=64, help="cached tokens every forward runs on")
    parser.add_argument("--before", metavar="REV", help="also time specdec_core/llama.py as of this git revision")
    parser.add_argument("--sizes", default="1,2,3,4,8,16", help="new tokens per forward")
    args = parser.parse_args()
    lm = sd.load_model("smollm2-135m", device="cpu")
    model = lm.model
    variants = {"ours (llama.forward)": lambda cache, ids: llama.forward(model, cache, ids),
                "transformers (model(...))": lambda cache, ids: model(input_ids=ids, cache=cache, use_cache=True)}
    new_cache = {"ours (llama.forward)": KVCache}
    if args.before:
        before = forward_at(args.before)
        variants[f"llama.py@{args.before}"] = lambda cache, ids: before.forward(model, cache, ids)
    context = torch.randint(100, 10000, (1, args.context), generator=torch.Generator().manual_seed(0))
    sizes = tuple(int(n) for n in args.sizes.split(","))
    times: dict[tuple[str, int], list[float]] = {(v, n): [] for v in variants for n in sizes}
    with torch.inference_mode():
        caches = {v: new_cache.get(v, lambda: DynamicCache(config=model.config))() for v in variants}
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
                        caches[name].crop(-n)
                        if round_index:
                            times[(name, n)].append(time.perf_counter() - start)
    names = list(variants)
    print(f"{args.context}-token cache, {torch.get_num_threads()} threads, table {model.kernel_dispatch.table.label()}")
    print(f"{'tokens':>6}  " + "  ".join(f"{v:>26}" for v in names) + "   (ms per forward + rollback, median; ÷ ours)")
    for n in sizes:
        ms = [1000 * statistics.median(times[(v, n)]) for v in names]
        print(f"{n:>6}  " + "  ".join(f"{m:>17.2f} ({m / ms[0]:5.3f})" for m in ms))


if __name__ == "__main__":
    main()
