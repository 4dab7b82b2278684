"""The bench subsystem's commands: `bench`, `profile`, `report` and `load-test` (each a Command: its
options, declared here, and its handler; the namespace stops here, the code below takes typed settings)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import SpecDecError, ensure_writable
from ..options import (Command, add_generation_options, add_kernels_option, add_model_options, add_weights_option,
                       csv_list, generation_config)
from ..suite import PROMPTS_DIR

if TYPE_CHECKING:
    from .remote import RemoteSettings

PROFILED_DRAFTERS = ("ngram", "early-exit")  # whose draft step `profile` times (c in the lab and the lessons)


def add_history_option(p: argparse.ArgumentParser, unit: str, default: str | None = "fresh") -> None:
    """--history: how long the suffix drafter's history of earlier outputs lives."""
    p.add_argument("--history", choices=("fresh", "run"), default=default,
                   help=f"the suffix drafter's history of earlier outputs: fresh (empty for every {unit}: first-pass "
                   f"figures) or run (kept across the run's {unit}s; never fed by the warm-up); default "
                   f"{default or 'run with --learners, else fresh'}")


def bench_options(b: argparse.ArgumentParser) -> None:
    b.add_argument("--prompts", type=Path, default=PROMPTS_DIR / "quick.jsonl")
    b.add_argument("--modes", default="ar,spec:ngram,hf:ar,hf:pld",
                   help="comma list of ar, nar, jacobi, spec:DRAFTER, hf:ar, hf:pld, hf:assisted, hf:assisted-default")
    b.add_argument("--repeats", type=int, default=1)
    add_history_option(b, "prompt")
    b.add_argument("--categories", help="only these categories of --prompts (comma-separated, e.g. chat,qa,story)")
    b.add_argument("--limit", type=int, default=0, help="only the first N prompts (0 = all, after --categories)")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--resume", action="store_true", help="continue the run whose progress OUT.partial.json holds (saved "
                   "after every prompt; refused on another processor, commit or settings)")
    b.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible server (http://host:port): run the prompts "
                   "there instead of on the local engine, with its speculative counters (--model: the served model's name)")
    b.add_argument("--baseline-endpoint", metavar="URL", help="with --endpoint: a second server (speculation off), "
                   "interleaved per prompt; speedups are endpoint over baseline")
    b.add_argument("--no-prompt-cache", action="store_true", help="with --endpoint: send llama.cpp's \"cache_prompt\": "
                   "false in every request (no prefill reuse between requests); other servers may ignore or reject it (not checked)")
    add_generation_options(b, sweep=True)


def remote_settings(args: argparse.Namespace, seed: int = 0) -> RemoteSettings:
    """--endpoint's RemoteSettings (bench/remote.py); --model's local default names no served model."""
    from .remote import RemoteSettings

    return RemoteSettings(endpoint=args.endpoint, baseline=args.baseline_endpoint,
                          model=None if args.model == "smollm2-135m" else args.model, max_tokens=args.max_new_tokens,
                          seed=seed, no_prompt_cache=args.no_prompt_cache)


def check_endpoint_options(args: argparse.Namespace) -> None:
    """--baseline-endpoint and --no-prompt-cache only go with --endpoint (bench and load-test)."""
    if args.baseline_endpoint and not args.endpoint:
        raise SpecDecError("--baseline-endpoint needs --endpoint (the server to compare with it)")
    if args.no_prompt_cache and not args.endpoint:
        raise SpecDecError("--no-prompt-cache is a server request field: it needs --endpoint")


def run_bench_command(args: argparse.Namespace) -> dict:
    """`bench`: the local engine's modes (bench/run.py), or with --endpoint a server's (bench/remote.py)."""
    check_endpoint_options(args)
    if args.endpoint:  # a remote server instead of the local engine
        from .remote import remote_bench

        if len(args.temperature) != 1:
            raise SpecDecError("--endpoint runs one temperature (the server decides the rest of its sampling)")
        if args.history != "fresh":
            raise SpecDecError("--history is the lab's suffix drafter's: a server keeps its own (drop --history)")
        return remote_bench(remote_settings(args, args.seed), args.prompts, args.out, args.categories, args.limit, args.repeats,
                            args.temperature[0])
    from .run import BenchRun, run_bench

    if not args.k or not args.temperature:
        raise SpecDecError("--k and --temperature need at least one value each")
    return run_bench(BenchRun(
        prompts=args.prompts, modes=args.modes, out=args.out, ks=args.k, temperatures=args.temperature,
        config=generation_config(args, k=args.k[0], temperature=args.temperature[0]),
        categories=args.categories, limit=args.limit, repeats=args.repeats, history=args.history, resume=args.resume,
        model=args.model, device=args.device, dtype=args.dtype, kernels=args.kernels))


def profile_options(pr: argparse.ArgumentParser) -> None:
    add_model_options(pr)
    add_kernels_option(pr, show=True)
    pr.add_argument("--tokens", type=csv_list(int), default=[1, 2, 3, 4, 6, 8, 12, 16])
    pr.add_argument("--batch", type=csv_list(int), default=[1, 2, 4, 8, 16])
    pr.add_argument("--repeats", type=int, default=5)
    pr.add_argument("--serving", action="store_true",
                    help="measure the serving cost table instead (packed batched forwards: requests x total tokens)")
    pr.add_argument("--rows", type=csv_list(int), default=[1, 2, 4, 8, 16, 32], help="--serving: requests per forward")
    pr.add_argument("--out", type=Path, help="write the cost model as JSON")
    pr.add_argument("--drafters", type=csv_list(str), help="drafters whose draft step to time, comma-separated "
                    "(default ngram,early-exit; e.g. heads,eagle for `eval-draft --costs`)")
    add_weights_option(pr)


def run_profile_command(args: argparse.Namespace) -> None:
    """`profile`: the cost model of one-request forwards; --serving the serving cost table; --kernels alone
    this machine's kernel table."""
    if args.serving:
        run_serving_profile(args)
    elif args.kernels == "show":
        show_kernel_table(args)
    else:
        run_profile(args)


def report_options(rp: argparse.ArgumentParser) -> None:
    rp.add_argument("results", type=Path, nargs="+", help="one or more bench results JSON files")
    rp.add_argument("--out", type=Path, default=Path("report.html"))
    rp.add_argument("--cost", type=Path, help="a cost model JSON from `profile --out`")


def run_report_command(args: argparse.Namespace) -> None:
    from .report import write_report

    ensure_writable(args.out)
    write_report(args.results, args.out, args.cost)


def load_test_options(lt: argparse.ArgumentParser) -> None:
    lt.add_argument("--concurrency", type=csv_list(int), default=None,
                    help="closed-loop levels (requests in flight), default 1,2,4,8,16,32 (with --replay: the recorded ones)")
    lt.add_argument("--schemes", type=csv_list(str), default=["ar", "spec-fixed", "spec-confidence", "spec-hardware"],
                    help="comma list of ar, spec-fixed, spec-confidence, spec-hardware, spec-budget, mtp1")
    lt.add_argument("--drafter", default="ngram", help="the spec schemes' drafter (default ngram)")
    lt.add_argument("--k", type=int, default=8, help="the most drafts a request verifies per step (default 8)")
    lt.add_argument("--threshold", type=float, default=0.5, help="spec-confidence: verify while prefix survival >= this")
    lt.add_argument("--arrival-rate", type=float, default=None, metavar="R",
                    help="Poisson arrivals at R requests/s instead of a closed loop (C then only sets 4 x C requests per level)")
    lt.add_argument("--requests-per-level", type=int, default=4, help="requests per level = this x concurrency")
    lt.add_argument("--max-new-tokens", type=int, default=64)
    lt.add_argument("--force-ar", action="store_true", help="the rollback switch: every scheme decodes plain AR")
    add_history_option(lt, "request", default=None)
    lt.add_argument("--learners", type=int, default=0, metavar="N",
                    help="a classroom: N learners ask prompts/classroom.jsonl's related questions at once, each in "
                    "sequence, against one shared suffix history (all N x groups requests at every level)")
    add_weights_option(lt)
    lt.add_argument("--prompts", type=Path, default=PROMPTS_DIR / "suite.jsonl")
    lt.add_argument("--replay", type=Path, metavar="LOAD_JSON",
                    help="re-run the schedulers on this load-test's recorded drafts (simulated time)")
    lt.add_argument("--costs", type=Path,
                    help="with --replay: a serving cost table (`profile --serving --out`) or a load-test JSON (its own table)")
    add_model_options(lt, model_help="the local model, or with --endpoint the served model's name")
    add_kernels_option(lt)
    lt.add_argument("--out", type=Path, required=True)
    lt.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible server (http://host:port): the same closed-loop "
                    "workload and metrics against it, with its speculative counters per level (--schemes, --drafter, "
                    "--k, --threshold, --force-ar and --weights do not apply)")
    lt.add_argument("--baseline-endpoint", metavar="URL", help="with --endpoint: a second server (speculation off), run "
                    "back to back with it on each level's request list; matched throughput is endpoint over baseline")
    lt.add_argument("--no-prompt-cache", action="store_true", help="with --endpoint: send llama.cpp's \"cache_prompt\": "
                    "false in every request (llama-server otherwise reuses a repeated prompt's KV, which makes TTFT "
                    "meaningless); other servers may ignore or reject the field (not checked)")


def run_load_test_command(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from ..models import load_model
    from ..quant import with_weights
    from .classroom import classroom
    from .loadtest import LoadConfig, dumps, run_load_test, workload

    ensure_writable(args.out)
    args.concurrency_given = args.concurrency is not None
    args.concurrency = args.concurrency or [1, 2, 4, 8, 16, 32]
    check_endpoint_options(args)
    if args.endpoint:  # a remote server instead of the local engine (bench/remote_load.py)
        from .remote_load import remote_load_test

        if args.replay:
            raise SpecDecError("--replay re-runs the lab's own schedulers: it does not go with --endpoint")
        if args.arrival_rate is not None:
            raise SpecDecError("--endpoint runs the closed loop only (C in flight): drop --arrival-rate")
        if args.learners or args.history:
            raise SpecDecError("--learners and --history are the lab's own engine's: they do not go with --endpoint")
        remote_load_test(remote_settings(args), args.prompts, args.out, LoadConfig(
            concurrency=tuple(args.concurrency), requests_per_level=args.requests_per_level,
            max_new_tokens=args.max_new_tokens))
        return
    if args.replay:
        run_replay_command(args)
        return
    cfg = LoadConfig(concurrency=tuple(args.concurrency), schemes=tuple(args.schemes), drafter=args.drafter, k=args.k,
                     threshold=args.threshold, arrival_rate=args.arrival_rate,
                     requests_per_level=args.requests_per_level, max_new_tokens=args.max_new_tokens,
                     force_ar=args.force_ar, history=args.history or ("run" if args.learners else "fresh"),
                     learners=args.learners)
    cfg.validate()
    if args.requests_per_level < 1:
        raise SpecDecError(f"requests-per-level must be >= 1 (got {args.requests_per_level})")
    workload(args.prompts)  # a bad prompt file fails before the model loads
    lm = with_weights(load_model(args.model, args.device, args.dtype, args.kernels), args.weights)
    per_level = [len(classroom(cfg.learners)) if cfg.learners else cfg.requests_per_level * c for c in cfg.concurrency]
    total = sum(per_level) * len(cfg.schemes)
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


def run_replay_command(args: argparse.Namespace) -> None:
    from ..serving.costs import CostTable
    from .loadtest import matched_summary
    from .replay import replay

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


def run_serving_profile(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from ..models import load_model
    from ..quant import with_weights
    from ..serving.costs import TOKENS_PER_ROW
    from .loadtest import serving_costs

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


def run_profile(args: argparse.Namespace) -> None:
    """`profile`: print and optionally save the cost model of one-request forwards, with the kernel table
    the linears followed and the guard's flags on the raw r(k)."""
    from tqdm import tqdm

    from ..costmodel import measure_cost_model
    from ..drafters import DRAFTERS
    from ..generation import drafter_factory
    from ..models import load_model
    from ..quant import with_weights

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


def show_kernel_table(args: argparse.Namespace) -> None:
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


COMMANDS = (
    Command("bench", "time modes on a prompt suite, interleaved per prompt", bench_options, run_bench_command),
    Command("profile", "measure the cost model: forward time vs tokens and batch size", profile_options, run_profile_command),
    Command("report", "write an offline HTML report + Markdown summary from bench results", report_options,
            run_report_command),
    Command("load-test", "serve many requests at once: per-user speed vs aggregate throughput per scheme",
            load_test_options, run_load_test_command),
)
