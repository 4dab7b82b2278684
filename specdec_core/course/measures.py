"""Named measurements that the lesson prose quotes, read from the shipped result files when a lesson is
rendered, so that the prose cannot say one number while the committed measurement says another.

A lesson writes {measure}`trained.heads.speedup` where it quotes a measured number, and
{machine}`trained` in the same paragraph to say where and when it was measured. The app's lesson
page (`app/course.py`), the quiz texts (`quiz.text`) and `scripts/build_notebooks.py` all call
`render(text, lang)`; a notebook therefore shows the numbers of the files it was built from, and
`build_notebooks.py --check` reports it stale once a file changes. A name that does not resolve —
unknown, its file missing, a key missing — raises MeasureError: never a blank.

    render("heads runs at {measure}`trained.heads.speedup` {machine}`trained`.", "en")
    # -> 'heads runs at 1.02× (AMD EPYC, 2 threads, 2026-12-02; BENCHMARKS.md §7a).'

The baseline guard (`specdec_core.guard`) writes `flags` into every result file it checks: r(k) below
theory.R_FLOOR, a speedup above k + 1. Either says the run's one-token step was slow, which inflates
every wall-clock figure the file holds. A timed measure (`timed`) of a flagged file renders only with
its caveat, {measure}`name|caveat`; plain {measure}`name` raises MeasureError. Counts (τ, s_i) are
never refused: a slow step does not change them. A file with no `flags` field predates the guard
(`guard_state` says "predates"): it renders as before, unchecked; `impossible` recomputes the guard's
checks from such a file's raw data.
"""
from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from ..errors import SpecDecError
from ..guard import ratio_flags, raw_ratios, speedup_flags
from ..metrics import pooled_per_position

ROOT = Path(__file__).resolve().parents[2]
WEIGHTS = "specdec_core/weights/smollm2-135m/manifest.json"
MEASURE = re.compile(r"\{measure\}`([^`|]+)(\|caveat)?`")  # name, then "|caveat" for a flagged figure
MACHINE = re.compile(r"\{machine\}`([^`]+)`")

Key = str | int | dict  # a dict picks the one element of a list whose fields have those values


class MeasureError(SpecDecError):
    """A {measure} or {machine} role names something the shipped files do not hold."""


@dataclass(frozen=True)
class Source:
    """One shipped result file. Its machine is read from the file (`environment`: cpu, threads, date);
    `cpu` and `date` fill in where a file does not record them (from BENCHMARKS.md's machine paragraph),
    and offline evaluations, which time nothing, say so instead of naming a machine."""

    file: str  # relative to the repository root
    section: str  # where BENCHMARKS.md discusses it, e.g. "§7a"
    cpu: str = ""
    date: str = ""
    offline: bool = False
    # the cost profile measured on the same machine the same day, whose raw r(k) `recomputed_flags` reads
    # for a file that carries no flags of its own (relative to the repository root)
    profile: str = ""


@dataclass(frozen=True)
class Measure:
    source: str  # a key of SOURCES
    path: tuple[Key, ...]  # where the number sits in the file's JSON
    fmt: str = "{:.2f}"
    per: tuple[Key, ...] | None = None  # divide by the number at this path: a ratio of two entries
    scale: float = 1.0  # e.g. 100 for a percentage
    derive: Callable[[Any], float] | None = None  # for a number the file holds only in parts (path: what it reads)
    timed: bool | None = None  # a wall-clock figure, which the guard's flags concern (None: `is_timed` infers it)


INTEL_PROFILE = "benchmarks/cost-drafters-cpu-bench.json"
SOURCES: dict[str, Source] = {
    "cost": Source("benchmarks/cost-cpu.json", "§3", cpu="AMD EPYC", date="2026-12-01"),
    "suite": Source("benchmarks/results-suite-cpu.json", "§1"),
    "sweep": Source("benchmarks/sweep-k-cpu.json", "§2"),
    "trained": Source("benchmarks/trained-draft-free-text-cpu.json", "§7a"),
    "trained-k": Source("benchmarks/retrained-sweep-k-cpu.json", "§18c"),  # the shipped weights' k sweep
    "block": Source("benchmarks/block-tau-cpu.json", "§8a"),
    "block-t1": Source("benchmarks/block-tau-t1-cpu.json", "§8a"),
    "calibration": Source("benchmarks/block-calibration-cpu.json", "§8b", offline=True),
    "load-block": Source("benchmarks/load-block-cpu.json", "§8c"),
    "cards": Source(WEIGHTS, "§11", offline=True),  # the shipped (retrained) weights' cards: §11, sitting 4
    "quant": Source("benchmarks/quant-kernels-cpu.json", "§9b", date="2026-12-03"),
    "quant-suite-once": Source("benchmarks/quant-suite-cpu.json", "§9c"),  # one run each; the only one with the int8 draft
    "gap": Source("benchmarks/acceptance-gap-cpu.json", "§10", offline=True),  # offline vs the loop, on suite prompts
    "curve": Source("benchmarks/scaling-curve-cpu.json", "§14", offline=True),  # train-curve: s_1 against data
    # §16, the frozen retrained drafters: the suite with each kind at its k, the fresh set, eagle's trees
    # (measured on the Intel Xeon whose profile §16a committed as cost-drafters-cpu-bench.json)
    "retrained": Source("benchmarks/retrained-suite-cpu.json", "§16", profile=INTEL_PROFILE),
    "retrained-fresh": Source("benchmarks/retrained-fresh-cpu.json", "§16", profile=INTEL_PROFILE),
    "trees-retrained": Source("benchmarks/trees-retrained-cpu.json", "§16", profile=INTEL_PROFILE),
    "retrained-block": Source("benchmarks/retrained-block-tau-cpu.json", "§16d", profile=INTEL_PROFILE),
    # §17b, §18: the baseline made honest. Raw r(k) under the old hard-coded kernel choice and under this
    # machine's measured kernel table (9 repeats each), the Xeon profile where the old choice failed, and
    # the suite re-measured against the fast step with ar@kernels=legacy, stock transformers and llama.cpp
    "xeon-profile": Source(INTEL_PROFILE, "§16a", cpu="Intel Xeon", date="2026-12-06"),
    "profile-legacy": Source("benchmarks/cost-baseline-legacy-cpu.json", "§17b", cpu="AMD EPYC", date="2026-12-07"),
    "profile-measured": Source("benchmarks/cost-baseline-measured-cpu.json", "§17b", cpu="AMD EPYC", date="2026-12-07"),
    "baseline": Source("benchmarks/baseline-suite-cpu.json", "§18"),
}


def _forward(tokens: int, batch: int = 1) -> tuple[Key, ...]:
    return ("forward_s", {"tokens": tokens, "batch": batch}, "seconds")


def _seconds(profile: dict, tokens: int, batch: int) -> float:
    """A forward's time for `tokens` new tokens, linear between the profile's measured sizes, as
    costmodel.CostModel.seconds reads it (the profile does not time every size)."""
    rows = sorted((r["tokens"], r["seconds"]) for r in profile["forward_s"] if r["batch"] == batch)
    for (t0, s0), (t1, s1) in zip(rows, rows[1:]):
        if t0 <= tokens <= t1:
            return s0 + (s1 - s0) * (tokens - t0) / (t1 - t0)
    raise MeasureError(f"the cost profile has no forwards around {tokens} tokens at batch {batch}")


def _verify_ratio(tokens: int, batch: int = 1) -> Measure:
    """r_b(n): a forward over n new tokens per sequence over a one-token forward, at batch b."""
    return Measure("cost", ("forward_s",), "{:.2f}×",
                   derive=lambda d: _seconds(d, tokens, batch) / _seconds(d, 1, batch))


def _mode(mode: str, field: str, *rest: Key) -> tuple[Key, ...]:
    return ("summary", mode, field, *rest)


def _tau(run: dict, mode: str) -> float:
    return run["summary"][mode]["mean_accepted_length"]


def _tau_gain(k: int) -> Measure:
    """What the block drafter's Markov head adds to τ: τ(block) / τ(block-parallel) − 1 at draft length k."""
    return Measure("block", _mode(f"spec:block@k={k},t=0", "mean_accepted_length"), "{:+.1f} %", scale=100,
                   derive=lambda d: _tau(d, f"spec:block@k={k},t=0") / _tau(d, f"spec:block-parallel@k={k},t=0") - 1)


def _cost() -> dict[str, Measure]:
    """§3, the cost profile: forwards over n new tokens, the draft steps it timed, the copy bandwidth."""
    m = {
        "cost.forward_1_ms": Measure("cost", _forward(1), "{:.0f} ms", scale=1000),
        "cost.c.ngram": Measure("cost", ("draft_step_s", "ngram"), "{:.3f}", per=_forward(1)),
        "cost.c.early_exit": Measure("cost", ("draft_step_s", "early-exit"), "{:.2f}", per=_forward(1)),
        "cost.draft_ms.early_exit": Measure("cost", ("draft_step_s", "early-exit"), "{:.1f} ms", scale=1000),
        "cost.r8.5": _verify_ratio(5, batch=8),
        # a one-token forward's weight traffic (all weights once) over the measured copy bandwidth
        "cost.roofline_share": Measure("cost", ("weight_bytes",), "{:.0f} %", scale=100, derive=lambda d: (
            d["weight_bytes"] / _seconds(d, 1, 1) / (d["bandwidth_gb_s"] * 1e9))),
    }
    for n in (2, 5, 16):  # r(n): a forward over n new tokens over a one-token forward
        m[f"cost.r.{n}"] = _verify_ratio(n)
    return m


def _suite_sweep_trained() -> dict[str, Measure]:
    """§1 the whole suite, §2 the k sweep, §7a the template-trained drafters, §18c the shipped ones' k sweep."""
    m = {
        "suite.copy.speedup": Measure("suite", ("by_category", "copy", "spec:ngram", "speedup_vs_ar"), "{:.2f}×"),
        "suite.early_exit.acceptance": Measure("suite", _mode("spec:early-exit", "acceptance_rate")),
        "trained.eagle.s1": Measure("trained", _mode("spec:eagle", "acceptance_per_pos", 0)),
    }
    for name, mode, category in (("sweep.sim.k4", "spec:sim@k=4,t=0", None), ("sweep.sim.k8", "spec:sim@k=8,t=0", None),
                                 ("sweep.sim.k16", "spec:sim@k=16,t=0", None),  # §2: the k sweep on the quick suite
                                 ("sweep.ngram.copy.k16", "spec:ngram@k=16,t=0", "copy"),
                                 ("sweep.ngram-fixed.copy.k4", "spec:ngram-fixed@k=4,t=0", "copy"),
                                 ("sweep.ngram-fixed.copy.k16", "spec:ngram-fixed@k=16,t=0", "copy")):
        path = ("by_category", category, mode, "speedup_vs_ar") if category else _mode(mode, "speedup_vs_ar")
        m[name] = Measure("sweep", path, "{:.2f}×")
    for drafter in ("draft", "heads", "eagle"):  # §7a: 18 free-text prompts, k = 4, two repeats
        m[f"trained.{drafter}.speedup"] = Measure("trained", _mode(f"spec:{drafter}", "speedup_vs_ar"), "{:.2f}×")
        m[f"trained.{drafter}.tau"] = Measure("trained", _mode(f"spec:{drafter}", "mean_accepted_length"))
        for k in (1, 2, 3, 4):  # §18c: the shipped weights' k sweep on the quick suite
            m[f"trained-k.{drafter}.k{k}"] = Measure("trained-k", _mode(f"spec:{drafter}@k={k},t=0", "speedup_vs_ar"),
                                                     "{:.2f}×")
    return m


def _block() -> dict[str, Measure]:
    """§8: the block drafters' τ and speed (8a), their calibration (8b) and the load test of scheme A (8c)."""
    m = {  # §8a: what the block drafter's Markov head adds to τ
        "block.gain.k5": _tau_gain(5),
        "block.gain.k7": _tau_gain(7),
        "block-t1.gain": Measure("block-t1", _mode("spec:block", "mean_accepted_length"), "{:+.1f} %", scale=100,
                                 derive=lambda d: _tau(d, "spec:block") / _tau(d, "spec:block-parallel") - 1),
        # §8b: calibration of the block drafter's confidence head (offline, held-out sequences)
        "calibration.p1.t": Measure("calibration", ("greedy", "positions", {"position": 1}, "temperature"), "{:.2f}"),
    }
    for drafter in ("block", "block-parallel", "eagle"):  # §8a: the whole suite, greedy, k = 7
        mode = f"spec:{drafter}@k=7,t=0"
        m[f"block.{drafter}.tau7"] = Measure("block", _mode(mode, "mean_accepted_length"))
        if drafter != "block-parallel":
            m[f"block.{drafter}.speedup7"] = Measure("block", _mode(mode, "speedup_vs_ar"), "{:.2f}×")
        if drafter != "eagle":
            m[f"block.{drafter}.s1"] = Measure("block", _mode(mode, "acceptance_per_pos", 0), "{:.3f}")
            m[f"block.{drafter}.s2"] = Measure("block", _mode(mode, "acceptance_per_pos", 1), "{:.3f}")
            m[f"block.{drafter}.a2"] = Measure("block", _mode(mode, "acceptance_per_pos", 1),
                                               per=_mode(mode, "acceptance_per_pos", 0))
    for drafter in ("block", "block-parallel"):  # §8a at temperature 1.0, and offline on held-out template text
        m[f"block-t1.{drafter}.tau"] = Measure("block-t1", _mode(f"spec:{drafter}", "mean_accepted_length"))
        m[f"cards.{drafter}.tau7"] = Measure("cards", ("files", f"{drafter}.safetensors", "card", "offline_heldout",
                                                       "greedy", "tau", "7"))
    for regime, j, when in (("greedy", 1, "before"), ("greedy", 1, "after"), ("greedy", 2, "before"),
                            ("greedy", 2, "after"), ("greedy", 3, "before"), ("greedy", 3, "after"),
                            ("sampled", 1, "after")):  # §8b: the ECE per position
        m[f"calibration.{regime}.p{j}.{when}"] = Measure(
            "calibration", (regime, "positions", {"position": j}, f"ece_{when}"), "{:.1f} %", scale=100)
    for c in (1, 4):  # §8c: plain decoding's per-user speed as requests join
        m[f"load-block.ar.user.c{c}"] = Measure("load-block", ("runs", {"scheme": "ar", "concurrency": c},
                                                               "per_user_tok_s"), "{:.1f}", timed=True)
    return m


def _quant() -> dict[str, Measure]:
    """§9: the quantised copies: kernels (9b), the suite once (9c) and its medians of 3 repeats (9e)."""
    m: dict[str, Measure] = {}
    for weights in ("fp32", "int8", "int4"):  # §9b: bytes per token, AR speed, the time outside matmuls
        m[f"quant.{weights}.mb"] = Measure("quant", ("models", weights, "bytes"), "{:.0f} MB", scale=1e-6)
        m[f"quant.{weights}.outside"] = Measure("quant", ("models", weights, "outside_matmul_share"), "{:.0f} %", scale=100,
                                                timed=True)
        m[f"quant.{weights}.roofline_share"] = Measure("quant", ("models", weights, "ar_tokens_per_s"), "{:.0f} %",
                                                       per=("models", weights, "roofline_tokens_per_s"), scale=100,
                                                       timed=True)
        if weights != "fp32":
            m[f"quant.{weights}.ar"] = Measure("quant", ("models", weights, "ar_tokens_per_s"), "{:.2f}×",
                                               per=("models", "fp32", "ar_tokens_per_s"))
    m["quant.outside_ms"] = Measure("quant", ("models", "int4", "outside_matmul_ms"), "{:.0f} ms")
    m["quant.int4.step"] = Measure("quant", ("models", "int4", "forward_ms", "1"), "{:.0f} %", scale=100,
                                   per=("models", "fp32", "forward_ms", "1"), timed=True)  # a one-token int4 step / fp32's
    m["quant-suite-once.quant8.speedup"] = Measure("quant-suite-once", _mode("spec:quant@bits=8", "speedup_vs_ar"), "{:.2f}×")
    return m


def _cards_gap() -> dict[str, Measure]:
    """The model cards (held out, offline) and §10, the gap between offline acceptance and the loop's."""
    eagle_card = ("files", "eagle.safetensors", "card", "offline_heldout", "greedy")  # the model card, held out
    chat = ("kinds", "eagle", "categories", "chat")  # §10: eagle on the suite's chat answers, offline and in the loop
    m = {
        "cards.eagle.s1": Measure("cards", (*eagle_card, "survival", 0)),
        "cards.eagle.a4": Measure("cards", (*eagle_card, "conditional", 3)),
        "gap.eagle.chat.offline": Measure("gap", (*chat, "offline", "walked_survival", 0), "{:.3f}"),
        "gap.eagle.chat.loop": Measure("gap", (*chat, "loop", "survival", 0), "{:.3f}"),
        "gap.heads.qa.coverage": Measure("gap", ("kinds", "heads", "categories", "qa", "vocab_coverage"), "{:.0f} %",
                                         scale=100),
    }
    for n in ("4096", "8192"):  # the reduced vocabulary's coverage of held-out answer tokens
        m[f"cards.coverage.{n}"] = Measure("cards", ("files", "heads.safetensors", "card", "vocab", "coverage", n),
                                           "{:.1f} %", scale=100)
    return m


def _curve() -> dict[str, Measure]:
    """§14, the scaling curve: the same steps at every point; the lessons name three of them (the two
    100k points compare the mix)."""
    named_points = {"templates": "templates-100000", "mixed": "all-100000", "mixed300k": "all-300000"}

    def point_s1(point: dict) -> float:  # s_1 averaged over the curve's categories (chat, qa, story)
        return sum(row["s1"] for row in point["categories"].values()) / len(point["categories"])

    def grown(data: dict) -> list[dict]:  # the all-source points: prefixes of one corpus, smallest first
        return sorted((p for p in data["points"].values() if p["sources"] == "all"), key=lambda p: p["response_tokens"])

    def per_tenfold(data: dict) -> float:  # least-squares slope of s_1 on log10(tokens) over the all-source points
        points = grown(data)
        x = [math.log10(p["response_tokens"]) for p in points]
        y = [point_s1(p) for p in points]
        mx, my = sum(x) / len(x), sum(y) / len(y)
        return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)

    m: dict[str, Measure] = {}
    for name, point in named_points.items():
        m[f"curve.{name}.s1"] = Measure("curve", ("points", point, "categories"), "{:.3f}",
                                        derive=lambda d, point=point: point_s1(d["points"][point]))
    m["curve.mix_gain"] = Measure("curve", ("points",), "{:.2f}×", derive=lambda d: (
        point_s1(d["points"][named_points["mixed"]]) / point_s1(d["points"][named_points["templates"]])))
    m["curve.largest.s1"] = Measure("curve", ("points",), "{:.3f}", derive=lambda d: point_s1(grown(d)[-1]))
    m["curve.largest.tokens"] = Measure("curve", ("points",), "{:,.0f}", derive=lambda d: grown(d)[-1]["response_tokens"])
    m["curve.per_tenfold"] = Measure("curve", ("points",), "{:+.3f}", derive=per_tenfold)
    return m


def _raw_ratio(source: str, tokens: int) -> Measure:
    """Raw r(tokens - 1) = t(tokens) / t(1) of a cost profile: the measured medians, as the guard reads them.
    Not `timed` for the guard: under a flagged table this ratio is the flag's evidence, not a figure the
    slow step inflated (so is a raw forward time, `_raw_forward`)."""
    return Measure(source, ("forward_s",), "{:.2f}", derive=lambda d: raw_ratios(d["forward_s"])[tokens - 1],
                   timed=False)


def _raw_forward(source: str, tokens: int) -> Measure:
    """A cost profile's median forward time over `tokens` new tokens, quoted as the diagnosis (see _raw_ratio)."""
    return Measure(source, _forward(tokens), "{:.1f} ms", scale=1000, timed=False)


def _faster_than(mode: str, than: str) -> Callable[[Any], float]:
    """How many times faster `mode` ran than `than` on the suite: the geometric mean over prompts of the
    ratio of their median walls per token (the bench's speedup_vs_ar, with another baseline)."""
    def derive(run: dict) -> float:
        walls: dict[tuple[str, str], list[float]] = {}
        for r in run["results"]:
            walls.setdefault((r["mode"], r["prompt_id"]), []).append(r["wall_s"] / max(1, r["new_tokens"]))
        prompts = [p for m, p in walls if m == mode]
        return math.exp(sum(math.log(statistics.median(walls[(than, p)]) / statistics.median(walls[(mode, p)]))
                            for p in prompts) / len(prompts))
    return derive


def _baseline() -> dict[str, Measure]:
    """§17b and §18: r(k) under the old and the measured kernel table, the Xeon where the old one failed,
    and the suite against the fast step, the old step, stock transformers and llama.cpp."""
    m = {
        "honest.xeon.forward_1_ms": _raw_forward("xeon-profile", 1),
        "honest.xeon.forward_3_ms": _raw_forward("xeon-profile", 3),
        "honest.xeon.r.2": _raw_ratio("xeon-profile", 3),
        "baseline.ar.tok_s": Measure("baseline", _mode("ar", "tokens_per_s"), "{:.1f}", timed=True),
        "baseline.llamacpp.tok_s": Measure("baseline", _mode("llamacpp:ar", "tokens_per_s"), "{:.1f}", timed=True),
        "baseline.llamacpp.ar": Measure("baseline", _mode("llamacpp:ar", "speedup_vs_ar"), "{:.2f}×"),
        "baseline.int4.vs_llamacpp": Measure("baseline", ("results",), "{:.2f}×",
                                             derive=_faster_than("ar@weights=int4", "llamacpp:ar")),
        "baseline.ar.legacy": Measure("baseline", ("results",), "{:.2f}×", derive=_faster_than("ar", "ar@kernels=legacy")),
        "baseline.ar.hf": Measure("baseline", ("results",), "{:.2f}×", derive=_faster_than("ar", "hf:ar")),
        "baseline.eagle.speedup": Measure("baseline", ("summary",), "{:.2f}×",
                                          derive=lambda d: d["summary"][_at_k(d, "eagle")]["speedup_vs_ar"]),
        "baseline.eagle.vs_legacy": Measure("baseline", ("results",), "{:.2f}×",
                                            derive=lambda d: _faster_than(_at_k(d, "eagle"), "ar@kernels=legacy")(d)),
    }
    for table in ("legacy", "measured"):
        m[f"honest.{table}.forward_1_ms"] = _raw_forward(f"profile-{table}", 1)
        m[f"honest.{table}.r.2"] = _raw_ratio(f"profile-{table}", 3)
    # the quantised copies, as the model and as the drafter (k = 4), and mix
    for name, mode in (("int4", "ar@weights=int4"), ("int8", "ar@weights=int8"), ("quant", "spec:quant"),
                       ("mix", "spec:mix"), ("ngram", "spec:ngram")):
        m[f"baseline.{name}.speedup"] = Measure("baseline", _mode(mode, "speedup_vs_ar"), "{:.2f}×")
    for name, mode in (("int4", "ar@weights=int4"), ("int8", "ar@weights=int8")):
        m[f"baseline.{name}.agreement"] = Measure("baseline", _mode(mode, "agreement_with_ar"), "{:.0f} %", scale=100)
    for category in FREE_TEXT:
        m[f"baseline.quant.{category}"] = Measure("baseline", ("by_category", category, "spec:quant", "speedup_vs_ar"),
                                                  "{:.2f}×")
    m["baseline.quant.s1"] = Measure("baseline", _mode("spec:quant", "acceptance_per_pos", 0), "{:.3f}")
    m["baseline.quant.tau"] = Measure("baseline", _mode("spec:quant", "mean_accepted_length"))
    m["baseline.quant.mb"] = Measure("baseline", _mode("spec:quant", "drafter_bytes"), "{:.0f} MB", scale=1e-6)
    # the trained drafters, each at the k its held-out τ(k) and this machine's costs chose (§18a)
    for drafter in ("heads", "draft", "block", "block-parallel"):
        m[f"baseline.{drafter}.speedup"] = Measure("baseline", ("summary",), "{:.2f}×",
                                                   derive=lambda d, drafter=drafter: d["summary"][_at_k(d, drafter)]["speedup_vs_ar"])
    m["baseline.eagle.k"] = Measure("baseline", ("summary",), "{:.0f}", derive=lambda d: d["summary"][_at_k(d, "eagle")]["draft_k"])
    for category in FREE_TEXT:
        m[f"baseline.eagle.{category}"] = Measure("baseline", ("by_category", category), "{:.2f}×", derive=lambda d, c=category: (
            d["by_category"][c][_at_k(d, "eagle")]["speedup_vs_ar"]))
    m["baseline.eagle.free.tau"] = Measure("baseline", ("by_category",), derive=lambda d: sum(
        d["by_category"][c][_at_k(d, "eagle")]["mean_accepted_length"] for c in FREE_TEXT) / len(FREE_TEXT))
    m["baseline.eagle.free.s1"] = Measure("baseline", ("results",), "{:.2f}", derive=lambda d: _free_s1(d, "eagle"))
    m["baseline.eagle.s1"] = Measure("baseline", ("summary",), "{:.2f}",
                                     derive=lambda d: d["summary"][_at_k(d, "eagle")]["acceptance_per_pos"][0])
    # eagle's dynamic tree at its k beside its chain, over the whole suite
    m["baseline.eagle.tau"] = Measure("baseline", ("summary",),
                                      derive=lambda d: d["summary"][_at_k(d, "eagle")]["mean_accepted_length"])

    def tree(d: dict) -> dict:
        return d["summary"][_at_k(d, "eagle") + "@tree=dynamic"]

    m["baseline.eagle.tree.speedup"] = Measure("baseline", ("summary",), "{:.2f}×", derive=lambda d: tree(d)["speedup_vs_ar"])
    m["baseline.eagle.tree.tau"] = Measure("baseline", ("summary",), derive=lambda d: tree(d)["mean_accepted_length"])
    # the same eagle on the Intel Xeon of §16b, whose one-token step was slow (the lesson's "before")
    m["honest.xeon.eagle.speedup"] = Measure("retrained", ("summary",), "{:.2f}×",
                                             derive=lambda d: d["summary"][_at_k(d, "eagle")]["speedup_vs_ar"])
    return m


def _family() -> dict[str, Measure]:
    """The registry: every name a lesson or quiz text quotes (a test checks that each one is quoted)."""
    groups = (_cost(), _suite_sweep_trained(), _block(), _quant(), _cards_gap(), _curve(), _retrained(), _baseline())
    m: dict[str, Measure] = {}
    for group in groups:
        clash = set(m) & set(group)
        if clash:
            raise MeasureError(f"registered twice: {sorted(clash)}")
        m.update(group)
    return m


FREE_TEXT = ("chat", "qa", "story")


def _at_k(run: dict, drafter: str) -> str:
    """The one mode of a run that measures `drafter` at the k chosen for it, e.g. "spec:eagle@k=3"."""
    modes = [mode for mode in run["summary"] if mode.startswith(f"spec:{drafter}@k=") and "@tree" not in mode]
    if len(modes) != 1:
        raise MeasureError(f"{len(modes)} modes of {drafter!r} at a chosen k (one needed): {modes}")
    return modes[0]


def _free_s1(run: dict, drafter: str) -> float:
    """First-draft acceptance pooled over the free-text categories: accepted first drafts / verify steps."""
    rows = [r for r in run["results"] if r["mode"] == _at_k(run, drafter) and r["category"] in FREE_TEXT]
    return pooled_per_position([r["offered_per_pos"] for r in rows], [r["accepted_per_pos"] for r in rows])[0]


def _retrained() -> dict[str, Measure]:
    """§16 (the Intel Xeon, legacy kernels): the fresh set, eagle's trees and the block drafter's Markov gain,
    which only those runs hold (the suite itself is re-measured in §18, `_baseline`)."""
    m: dict[str, Measure] = {}
    summary = ("summary",)  # what every derived measure below reads

    def at_k(drafter: str, field: str) -> Callable[[Any], float]:
        return lambda d: d["summary"][_at_k(d, drafter)][field]

    m["retrained-fresh.eagle.speedup"] = Measure("retrained-fresh", summary, "{:.2f}×", derive=at_k("eagle", "speedup_vs_ar"))
    m["retrained-fresh.eagle.tau"] = Measure("retrained-fresh", summary, derive=at_k("eagle", "mean_accepted_length"))
    m["retrained-fresh.eagle.s1"] = Measure("retrained-fresh", ("results",), "{:.2f}", derive=lambda d: _free_s1(d, "eagle"))
    # eagle's chain at k = 4 against its dynamic trees of depth 4 (the suite's chat, qa and story prompts)
    chain, dynamic, dynamic8 = "spec:eagle@k=4", "spec:eagle@k=4@tree=dynamic", "spec:eagle@k=4@tree=dynamic@nodes=8"
    for name, mode in (("chain", chain), ("dynamic", dynamic), ("dynamic8", dynamic8)):
        m[f"trees-retrained.{name}.speedup"] = Measure("trees-retrained", _mode(mode, "speedup_vs_ar"), "{:.2f}×")
    for name, mode in (("chain", chain), ("dynamic", dynamic)):
        m[f"trees-retrained.{name}.tau"] = Measure("trees-retrained", _mode(mode, "mean_accepted_length"))
    # §16d: what the retrained block drafter's Markov head adds to τ at k = 7 (the whole suite, greedy)
    m["retrained-block.gain"] = Measure("retrained-block", _mode("spec:block", "mean_accepted_length"), "{:+.1f} %",
                                        scale=100, derive=lambda d: _tau(d, "spec:block") / _tau(d, "spec:block-parallel") - 1)
    return m


MEASURES: dict[str, Measure] = _family()

_NOTE = {"en": "({where}; BENCHMARKS.md {section})", "zh": "（{where}；BENCHMARKS.md {section}）"}
_OFFLINE = {"en": "offline evaluation, the same on any machine", "zh": "离线评测，与机器无关"}
_WHERE = {"en": "{cpu}, {threads} threads, {date}", "zh": "{cpu}，{threads} 线程，{date}"}


@lru_cache(maxsize=32)
def _read(path: Path, mtime_ns: int, size: int) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def load(source: str) -> Any:
    """The parsed JSON of one source (re-read when the file changes)."""
    if source not in SOURCES:
        raise MeasureError(f"unknown measurement source {source!r}: choose one of {', '.join(SOURCES)}")
    path = ROOT / SOURCES[source].file
    if not path.is_file():
        raise MeasureError(f"{SOURCES[source].file} (source {source!r}) is missing")
    stat = path.stat()
    return _read(path, stat.st_mtime_ns, stat.st_size)


def _walk(data: Any, path: tuple[Key, ...], where: str) -> Any:
    for key in path:
        if isinstance(key, dict):
            hits = [row for row in data if isinstance(row, dict) and all(row.get(f) == v for f, v in key.items())] \
                if isinstance(data, list) else []
            if len(hits) != 1:
                raise MeasureError(f"{where}: {len(hits)} entries match {key} (one needed)")
            data = hits[0]
        else:
            try:
                data = data[key]
            except (KeyError, IndexError, TypeError):
                raise MeasureError(f"{where}: no key {key!r}") from None
    return data


def value(name: str) -> float:
    """The number behind a measure name (unformatted)."""
    if name not in MEASURES:
        raise MeasureError(f"unknown measure {name!r}: register it in specdec_core/course/measures.py")
    m = MEASURES[name]
    data, where = load(m.source), f"{SOURCES[m.source].file} for {name!r}"
    number = _walk(data, m.path, where)
    if m.derive is not None:
        number = m.derive(data)
    if m.per is not None:
        number = number / _walk(data, m.per, where)
    if not isinstance(number, (int, float)) or isinstance(number, bool):
        raise MeasureError(f"{where}: {m.path} holds {number!r}, not a number")
    return number * m.scale


def is_timed(name: str) -> bool:
    """Whether a measure is a wall-clock figure (a speedup, a time, a cost ratio), which a slow one-token
    step distorts; counts (τ, s_i, acceptance, bytes) are not. Explicit on the Measure, else inferred:
    anything of the cost profile, and any × or ms figure of a run that timed something."""
    m = MEASURES[name]
    if m.timed is not None:
        return m.timed
    if SOURCES[m.source].offline:
        return False
    return m.source == "cost" or m.fmt.endswith(("×", " ms"))


def guard_state(source: str) -> str:
    """"flagged" (the file's `flags` list is not empty), "clean" (empty) or "predates" (no `flags` field:
    written before the guard existed, so nobody checked it; rendered as unflagged, see `impossible`)."""
    data = load(source)
    if not isinstance(data, dict) or "flags" not in data:
        return "predates"
    return "flagged" if data["flags"] else "clean"


def flags(name: str) -> list[str]:
    """The guard's flags that concern a measure: its file's, if the measure is timed; [] otherwise."""
    if name not in MEASURES:
        raise MeasureError(f"unknown measure {name!r}: register it in specdec_core/course/measures.py")
    if not is_timed(name) or guard_state(MEASURES[name].source) != "flagged":
        return []
    return list(load(MEASURES[name].source)["flags"])


def recomputed_flags(source: str) -> list[str]:
    """The guard's checks redone from a file's raw data, for files that predate the guard's `flags`: the
    raw r(k) of a cost profile (the file's own, its run's environment's, or its Source.profile: the same
    machine's profile of the same day), and every mode's speedup, overall and per
    category, against k + 1 (k from the summary's draft_k, else the mode's @k=, else the run's one k).
    What the guard would have written; `render` does not use it (the files are re-measured, not edited)."""
    data = load(source)
    if not isinstance(data, dict):
        return []
    found = []
    if SOURCES[source].profile:
        profile = json.loads((ROOT / SOURCES[source].profile).read_text(encoding="utf-8"))
        found += ratio_flags(raw_ratios(profile["forward_s"]))
    if "forward_s" in data:
        found += ratio_flags(raw_ratios(data["forward_s"]))
    raw = (data.get("environment") or {}).get("verify_ratios_raw")
    if raw:
        found += ratio_flags({int(k): r for k, r in raw.items()})
    ks = (data.get("config") or {}).get("k")
    only_k = ks[0] if isinstance(ks, list) and len(ks) == 1 else ks if isinstance(ks, int) else None
    for mode, row in (data.get("summary") or {}).items():
        if not isinstance(row, dict) or not isinstance(row.get("speedup_vs_ar"), (int, float)) or not mode.startswith("spec"):
            continue
        at = re.search(r"@k=(\d+)", mode)
        k = row.get("draft_k") or (int(at.group(1)) if at else only_k)
        per_category = {c: modes[mode]["speedup_vs_ar"] for c, modes in (data.get("by_category") or {}).items()
                        if mode in modes and isinstance(modes[mode].get("speedup_vs_ar"), (int, float))}
        found += speedup_flags(mode, k, per_category, row["speedup_vs_ar"])
    return found


_CAVEAT = {
    "en": " (flagged: this run's one-token step was slower than a multi-token forward, so the figure is inflated)",
    "zh": "（已被标记：这次运行的单 token 步比多 token 前向还慢，这个数字被夸大了）",
}


def formatted(name: str, caveat: str | None = None) -> str:
    """The measure as the prose shows it. A timed figure that the guard flagged needs its caveat: pass the
    language (`caveat="en"`), and it is appended; without it MeasureError. An unflagged figure ignores it."""
    number = value(name)  # raises for an unknown name first
    text = MEASURES[name].fmt.format(number)
    found = flags(name)
    if not found:
        return text
    if caveat is None:
        raise MeasureError(f"{name!r} ({SOURCES[MEASURES[name].source].file}) is flagged by the baseline guard: "
                           f"{found[0]}; quote it as {{measure}}`{name}|caveat` or quote another run")
    return text + _CAVEAT[caveat]


def machine_note(source: str, lang: str) -> str:
    """Where a source was measured, e.g. "(AMD EPYC, 2 threads, 2026-12-02; BENCHMARKS.md §7a)"."""
    data, info = load(source), SOURCES[source]
    if info.offline:
        where = _OFFLINE[lang]
    else:
        env = data.get("environment", data)  # the cost profile keeps its threads at the top level
        fields = {"cpu": info.cpu or env.get("cpu"), "threads": env.get("threads"), "date": info.date or env.get("date")}
        missing = [f for f, v in fields.items() if not v]
        if missing:
            raise MeasureError(f"{info.file} records no {', '.join(missing)}: set it on its Source")
        where = _WHERE[lang].format(**{**fields, "date": str(fields["date"])[:10]})
    return _NOTE[lang].format(where=where, section=info.section)


def render(text: str, lang: str) -> str:
    """Replace every {measure} and {machine} role by its value and note; MeasureError if one does not resolve."""
    if lang not in _NOTE:
        raise MeasureError(f"lang must be one of {tuple(_NOTE)}, got {lang!r}")
    text = MEASURE.sub(lambda match: formatted(match.group(1), lang if match.group(2) else None), text)
    return MACHINE.sub(lambda match: machine_note(match.group(1), lang), text)


def names_in(text: str) -> list[str]:
    """The measure names a text quotes, in order."""
    return [match.group(1) for match in MEASURE.finditer(text)]


def sources_in(text: str) -> list[str]:
    """The sources a text names with {machine}."""
    return MACHINE.findall(text)
