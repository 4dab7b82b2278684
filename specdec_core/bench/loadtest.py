"""The load experiment: per-user speed against aggregate throughput, per scheme, as concurrency grows.

For each concurrency level C, 4 × C requests cycle through one fixed workload (the suite's chat, qa
and copy prompts in a seeded shuffle that spreads the categories evenly), arriving either closed-loop
(C in flight: a request arrives when one finishes) or as a Poisson stream of rate λ. Levels run one
after another and, within a level, the schemes run back to back on the same request list, so machine
noise hits them alike.

Metrics come from the steady state: the first C and the last C *arrivals* are left out (the batch is
still filling up, or it drains while they run). Leaving out requests by arrival, not by completion,
matters once speeds differ by prompt: the last C *completions* of a speculative scheme are mostly its
slowest prompts (free text finishes after copied text), so cutting them would flatter its median.
Cut by arrival, every scheme keeps the same prompts (arrivals follow one fixed order).

Definitions (every figure of the output):
- per-user tokens/s = (output tokens - 1) / (last-token time - first-token time), median over the
  steady requests (also their mean, and the median per prompt category);
- TTFT = first token - arrival; inter-token latency = gaps between successive deliveries to a request
  (a step that delivers 3 tokens is one gap), p50 and p95 over all gaps;
- aggregate tokens/s = tokens delivered to anyone in the steady window / its length, the window running
  from the first steady arrival to the first of the last C arrivals: closed loop, C requests are in
  flight throughout;
- matched throughput: at each `ar` level's aggregate tokens/s, the scheme's per-user tokens/s linearly
  interpolated between its two measured levels around it (never extrapolated), over `ar`'s; at least
  3 `ar` levels must fall inside the scheme's range, otherwise the ratio is null. The headline uses
  the median per-user speed; the same ratio from the mean and per category comes with it.

`replay.py` re-runs the schedulers on a run's recorded drafts (per step: proposal length, confidences and
how many drafts matched the target) against another cost table, e.g. a GPU's, in simulated time.
"""
from __future__ import annotations

import hashlib
import json
import platform
import random
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..suite import PROMPTS_DIR, PromptCase, load_prompts
from ..decode import GenerationConfig
from ..drafters import drafter_options, new_history, uses_history
from ..errors import SpecDecError
from ..models import LoadedModel, cache_dir
from ..serving.costs import CostTable, measure_cost_table
from ..generation import drafter_costs, generate
from ..serving.engine import Request, ServingEngine, serving_drafter
from ..serving.schedulers import make_scheduler
from .classroom import classroom

SCHEMES = ("ar", "spec-fixed", "spec-confidence", "spec-hardware")  # the default run
EXTRA_SCHEMES = ("spec-budget",)  # on request: the deployed variant (b) of the hardware scheduler
WORKLOAD_CATEGORIES = ("chat", "qa", "copy")
PROMPTS_FILE = PROMPTS_DIR / "suite.jsonl"


@dataclass
class LoadConfig:
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    schemes: tuple[str, ...] = SCHEMES
    drafter: str = "ngram"
    k: int = 8
    threshold: float = 0.5  # the confidence scheduler's prefix-survival threshold
    arrival_rate: float | None = None  # requests/s (Poisson); None = closed loop at C in flight
    requests_per_level: int = 4  # × C
    max_new_tokens: int = 64
    seed: int = 0
    force_ar: bool = False  # the rollback switch: every scheme decodes plain AR
    # The suffix drafter's history: "fresh" (every request starts empty) or "run" (each scheme × level
    # starts empty and keeps every finished request's output: the same history for every scheme).
    history: str = "fresh"
    learners: int = 0  # > 0: the classroom workload (bench/classroom.py), all of it at every level

    def validate(self) -> None:
        unknown = [s for s in self.schemes if s not in SCHEMES + EXTRA_SCHEMES and s != "mtp1"]
        if unknown:
            raise SpecDecError(f"unknown scheme {unknown[0]!r}: choose from {', '.join(SCHEMES + EXTRA_SCHEMES + ('mtp1',))}")
        if not self.concurrency or min(self.concurrency) < 1 or max(self.concurrency) > 256:
            raise SpecDecError("concurrency levels must be between 1 and 256")
        if self.arrival_rate is not None and not self.arrival_rate > 0:
            raise SpecDecError(f"arrival rate must be > 0 requests/s (got {self.arrival_rate})")
        if not 1 <= self.k <= 16:
            raise SpecDecError(f"k must be between 1 and 16 (got {self.k})")
        if not 0 < self.threshold < 1:
            raise SpecDecError(f"threshold must be in (0, 1) (got {self.threshold})")
        if self.history not in ("fresh", "run"):
            raise SpecDecError(f"history must be fresh or run (got {self.history!r})")
        if self.learners < 0:
            raise SpecDecError(f"learners must be >= 0 (got {self.learners})")


# --- workload -----------------------------------------------------------------------------------


def workload(path: Path = PROMPTS_FILE, categories=WORKLOAD_CATEGORIES, seed: int = 0) -> list[PromptCase]:
    """The suite's prompts of `categories` in one seeded order that spreads every category evenly
    (the file lists its 10 copy prompts first; file order would make the first levels all copy)."""
    rng = random.Random(seed)
    cases = [c for c in load_prompts(path) if c.category in categories and len(c.turns) == 1]
    if not cases:
        raise SpecDecError(f"no single-turn prompts of {', '.join(categories)} in {path}")
    keyed = []
    for category in categories:
        group = [c for c in cases if c.category == category]
        rng.shuffle(group)
        # Each prompt's place is its quantile within its category, jittered: the merge alternates them.
        keyed += [((i + rng.random()) / len(group), c) for i, c in enumerate(group)]
    return [c for _, c in sorted(keyed, key=lambda kc: kc[0])]


def scheme_config(scheme: str, cfg: LoadConfig) -> tuple[GenerationConfig, str]:
    """(generation config, scheduler name) of a scheme."""
    base = GenerationConfig(mode="ar", drafter=cfg.drafter, k=cfg.k, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed)
    if scheme == "ar":
        return base, "fixed"
    if scheme == "mtp1":  # the same drafter, one draft verified per step: the MTP-1 production baseline
        return replace(base, mode="spec", k=1), "fixed"
    return replace(base, mode="spec"), scheme.split("-", 1)[1]


# --- one level of one scheme --------------------------------------------------------------------


def level_order(cases: list[PromptCase], concurrency: int, requests_per_level: int) -> list[PromptCase]:
    """One level's request list: requests_per_level × C requests cycling through the workload, in
    arrival order; every scheme of the level (and a remote server and its baseline, `bench/remote.py`)
    runs this same list."""
    return [cases[i % len(cases)] for i in range(requests_per_level * concurrency)]


def run_level(lm: LoadedModel, scheme: str, concurrency: int, cases: list[PromptCase], cfg: LoadConfig,
              costs: CostTable, progress=None) -> tuple[list[Request], ServingEngine]:
    config, scheduler = scheme_config(scheme, cfg)
    history = (new_history(drafter_options("suffix", config.drafter_options))
               if cfg.history == "run" and uses_history(config) else None)
    engine = ServingEngine(lm, make_scheduler(scheduler, cfg.threshold), costs, force_ar=cfg.force_ar,
                           drafter_costs=drafter_costs(lm, cfg.drafter), history=history)
    order = cases if cfg.learners else level_order(cases, concurrency, cfg.requests_per_level)
    total = len(order)
    start = engine.clock()
    if cfg.arrival_rate:  # open loop: Poisson arrivals, the same seeded times for every scheme
        rng = random.Random(cfg.seed + concurrency)
        t = start
        for case in order:
            engine.submit([{"role": "user", "content": case.turns[0]}], config, arrival_s=t, label=case.id)
            t += rng.expovariate(cfg.arrival_rate)
        engine.run(progress)
    else:  # closed loop: C in flight, the next one arrives when one finishes
        submitted = 0
        for _ in range(min(concurrency, total)):
            engine.submit([{"role": "user", "content": order[submitted].turns[0]}], config, arrival_s=start,
                          label=order[submitted].id)
            submitted += 1
        while not engine.idle:
            for request in engine.step():
                if progress:
                    progress(request)
                if submitted < total:
                    engine.submit([{"role": "user", "content": order[submitted].turns[0]}], config,
                                  label=order[submitted].id)
                    submitted += 1
    requests = sorted(engine.finished, key=lambda r: r.id)
    errors = [r.error for r in requests if r.error]
    if errors:
        raise SpecDecError(f"a load-test request was refused: {errors[0]}")
    return requests, engine


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    position = q * (len(values) - 1)
    low = int(position)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (position - low)


def steady_state(requests: list, concurrency: int) -> tuple[list, float, float]:
    """The steady requests and window (module docstring): all of them, first arrival to last
    completion, when a run is too short to leave 2 × C out."""
    by_arrival = sorted(requests, key=lambda r: (r.arrival_s, r.id))
    if len(by_arrival) > 2 * concurrency:
        steady = by_arrival[concurrency:len(by_arrival) - concurrency]
        start, end = steady[0].arrival_s, by_arrival[len(by_arrival) - concurrency].arrival_s
        if end > start:
            return steady, start, end
    return by_arrival, by_arrival[0].arrival_s, max(r.finish_s for r in requests)


def request_speed(request) -> tuple[float | None, float, list[float]]:
    """One request's (per-user tokens/s, TTFT, inter-token gaps) from its arrival_s and deliveries
    [(time, tokens)] (module docstring): the one definition the local load test, its replay and a remote
    server's requests (`bench/remote.py`) all share. tokens/s is None for a request of one token."""
    times = [t for t, n in request.deliveries if n > 0]
    tokens = sum(n for _, n in request.deliveries)
    speed = (tokens - 1) / (times[-1] - times[0]) if tokens > 1 and times[-1] > times[0] else None
    return speed, times[0] - request.arrival_s, [b - a for a, b in zip(times, times[1:])]


def speed_metrics(requests: list, concurrency: int, category_of: dict[str, str] | None = None) -> dict:
    """Per-user speed, TTFT, inter-token latency and aggregate throughput of a run's steady state.
    Works on anything with id, label, arrival_s, finish_s and deliveries [(time, tokens)]: served
    requests and the replay's simulated ones alike."""
    steady, start, end = steady_state(requests, concurrency)
    per_user, ttft, gaps = {}, [], []
    for r in steady:
        speed, first, request_gaps = request_speed(r)
        if speed is not None:
            per_user[r.id] = speed
        ttft.append(first)
        gaps += request_gaps
    delivered = sum(n for r in requests for t, n in r.deliveries if start <= t <= end)
    by_category: dict[str, list[float]] = {}
    for r in steady:
        if category_of and r.id in per_user:
            by_category.setdefault(category_of[r.label], []).append(per_user[r.id])
    return {
        "num_requests": len(requests), "steady_requests": len(steady),
        "per_user_tok_s": statistics.median(per_user.values()) if per_user else 0.0,
        "per_user_mean_tok_s": statistics.fmean(per_user.values()) if per_user else 0.0,
        "per_user_by_category": {c: statistics.median(v) for c, v in sorted(by_category.items())},
        "ttft_s": statistics.median(ttft), "p50_itl_s": _percentile(gaps, 0.5), "p95_itl_s": _percentile(gaps, 0.95),
        "aggregate_tok_s": delivered / (end - start) if end > start else 0.0,
    }


def level_metrics(requests: list[Request], concurrency: int, engine: ServingEngine | None = None,
                  category_of: dict[str, str] | None = None) -> dict:
    """The run's figures from its steady-state requests (see the module docstring)."""
    steady, _, _ = steady_state(requests, concurrency)
    records = [s for r in steady for s in r.records]
    drafting = [s for s in records if s.verified]
    k_max = max((s.verified for s in records), default=0)
    offered = [sum(s.verified >= i for s in drafting) for i in range(1, k_max + 1)]
    accepted_at = [sum(s.verified >= i and s.accepted >= i for s in drafting) for i in range(1, k_max + 1)]
    decisions: dict[int, int] = {}
    for s in records:
        decisions[s.verified] = decisions.get(s.verified, 0) + 1
    num_draft_tokens = sum(s.verified for s in drafting)
    num_accepted = sum(s.accepted for s in drafting)
    return {
        **speed_metrics(requests, concurrency, category_of),
        "mean_verify_tokens": 1 + num_draft_tokens / len(records) if records else 1.0,  # per request per step
        "tau": sum(s.emitted for s in records) / len(records) if records else 0.0,
        "num_drafts": len(drafting), "num_draft_tokens": num_draft_tokens, "num_accepted_tokens": num_accepted,
        "accepted_per_pos": [a / o if o else 0.0 for a, o in zip(accepted_at, offered)],
        "rollback_rate": sum(s.accepted < s.verified for s in drafting) / len(drafting) if drafting else 0.0,
        "kv_entries_discarded": num_draft_tokens - num_accepted,
        "scheduler_decisions": {str(k): v for k, v in sorted(decisions.items())},
        "verify_s": sum(s.seconds - s.draft_s for s in engine.steps) if engine else 0.0,
        "draft_s": sum(s.draft_s for s in engine.steps) if engine else 0.0,
        "prefill_s": sum(s.prefill_s for s in engine.steps) if engine else 0.0,
        "history_bytes": engine.history.nbytes() if engine and engine.history else None,  # the suffix drafter's, shared
    }


# --- matched throughput -------------------------------------------------------------------------


def matched_throughput(runs: list[dict], scheme: str, baseline: str = "ar", key: str = "per_user_tok_s",
                       category: str | None = None) -> dict:
    """Per-user speedup of `scheme` over `baseline` at equal aggregate throughput (module docstring).
    key: which per-user figure (the median, or "per_user_mean_tok_s"); category: that category's median."""
    def speed(run: dict) -> float:
        return run["per_user_by_category"][category] if category else run[key]

    if category:  # levels whose steady state holds none of the category's prompts say nothing of it
        runs = [r for r in runs if category in r["per_user_by_category"]]
    base = sorted((r for r in runs if r["scheme"] == baseline), key=lambda r: r["aggregate_tok_s"])
    curve = sorted(((r["aggregate_tok_s"], speed(r)) for r in runs if r["scheme"] == scheme))
    levels = []
    for b in base:
        a = b["aggregate_tok_s"]
        for (a0, u0), (a1, u1) in zip(curve, curve[1:]):
            if a0 <= a <= a1 and a1 > a0:
                u = u0 + (u1 - u0) * (a - a0) / (a1 - a0)
                levels.append({"concurrency": b["concurrency"], "aggregate_tok_s": a, "baseline_per_user_tok_s": speed(b),
                               "scheme_per_user_tok_s": u, "ratio": u / speed(b)})
                break
    ratio = statistics.median(l["ratio"] for l in levels) if len(levels) >= 3 else None
    return {"scheme": scheme, "baseline": baseline, "per_user_speedup": ratio, "levels": levels}


def matched_summary(runs: list[dict], scheme: str, baseline: str = "ar") -> dict:
    """matched_throughput on the median per-user speed, with the same ratio from the mean and per
    prompt category beside it (a median over mixed categories can sit in one category's cluster)."""
    categories = sorted({c for r in runs if r["scheme"] == scheme for c in r.get("per_user_by_category", {})})
    return {**matched_throughput(runs, scheme, baseline),
            "per_user_mean_speedup": matched_throughput(runs, scheme, baseline, "per_user_mean_tok_s")["per_user_speedup"],
            "per_user_speedup_by_category": {c: matched_throughput(runs, scheme, baseline, category=c)["per_user_speedup"]
                                             for c in categories}}


# --- references and the whole experiment --------------------------------------------------------


def reference_outputs(lm: LoadedModel, cases: list[PromptCase], max_new_tokens: int, progress=None) -> dict[str, list[int]]:
    """Each prompt's single-request greedy `ar` output (`decode.generate`), cached on disk per model."""
    out = {}
    for case in cases:
        messages = [{"role": "user", "content": case.turns[0]}]
        ids = lm.encode(messages)
        key = hashlib.sha256(json.dumps([lm.name, str(lm.dtype), ids, max_new_tokens]).encode()).hexdigest()[:20]
        path = cache_dir() / "loadtest-refs" / f"{key}.json"
        if path.exists():
            out[case.id] = json.loads(path.read_text())
        else:
            out[case.id] = generate(lm, ids, GenerationConfig(mode="ar", max_new_tokens=max_new_tokens)).token_ids
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(out[case.id]))
        if progress:
            progress()
    return out


def single_request_ar(lm: LoadedModel, cases: list[PromptCase], cfg: LoadConfig) -> float:
    """Median tokens/s of the plain one-request loop on `cases` (against batched `ar` at concurrency 1)."""
    speeds = []
    for case in cases:
        result = generate(lm, [{"role": "user", "content": case.turns[0]}],
                          GenerationConfig(mode="ar", max_new_tokens=cfg.max_new_tokens, seed=cfg.seed))
        first = result.trace.steps[0].verify_s
        decode_s = result.trace.timing["wall_s"] - first
        if len(result.token_ids) > 1 and decode_s > 0:
            speeds.append((len(result.token_ids) - 1) / decode_s)
    return statistics.median(speeds)


def serving_costs(lm: LoadedModel, drafter: str = "ngram", progress=None, **grid) -> CostTable:
    """The serving cost table (`grid`: measure_cost_table's rows, tokens_per_row, repeats), with `drafter`'s
    proposal timed where a serving step pays for it apart from the forward: n-gram lookup (a model
    drafter's time is its own batched forward, measured by the run itself)."""
    timed = {drafter: serving_drafter(lm, GenerationConfig(mode="spec", drafter=drafter))} if drafter.startswith("ngram") else {}
    return measure_cost_table(lm, drafters=timed, progress=progress, **grid)


def run_load_test(lm: LoadedModel, cfg: LoadConfig, bar=None, prompts: Path = PROMPTS_FILE,
                  costs: CostTable | None = None) -> dict:
    """The whole experiment (module docstring). `costs`: a cost table measured earlier in this process
    (e.g. a small grid for a short live run); by default the full grid is measured first, in the run's time."""
    cfg.validate()
    started = time.perf_counter()
    cases = classroom(cfg.learners) if cfg.learners else workload(prompts, seed=cfg.seed)
    costs = costs or serving_costs(lm, cfg.drafter)
    cost_s = time.perf_counter() - started
    used = {cases[i % len(cases)].id: cases[i % len(cases)] for i in range(len(cases) if cfg.learners else
                                                                             cfg.requests_per_level * max(cfg.concurrency))}
    references = reference_outputs(lm, list(used.values()), cfg.max_new_tokens)
    category_of = {c.id: c.category for c in cases}
    runs, records, timings = [], {}, {}
    single = None
    for concurrency in cfg.concurrency:
        for scheme in cfg.schemes:
            requests, engine = run_level(lm, scheme, concurrency, cases, cfg, costs,
                                         progress=(lambda _: bar.update(1)) if bar else None)
            identical = sum(r.output_ids == references[r.label] for r in requests)
            config, scheduler = scheme_config(scheme, cfg)
            runs.append({"scheme": scheme, "drafter": cfg.drafter if config.mode == "spec" else None,
                         "scheduler": scheduler, "k": config.k if config.mode == "spec" else 0,
                         "concurrency": concurrency, "arrival_rate": cfg.arrival_rate,
                         **level_metrics(requests, concurrency, engine, category_of),
                         "identical_to_ar": f"{identical}/{len(requests)}"})
            start = min(r.arrival_s for r in requests)
            timings[f"{scheme}@{concurrency}"] = [request_timing(r, start) for r in requests]
            if scheme == "spec-fixed":
                records[str(concurrency)] = [{"prompt_tokens": len(r.prompt_ids),
                                              "steps": [[s.drafted, s.survived, [round(c, 4) for c in s.confidence]]
                                                        for s in r.records]} for r in requests]
            if concurrency == 1 and scheme == "ar" and not cfg.arrival_rate:
                single = single_request_ar(lm, [cases[i % len(cases)] for i in range(len(requests))], cfg)
    result = {
        "environment": environment(lm, costs, cost_s, time.perf_counter() - started),
        "config": {**cfg.__dict__, "concurrency": list(cfg.concurrency), "schemes": list(cfg.schemes)},
        "runs": runs,
        "single_request_ar_tok_s": single,
        "batched_ar_c1_over_single": (next((r["per_user_tok_s"] for r in runs if r["scheme"] == "ar" and r["concurrency"] == 1), 0.0)
                                      / single) if single else None,
        "matched_throughput": matched_summary(runs, "spec-hardware") if "spec-hardware" in cfg.schemes and "ar" in cfg.schemes else None,
        "matched_throughput_all": [matched_summary(runs, s) for s in cfg.schemes if s != "ar" and "ar" in cfg.schemes],
        "matched_throughput_vs": {b: matched_summary(runs, "spec-hardware", b) for b in cfg.schemes
                                  if b.startswith("mtp") and "spec-hardware" in cfg.schemes},
        "cost_table": costs.__dict__,
        "records": {"scheme": "spec-fixed", "k": cfg.k, "drafter": cfg.drafter, "levels": records,
                    "format": "per request: prompt_tokens and, per step, [drafted, drafts matching the target, confidences]"},
        "requests": {"levels": timings, "format": "per run (scheme@concurrency), per request in arrival order: "
                                                  "[prompt id, arrival, first token, last token, tokens], seconds from the run's start"},
    }
    return result


def request_timing(request: Request, start: float) -> list:
    """One request's timeline, compact: enough to recompute per-user speed and TTFT with another rule."""
    times = [t for t, n in request.deliveries if n > 0]
    return [request.label, round(request.arrival_s - start, 4), round(times[0] - start, 4), round(times[-1] - start, 4),
            sum(n for _, n in request.deliveries)]


BULK = ("records", "requests")  # per-request data: one line each in the JSON


def dumps(result: dict) -> str:
    """The results as indented JSON, except the per-request data (BULK), which stays on one line each."""
    head = json.dumps({k: v for k, v in result.items() if k not in BULK}, indent=1)
    bulk = [f' "{k}": ' + json.dumps(result[k], separators=(",", ":")) for k in BULK if k in result]
    return head[:-2] + "".join(",\n" + b for b in bulk) + "\n}" if bulk else head


def environment(lm: LoadedModel, costs: CostTable, cost_s: float, wall_s: float) -> dict:
    return {"model": lm.name, "device": str(lm.device), "dtype": str(lm.dtype).replace("torch.", ""),
            "threads": torch.get_num_threads(), "cpu": platform.processor() or platform.machine(),
            "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "cost_table_s": round(cost_s, 1),
            "wall_s": round(wall_s, 1), "machine": costs.machine}
