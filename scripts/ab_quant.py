"""A/B of the quantised linears (kernels.Int4Linear / Int8Linear) against fp32, on this machine, interleaved.

1. One linear of each shape SmolLM2 has (q/o 576→576, k/v 576→192, gate/up 576→1536, down 1536→576,
   the head 576→49152) at 1, 2, 4 and 8 rows: fp32 through the legacy kernel table (kernels/routes.py),
   int4 (groups of 32) and int8 (per row), both with bf16 activations; median ms, ratios to fp32.
2. Whole forwards of 1, 2, 4 and 8 new tokens on a 64-token context for the fp32 target and its int8 and
   int4 copies (costmodel.measure_forward_times), and greedy AR tokens/s against the copy-bandwidth
   roofline (bytes per token = every tensor the model holds, once).
3. Where a one-token step goes: the step as it is, and with every linear swapped for a stand-in that only
   allocates its output, so the share spent outside matmuls (norms, rotary, attention, Python) is measured.
4. (--fusion) Fusing a layer's linears (quant.FUSED: q/k/v and gate/up as one kernel call each): the int8
   and int4 copies built fused and apart, their one-token step, its part outside matmuls and AR tokens/s,
   interleaved. Fusing changes no number (tests/test_quant.py), only the time.

Usage: .venv/bin/python scripts/ab_quant.py [--repeats 7] [--out benchmarks/quant-kernels-cpu.json]
       .venv/bin/python scripts/ab_quant.py --fusion [--repeats 7] [--out benchmarks/quant-fusion-cpu.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import specdec_core as sd  # noqa: E402
from specdec_core import quant  # noqa: E402
from specdec_core.costmodel import measure_bandwidth_gb_s, measure_forward_times, model_bytes  # noqa: E402
from specdec_core.kernels import LEGACY, Int4Linear, Int8Linear, apply_kernels  # noqa: E402
from specdec_core.provenance import cpu_name, git_commit  # noqa: E402

SHAPES = {"q/o 576x576": (576, 576), "k/v 192x576": (192, 576), "gate/up 1536x576": (1536, 576),
          "down 576x1536": (576, 1536), "head 49152x576": (49152, 576)}
ROWS = (1, 2, 4, 8)


def fp32_linear(weight: torch.Tensor) -> torch.nn.Linear:
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    linear.weight.data.copy_(weight)
    apply_kernels(linear, LEGACY)  # the fixed dispatch these figures (BENCHMARKS §9b) were taken with
    return linear


def median_ms(fn, x: torch.Tensor, calls: int) -> float:
    with torch.inference_mode():
        fn(x)
        start = time.perf_counter()
        for _ in range(calls):
            fn(x)
    return 1000 * (time.perf_counter() - start) / calls


def kernel_table(repeats: int) -> dict:
    torch.manual_seed(0)
    out = {}
    for name, (n, k) in SHAPES.items():
        weight = torch.randn(n, k) * 0.05
        variants = {"fp32": fp32_linear(weight), "int4/bf16": Int4Linear(*quant.quantise_int4(weight)),
                    "int8/bf16": Int8Linear(*quant.quantise_int8(weight))}
        calls = 20 if n > 10_000 else 200
        samples = {(v, r): [] for v in variants for r in ROWS}
        for _ in range(repeats):  # interleaved: every variant and row count once per round
            for (v, r), times in samples.items():
                times.append(median_ms(variants[v], torch.randn(r, k), calls))
        out[name] = {f"{v}@{r}": statistics.median(t) for (v, r), t in samples.items()}
    return out


def outside_matmuls(lm, repeats: int) -> dict:
    """One-token steps as they are, and with every linear (the head included) swapped for a stand-in that
    only allocates its output: the second time is the step's cost outside matmuls (norms, rotary,
    attention, Python), what no kernel can shrink."""
    linears = [m for m in lm.model.modules() if isinstance(m, (torch.nn.Linear, Int4Linear, Int8Linear))]

    def step_ms() -> float:
        cache = sd.target.Target(lm).new_cache()
        with torch.inference_mode():
            sd.llama.forward(lm.model, cache, torch.randint(100, 10000, (1, 64)), last_only=True)
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                sd.llama.forward(lm.model, cache, torch.randint(100, 10000, (1, 1)))
                times.append(time.perf_counter() - start)
        return 1000 * statistics.median(times)

    full = step_ms()
    saved = [m.__dict__.get("forward") for m in linears]
    for m in linears:
        out = getattr(m, "out_features")
        m.forward = lambda x, out=out: x.new_zeros(*x.shape[:-1], out)
    try:
        bare = step_ms()
    finally:
        for m, forward in zip(linears, saved):
            if forward is None:
                m.__dict__.pop("forward", None)
            else:
                m.forward = forward
    return {"step_ms": full, "outside_matmul_ms": bare, "outside_matmul_share": bare / full}


def fusion(base, repeats: int) -> dict:
    """Step ms, ms outside matmuls and AR tokens/s of each quantised copy, fused and apart (medians)."""
    copies = {f"{w}/{label}": replace(base, model=quant.quantised_copy(base, bits, fuse=fuse), weights=w)
              for w, bits in (("int8", 8), ("int4", 4)) for label, fuse in (("apart", False), ("fused", True))}
    prompt, config = "Write a short story about a robot who learns to paint.", sd.GenerationConfig(max_new_tokens=64)
    samples = {name: [] for name in copies}
    for _ in range(repeats):  # interleaved: every copy once per round
        for name, lm in copies.items():
            samples[name].append({**outside_matmuls(lm, 20), "ar_tokens_per_s": sd.generate(lm, prompt, config).metrics["tokens_per_s"]})
    return {name: {key: statistics.median(s[key] for s in rows) for key in rows[0]} for name, rows in samples.items()}


def environment(bandwidth: float | None = None) -> dict:
    return {"cpu": cpu_name(), "commit": git_commit(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            **({"bandwidth_gb_s": bandwidth} if bandwidth else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--fusion", action="store_true", help="only part 4: the quantised copies fused and apart")
    args = parser.parse_args()
    if args.fusion:
        table = fusion(sd.load_model("smollm2-135m", device="cpu"), args.repeats)
        for name, row in table.items():
            print(f"{name:12s} step {row['step_ms']:.1f} ms, outside matmuls {row['outside_matmul_ms']:.1f} ms "
                  f"({100 * row['outside_matmul_share']:.0f}%), AR {row['ar_tokens_per_s']:.1f} tok/s")
        if args.out:
            args.out.write_text(json.dumps({"environment": environment(), "fusion": table}, indent=1))
        return
    table = kernel_table(args.repeats)
    print(f"{'linear':18s} " + " ".join(f"{v + '@' + str(r):>13s}" for v in ('fp32', 'int4/bf16', 'int8/bf16') for r in ROWS))
    for name, row in table.items():
        print(f"{name:18s} " + " ".join(f"{row[f'{v}@{r}']:13.3f}" for v in ('fp32', 'int4/bf16', 'int8/bf16') for r in ROWS))
    base = sd.load_model("smollm2-135m", device="cpu")
    models = {w: quant.with_weights(base, w) for w in quant.WEIGHTS}
    forwards = {w: [] for w in models}
    for _ in range(args.repeats):
        for w, lm in models.items():
            forwards[w].append({r["tokens"]: r["seconds"] for r in measure_forward_times(lm, ROWS, repeats=1)})
    bandwidth = measure_bandwidth_gb_s(base.device)
    prompt, config = "Write a short story about a robot who learns to paint.", sd.GenerationConfig(max_new_tokens=64)
    rates = {w: [] for w in models}
    for _ in range(3):
        for w, lm in models.items():
            rates[w].append(sd.generate(lm, prompt, config).metrics["tokens_per_s"])
    summary = {}
    for w, lm in models.items():
        ms = {t: 1000 * statistics.median(f[t] for f in forwards[w]) for t in ROWS}
        size = model_bytes(lm.model)
        summary[w] = {"forward_ms": ms, "bytes": size, "roofline_tokens_per_s": bandwidth * 1e9 / size,
                      "ar_tokens_per_s": statistics.median(rates[w]), **outside_matmuls(lm, 20)}
        s = summary[w]
        print(f"{w}: forward ms {', '.join(f'{t}: {v:.1f}' for t, v in ms.items())}; {size / 1e6:.0f} MB/token, "
              f"roofline {s['roofline_tokens_per_s']:.0f} tok/s, AR {s['ar_tokens_per_s']:.1f} tok/s "
              f"({100 * s['ar_tokens_per_s'] / s['roofline_tokens_per_s']:.0f}% of roofline); one-token step "
              f"{s['step_ms']:.1f} ms, {100 * s['outside_matmul_share']:.0f}% outside matmuls")
    if args.out:
        args.out.write_text(json.dumps({"environment": environment(bandwidth), "linears_ms": table, "models": summary},
                                       indent=1))


if __name__ == "__main__":
    main()
