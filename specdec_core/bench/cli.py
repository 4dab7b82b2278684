"""The `load-test` and `profile` commands (argparse namespace in, printed table and JSON file out)."""
from __future__ import annotations

import json
import sys

from ..errors import SpecDecError, ensure_writable
from ..costmodel import measure_cost_model
from ..drafters import DRAFTERS
from ..generation import drafter_factory
from ..quant import with_weights
from ..serving.costs import CostTable
from .loadtest import LoadConfig, dumps, matched_summary, run_load_test, serving_costs, workload

PROFILED_DRAFTERS = ("ngram", "early-exit")  # whose draft step `profile` times (c in the lab and the lessons)


def run_load_test_command(args) -> None:
    from tqdm import tqdm

    from ..models import load_model

    ensure_writable(args.out)
    args.concurrency_given = args.concurrency is not None
    args.concurrency = args.concurrency or [1, 2, 4, 8, 16, 32]
    if getattr(args, "baseline_endpoint", None) and not getattr(args, "endpoint", None):
        raise SpecDecError("--baseline-endpoint needs --endpoint (the server to compare with it)")
    if getattr(args, "no_prompt_cache", False) and not getattr(args, "endpoint", None):
        raise SpecDecError("--no-prompt-cache is a server request field: it needs --endpoint")
    if getattr(args, "endpoint", None):  # a remote server instead of the local engine (bench/remote.py)
        from .remote import run_remote_load_test_command
        run_remote_load_test_command(args)
        return
    if args.replay:
        run_replay_command(args)
        return
    cfg = LoadConfig(concurrency=tuple(args.concurrency), schemes=tuple(args.schemes), drafter=args.drafter, k=args.k,
                     threshold=args.threshold, arrival_rate=args.arrival_rate,
                     requests_per_level=args.requests_per_level, max_new_tokens=args.max_new_tokens,
                     force_ar=args.force_ar)
    cfg.validate()
    if args.requests_per_level < 1:
        raise SpecDecError(f"requests-per-level must be >= 1 (got {args.requests_per_level})")
    workload(args.prompts)  # a bad prompt file fails before the model loads
    lm = with_weights(load_model(args.model, args.device, args.dtype, args.kernels), args.weights)
    total = sum(cfg.requests_per_level * c for c in cfg.concurrency) * len(cfg.schemes)
    with tqdm(total=total, desc="load-test", unit="req") as bar:
        result = run_load_test(lm, cfg, bar, args.prompts)
    args.out.write_text(dumps(result))
    print(summary(result))


def summary(result: dict) -> str:
    lines = ["scheme           C  per-user tok/s  aggregate tok/s  TTFT s  p95 ITL s  verify tok  tau   identical"]
    for r in result["runs"]:
        lines.append(f"{r['scheme']:15s} {r['concurrency']:3d}  {r['per_user_tok_s']:14.2f}  {r['aggregate_tok_s']:15.2f}  "
                     f"{r['ttft_s']:6.2f}  {r['p95_itl_s']:9.3f}  {r['mean_verify_tokens']:10.2f}  {r['tau']:4.2f}  "
                     f"{r['identical_to_ar']}")
    def ratio(x: float | None) -> str:
        return "%.2fx" % x if x else "null"

    for m in result.get("matched_throughput_all") or []:
        by_category = ", ".join(f"{c} {ratio(x)}" for c, x in m["per_user_speedup_by_category"].items())
        lines.append(f"matched throughput: {m['scheme']} per-user speed {ratio(m['per_user_speedup'])} over {m['baseline']} "
                     f"({len(m['levels'])} levels; mean {ratio(m['per_user_mean_speedup'])}; {by_category})")
    if result.get("batched_ar_c1_over_single"):
        lines.append(f"batched ar at concurrency 1 / single-request ar: {result['batched_ar_c1_over_single']:.3f}")
    return "\n".join(lines)


def run_replay_command(args) -> None:
    from .loadtest import replay

    try:
        recorded = json.loads(args.replay.read_text())["records"]
    except (OSError, ValueError, KeyError) as err:
        raise SpecDecError(f"cannot read recorded drafts from {args.replay}: {err}")
    if not args.costs:
        raise SpecDecError("--replay needs --costs COST_JSON (from `profile --serving --out ...`)")
    try:
        data = json.loads(args.costs.read_text())
        costs = CostTable.from_dict(data.get("cost_table", data))  # a cost table, or a load-test's own
    except (OSError, ValueError, TypeError, AttributeError) as err:
        raise SpecDecError(f"cannot read a serving cost table from {args.costs}: {err}")
    levels = tuple(args.concurrency) if args.concurrency_given else None
    runs = replay(recorded, costs, max_new_tokens=args.max_new_tokens, threshold=args.threshold, concurrency=levels,
                  requests_per_level=args.requests_per_level)
    result = {"simulated": True, "replayed_from": str(args.replay), "cost_table": costs.__dict__, "runs": runs,
              "matched_throughput": matched_summary(runs, "spec-hardware")}
    args.out.write_text(json.dumps(result, indent=1))
    for r in runs:
        print(f"[simulated] {r['scheme']:15s} C={r['concurrency']:3d} per-user {r['per_user_tok_s']:.2f} tok/s, "
              f"aggregate {r['aggregate_tok_s']:.2f} tok/s")
    ratio = result["matched_throughput"]["per_user_speedup"]
    print(f"[simulated] matched throughput spec-hardware/ar: {'%.2fx' % ratio if ratio else 'null'}", file=sys.stderr)


def run_serving_profile(args) -> None:
    from tqdm import tqdm

    from ..models import load_model
    from ..serving.costs import TOKENS_PER_ROW

    if args.out:
        ensure_writable(args.out)
    lm = with_weights(load_model(args.model, args.device, args.dtype, args.kernels), args.weights)
    with tqdm(total=(args.repeats + 1) * len(args.rows) * len(TOKENS_PER_ROW), desc="serving costs", unit="fwd") as bar:
        costs = serving_costs(lm, rows=tuple(args.rows), repeats=args.repeats, progress=bar.update)
    print(f"{costs.machine}: packed forward seconds by requests x total tokens")
    for g in costs.grid:
        print(f"{g['rows']:4d} requests  {g['tokens']:4d} tokens  {1000 * g['seconds']:8.1f} ms")
    if args.out:
        costs.save(args.out)


def run_profile(args) -> None:
    """`profile`: print and optionally save the cost model of one-request forwards, with the kernel table
    the linears followed and the guard's flags on the raw r(k). `profile --kernels` alone prints the table."""
    from tqdm import tqdm

    from ..models import load_model

    if args.kernels == "show":
        show_kernel_table(args)
        return
    drafters = args.drafters or PROFILED_DRAFTERS
    unknown = [name for name in drafters if name not in DRAFTERS]
    if unknown:
        raise SpecDecError(f"unknown drafter {', '.join(unknown)}: choose from {', '.join(DRAFTERS)}")
    lm = with_weights(load_model(args.model, args.device, args.dtype, args.kernels), args.weights)
    total = (args.repeats + 1) * len(args.tokens) * len(args.batch)
    with tqdm(total=total, desc="forward timings", unit="fwd") as bar:
        cm = measure_cost_model(lm, args.tokens, args.batch, args.repeats, progress=bar.update,
                                drafters={name: drafter_factory(lm, name) for name in drafters})
    one = cm.seconds(1)
    print(f"{cm.model} on {cm.device} ({cm.dtype}, {cm.threads} threads), context {cm.context_len}")
    if cm.kernel_table:
        print(f"kernel table {cm.kernel_table['label']}")
    print("batch  tokens  ms/forward  r = x(1-token)  ms/token")
    for row in sorted(cm.forward_s, key=lambda r: (r["batch"], r["tokens"])):
        t, b, s = row["tokens"], row["batch"], row["seconds"]
        print(f"{b:5d}  {t:6d}  {1000 * s:10.1f}  {s / cm.seconds(1, b):14.2f}  {1000 * s / (t * b):8.2f}")
    for name, s in cm.draft_step_s.items():
        print(f"draft step {name}: {1000 * s:.2f} ms  ->  c = {cm.c(name):.3f}")
    roof = cm.roofline_tokens_per_s()
    print(f"copy bandwidth {cm.bandwidth_gb_s:.1f} GB/s; weights {cm.weight_bytes / 1e6:.0f} MB; "
          f"roofline AR <= {roof:.1f} tok/s; measured 1-token forward {1 / one:.1f} tok/s "
          f"({100 * (1 / one) / roof:.0f}% of the copy bandwidth)" if roof else "")
    for flag in cm.flags:
        print(f"FLAG: {flag}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(cm.to_json())


def show_kernel_table(args) -> None:
    """`profile --kernels`: this machine's measured kernel table (measured now if missing, or again with
    --remeasure-kernels), each candidate's whole-forward times and where the table is stored."""
    from ..kernels import MAX_ROWS, load_or_measure, table_key
    from ..kernels.table import table_path
    from ..models import cache_dir, load_model

    lm = load_model(args.model, args.device, args.dtype, "torch")
    if lm.device.type != "cpu":
        raise SpecDecError("kernel tables are for CPU models: this model runs on " + str(lm.device))
    key = table_key(lm.name, lm.dtype)
    table = load_or_measure(lm.model, key, cache_dir(), remeasure=args.remeasure_kernels)
    print(f"{key['cpu']}, torch {key['torch']}, {key['threads']} threads, {key['model']} {key['dtype']}")
    print(f"stored in {table_path(cache_dir(), key)}")
    print(f"kernel table {table.label()}")
    print("whole forward, ms (fastest of the repeats), by rows:")
    print(f"{'candidate':12s} " + " ".join(f"{n:>6d}" for n in range(1, MAX_ROWS + 1)))
    for name, times in table.ms.items():
        print(f"{name:12s} " + " ".join(f"{t:6.1f}" if t is not None else f"{'-':>6s}" for t in times))
    chosen = [table.time_ms(n) for n in range(1, MAX_ROWS + 1)]
    print(f"{'table':12s} " + " ".join(f"{t:6.1f}" if t is not None else f"{'-':>6s}" for t in chosen))
    print("r(k) = t(k+1)/t(1): " + ", ".join(f"{c / chosen[0]:.2f}" for c in chosen[1:9] if c is not None and chosen[0]))

