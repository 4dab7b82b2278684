"""The registry of runnable experiments shared by the quiz ("predict, then run"), the app and the
notebooks. Each experiment measures one number on the real model; results are cached on disk so a
notebook, the quiz and the app do not pay for the same measurement twice.
"""
from __future__ import annotations

import functools
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
import transformers

from ..costmodel import CostModel, DraftCosts, profile_costs
from ..errors import SpecDecError
from ..decode import GenerationConfig
from ..drafters import OPTION_NAMES
from ..drafters.weights import WEIGHTS_DIR, shipped, tree_table_path
from ..metrics import conditional_acceptance, pooled_per_position, positional_matches
from ..kernels import kernel_table
from ..models import LoadedModel, cache_dir, load_model, sha256_file
from ..generation import generate
from ..suite import PROMPTS_DIR

CACHE_VERSION = 7  # bump when an experiment's definition or the engine's kernels change

COPY_PROMPT = ("Repeat the following paragraph exactly, word for word:\n\n"
               "The library opens at nine in the morning and closes at six in the evening. Visitors may borrow "
               "up to five books at a time, and each book can be kept for three weeks. Please return books to the "
               "front desk and ask the staff if you need help finding anything.")
STORY_PROMPT = "Write a short story about a lighthouse keeper who finds a mysterious bottle on the beach."
CHAT_PROMPTS = ("What are three tips for staying focused while studying?",
                "Explain why the sky is blue in simple words.")
PROMPTS_FILE = PROMPTS_DIR / "suite.jsonl"
SUITE = (PROMPTS_FILE,)  # what an experiment on the suite's prompts reads
# A cost-aware n-gram sizes its drafts by the verify ratios it weighs. Measured at run time they move with
# the machine's noise (a proposal worth 3 drafts in one run is worth 4 in the next), and every count of
# an n-gram experiment would move with them. Count experiments weigh the committed profile of this CPU
# (BENCHMARKS §15) instead: the same drafts in every run; timed ones weigh what they measure.
COST_PROFILE = Path(__file__).resolve().parents[2] / "benchmarks" / "cost-drafters-cpu.json"
COUNTED = (*SUITE, COST_PROFILE)  # what a count experiment with a cost-aware drafter reads


@functools.lru_cache(maxsize=2)
def _profile_costs(model: str) -> DraftCosts | None:
    """The committed profile's costs for `model` (None for another model: those measure their own)."""
    profile = CostModel.load(COST_PROFILE)
    return profile_costs(profile) if profile.model == model else None


def suite_prompts(category: str, n: int) -> tuple[str, ...]:
    """The first n prompts of one category of the 64-prompt suite (file order, so always the same)."""
    rows = [json.loads(line) for line in PROMPTS_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
    return tuple(r["prompt"] for r in rows if r["category"] == category)[:n]


# sim's τ scatters by ~0.2 on one 64-token run; eight prompts bring the spread of a few runs well under
# the quiz's ±0.25.
SIM_PROMPTS = (*CHAT_PROMPTS, *suite_prompts("chat", 3), *suite_prompts("qa", 3))


@dataclass
class ExperimentResult:
    name: str
    value: float
    unit: str
    details: dict = field(default_factory=dict)
    seconds: float = 0.0
    cached: bool = False


@dataclass
class Experiment:
    name: str
    title: dict[str, str]  # {"zh": ..., "en": ...}
    unit: str
    run: Callable[[LoadedModel], tuple[float, dict]]
    weights: bool = False  # reads the shipped drafter weights: their checksums join the cache fingerprint
    reads: tuple[Path, ...] = ()  # data files it reads (the prompt suite): their checksums join it too

    def files(self, model: str = "smollm2-135m") -> tuple[Path, ...]:
        """Every shipped file its result depends on (a lesson cell that runs it is stale when one changes)."""
        return (*self.reads, *((WEIGHTS_DIR / model / "manifest.json",) if self.weights else ()))


def _spec_config(**config) -> GenerationConfig:
    """A spec config from flat keywords (an experiment's recorded settings): drafter knobs go to drafter_options."""
    options = {name: config.pop(name) for name in OPTION_NAMES if name in config}
    return GenerationConfig(mode="spec", drafter_options=options, **config)


def _tau(lm: LoadedModel, prompts, **config) -> tuple[float, dict]:
    """Mean accepted length over prompts: all decode tokens / all decode forwards."""
    r = _pooled_spec(lm, prompts, **config)
    return r["tau"], {"prompts": len(prompts), "target_forwards": r["forwards"], **config}


def _speedup(lm: LoadedModel, prompt: str, repeats: int = 3, **config) -> tuple[float, dict]:
    """Median AR wall time / median spec wall time, runs interleaved (A B A B ...) after a warm-up."""
    ar_cfg = GenerationConfig(mode="ar", max_new_tokens=64)
    spec_cfg = _spec_config(max_new_tokens=64, **config)
    generate(lm, prompt, ar_cfg)  # warm-up
    ar_t, spec_t, identical = [], [], True
    for _ in range(repeats):
        a = generate(lm, prompt, ar_cfg)
        s = generate(lm, prompt, spec_cfg)
        ar_t.append(a.metrics["wall_s"])
        spec_t.append(s.metrics["wall_s"])
        identical &= a.token_ids == s.token_ids
    return statistics.median(ar_t) / statistics.median(spec_t), {
        "ar_s": statistics.median(ar_t), "spec_s": statistics.median(spec_t), "identical_to_ar": identical,
        "mean_acceptance_length": s.metrics["mean_acceptance_length"],
        "draft_acceptance_rate": s.metrics["draft_acceptance_rate"], **config}


def _nar_match(lm: LoadedModel) -> tuple[float, dict]:
    ar = generate(lm, STORY_PROMPT, GenerationConfig(mode="ar", max_new_tokens=64)).token_ids
    nar = generate(lm, STORY_PROMPT, GenerationConfig(mode="nar", window=16, max_new_tokens=64)).token_ids
    n = min(len(ar), len(nar))
    return positional_matches(ar, nar) / n, {"matching": positional_matches(ar, nar), "compared": n, "window": 16}


def _jacobi(lm: LoadedModel) -> tuple[float, dict]:
    m = generate(lm, CHAT_PROMPTS[0], GenerationConfig(mode="jacobi", window=8, max_new_tokens=48)).metrics
    return m["target_forwards"] / m["new_tokens"], {"target_forwards": m["target_forwards"], "new_tokens": m["new_tokens"], "window": 8}


def _early_exit(lm: LoadedModel) -> tuple[float, dict]:
    accepted = drafted = 0
    for prompt in CHAT_PROMPTS:
        m = generate(lm, prompt, GenerationConfig(mode="spec", drafter="early-exit", k=4, max_new_tokens=48)).metrics
        accepted += m["num_accepted_tokens"]
        drafted += m["num_draft_tokens"]
    return accepted / drafted, {"accepted": accepted, "drafted": drafted, "layers": 4, "k": 4}


def _verify_cost(lm: LoadedModel) -> tuple[float, dict]:
    from ..costmodel import measure_forward_times
    rows = {r["tokens"]: r["seconds"] for r in measure_forward_times(lm, tokens=(1, 5), repeats=7)}
    return rows[5] / rows[1], {"one_token_s": rows[1], "five_tokens_s": rows[5]}


def _identity(lm: LoadedModel) -> tuple[float, dict]:
    """Greedy spec == AR, token for token, over 6 prompts of five kinds and two drafters."""
    prompts = (COPY_PROMPT, STORY_PROMPT, *CHAT_PROMPTS, *suite_prompts("qa", 1), *suite_prompts("code_edit", 1))
    runs = [("ngram", 4), ("early-exit", 4)]
    same = total = 0
    for prompt in prompts:
        ar = generate(lm, prompt, GenerationConfig(mode="ar", max_new_tokens=48)).token_ids
        for drafter, k in runs:
            if drafter == "early-exit" and prompt not in CHAT_PROMPTS:
                continue  # the slow drafter on two prompts only, to stay within the time budget
            spec = generate(lm, prompt, GenerationConfig(mode="spec", drafter=drafter, k=k, max_new_tokens=48)).token_ids
            same += ar == spec
            total += 1
    return same / total, {"identical": same, "runs": total, "prompts": len(prompts),
                          "drafters": [f"{d} k={k}" for d, k in runs]}


def _forward_ratio(lm: LoadedModel, tokens: int, batch: int = 1) -> tuple[float, dict]:
    """Time of a forward over `tokens` new tokens / a 1-token forward, at batch 1 and at `batch`."""
    from ..costmodel import measure_forward_times
    batches = sorted({1, batch})
    rows = {(r["tokens"], r["batch"]): r["seconds"]
            for r in measure_forward_times(lm, tokens=(1, tokens), batch_sizes=tuple(batches), repeats=9)}
    ratios = {b: rows[(tokens, b)] / rows[(1, b)] for b in batches}
    return ratios[batch], {"tokens": tokens, "batch": batch, "ratio_at_batch": {str(b): r for b, r in ratios.items()},
                           "seconds": {f"{t}x{b}": v for (t, b), v in rows.items()}}


def _pooled_spec(lm: LoadedModel, prompts, seeds=(0,), **config) -> dict:
    """Run spec decoding over prompts (and seeds) and pool the counts behind every rate."""
    pooled = {"forwards": 0, "tokens": 0, "drafting_steps": 0, "rollbacks": 0, "drafted": 0, "accepted": 0,
              "ar_forwards": 0}
    offered: list[list[int]] = []
    accepted_at: list[list[int]] = []
    for i, prompt in enumerate(prompts):
        for seed in seeds:
            # One random stream per (prompt, seed): the same seed on every prompt would repeat the same
            # draws (sim's hits, sampled tokens) and make the prompts no independent sample at all.
            m = generate(lm, prompt, _spec_config(max_new_tokens=64, seed=100 * seed + i, **config),
                         costs=_profile_costs(lm.name)).metrics
            pooled["forwards"] += m["target_forwards"]
            pooled["tokens"] += m["mean_acceptance_length"] * m["target_forwards"]
            pooled["drafting_steps"] += m["num_drafts"]
            pooled["rollbacks"] += round(m["rollback_rate"] * m["num_drafts"])
            pooled["drafted"] += m["num_draft_tokens"]
            pooled["accepted"] += m["num_accepted_tokens"]
            offered.append(m["offered_per_pos_count"])
            accepted_at.append(m["accepted_per_pos_count"])
    survival = [s or 0.0 for s in pooled_per_position(offered, accepted_at)]
    conditional = [a or 0.0 for a in conditional_acceptance(survival)]
    return {**pooled, "tau": pooled["tokens"] / pooled["forwards"] if pooled["forwards"] else 0.0,
            "acceptance_rate": pooled["accepted"] / pooled["drafted"] if pooled["drafted"] else 0.0,
            "rollback_rate": pooled["rollbacks"] / pooled["drafting_steps"] if pooled["drafting_steps"] else 0.0,
            "survival": survival, "conditional": conditional, "prompts": len(prompts), "seeds": list(seeds), **config}


def _forward_reduction(lm: LoadedModel, prompts, **config) -> tuple[float, dict]:
    """AR target forwards / spec target forwards for the same tokens: the real model's "ideal speedup"."""
    ar = sum(generate(lm, p, GenerationConfig(mode="ar", max_new_tokens=64)).metrics["target_forwards"] for p in prompts)
    spec = _pooled_spec(lm, prompts, **config)
    return ar / spec["forwards"], {"ar_forwards": ar, "spec_forwards": spec["forwards"], "tau": spec["tau"], **config}


def _early_exit_tau(lm: LoadedModel) -> tuple[float, dict]:
    """τ of a drafter that always drafts k, next to k·ᾱ + 1 from the same runs (the identity)."""
    r = _pooled_spec(lm, CHAT_PROMPTS, drafter="early-exit", k=4)
    return r["tau"], {"acceptance_rate": r["acceptance_rate"], "k_alpha_bar_plus_1": 4 * r["acceptance_rate"] + 1,
                      "drafting_steps": r["drafting_steps"], "forwards": r["forwards"], "k": 4, "layers": 4}


def _rollback_rate(lm: LoadedModel) -> tuple[float, dict]:
    """Share of n-gram drafting steps on free text that reject a draft (and crop the KV cache)."""
    r = _pooled_spec(lm, (*CHAT_PROMPTS, *suite_prompts("qa", 2)), drafter="ngram", k=4)
    return r["rollback_rate"], {key: r[key] for key in ("drafting_steps", "rollbacks", "drafted", "accepted",
                                                        "acceptance_rate", "tau", "forwards")} | {
        "kv_entries_discarded": r["drafted"] - r["accepted"], "drafter": "ngram", "k": 4}


def _survival(lm: LoadedModel) -> tuple[float, dict]:
    """Per-position survival s_i and conditional acceptance a_i = s_i / s_(i-1) of n-gram drafts
    (ngram-fixed, k = 8: every match verified in full) on copy prompts and on free stories."""
    copy = _pooled_spec(lm, (COPY_PROMPT, *suite_prompts("copy", 2)), drafter="ngram-fixed", k=8)
    story = _pooled_spec(lm, (STORY_PROMPT, *suite_prompts("story", 2)), drafter="ngram-fixed", k=8)
    return copy["conditional"][3], {"copy": {"survival": copy["survival"], "conditional": copy["conditional"], "tau": copy["tau"]},
                                    "story": {"survival": story["survival"], "conditional": story["conditional"], "tau": story["tau"]},
                                    "drafter": "ngram-fixed", "k": 8, "position": 4}


def _kernel_table_tau(lm: LoadedModel) -> tuple[float, dict]:
    """τ of n-gram drafting (ngram-fixed, k = 4) on copy prompts with the old hard-coded kernel choice
    ("legacy") over τ with this machine's measured kernel table: what a faster baseline step changes in
    the counts. Both tables compute the same products, so only a near-tie flipped by rounding can differ."""
    prompts = (COPY_PROMPT, *suite_prompts("copy", 2))
    legacy = load_model(lm.name, kernels="legacy")
    runs = {"measured": _pooled_spec(lm, prompts, drafter="ngram-fixed", k=4),
            "legacy": _pooled_spec(legacy, prompts, drafter="ngram-fixed", k=4)}
    tables = {"measured": kernel_table(lm.model), "legacy": kernel_table(legacy.model)}
    return runs["legacy"]["tau"] / runs["measured"]["tau"], {
        name: {"tau": r["tau"], "forwards": r["forwards"], "accepted": r["accepted"], "drafted": r["drafted"],
               "kernel_table": tables[name].label() if tables[name] else None} for name, r in runs.items()
    } | {"drafter": "ngram-fixed", "k": 4, "prompts": len(prompts)}


def _temperature_tau(lm: LoadedModel) -> tuple[float, dict]:
    """τ of n-gram drafting on copy prompts at temperature 0, 0.7 and 1.0 (two seeds when sampling)."""
    prompts = (COPY_PROMPT, *suite_prompts("copy", 1))
    taus = {t: _pooled_spec(lm, prompts, seeds=(0,) if t == 0 else (0, 1), drafter="ngram", k=4, temperature=t)["tau"]
            for t in (0.0, 0.7, 1.0)}
    return taus[1.0], {"tau_by_temperature": {str(t): v for t, v in taus.items()}, "drafter": "ngram", "k": 4,
                       "prompts": len(prompts)}


def _first_answer_logits(lm: LoadedModel) -> torch.Tensor:
    """The target's next-token logits for the first answer token of the first chat prompt."""
    from ..target import Target

    target = Target(lm)
    return target.forward(target.new_cache(), lm.encode(CHAT_PROMPTS[0]), last_only=True).logits[-1]


def _onehot_acceptance(lm: LoadedModel) -> tuple[float, dict]:
    """A deterministic drafter through the engine's `verify_sampled`: q one-hot on the target's favourite
    first answer token of a chat prompt, p at temperature 1.0, 4000 one-draft steps. The draft is accepted
    with probability p(x), however sure the drafter was; p(x) and the share of outputs equal to x beside it."""
    from ..sampling import SamplingParams, first_token_counts, logits_to_probs, verify_sampled

    p = logits_to_probs(_first_answer_logits(lm), SamplingParams(temperature=1.0))
    top = int(torch.argmax(p))
    q = torch.zeros_like(p)
    q[top] = 1.0
    trials = 4000
    counts, accepted = first_token_counts(verify_sampled, p, q, trials, torch.Generator().manual_seed(0))
    return accepted / trials, {"token": lm.decode([top]), "p_of_draft": float(p[top]), "trials": trials,
                               "output_is_draft": counts.get(top, 0) / trials, "p_temperature": 1.0}


def _sampling_acceptance(lm: LoadedModel) -> tuple[float, dict]:
    """The engine's `verify_sampled` on one real (p, q) pair from SmolLM2's next-token distribution:
    p at temperature 1.0 (what the user asked for), q at temperature 0.7 (a drafter that agrees with
    the target but samples colder). Measured acceptance vs β = Σ min(p, q), and the first emitted
    token's frequencies vs p (they must match p, not q)."""
    from ..sampling import SamplingParams, first_token_counts, logits_to_probs, verify_sampled

    logits = _first_answer_logits(lm)
    p = logits_to_probs(logits, SamplingParams(temperature=1.0))
    q = logits_to_probs(logits, SamplingParams(temperature=0.7))
    trials = 4000
    counts, accepted = first_token_counts(verify_sampled, p, q, trials, torch.Generator().manual_seed(0))
    top = torch.topk(p, 5).indices.tolist()
    return accepted / trials, {"beta": float(torch.minimum(p, q).sum()), "trials": trials,
                               "p_temperature": 1.0, "q_temperature": 0.7,
                               "top_tokens": [{"token": lm.decode([t]), "p": float(p[t]), "q": float(q[t]),
                                               "observed": counts.get(t, 0) / trials} for t in top]}


def _int4_agreement(lm: LoadedModel) -> tuple[float, dict]:
    """Share of fp32 AR's greedy tokens that AR on the int4 copy writes at the same position (64 new tokens,
    a story, two chat and two QA prompts): how far weight-only quantisation moves the model when nothing
    verifies it. A count: the same on every run of one machine."""
    from ..quant import with_weights
    int4 = with_weights(lm, "int4")
    prompts = (STORY_PROMPT, *CHAT_PROMPTS, *suite_prompts("qa", 2))
    cfg = GenerationConfig(mode="ar", max_new_tokens=64)
    same = total = 0
    first_difference = []
    for prompt in prompts:
        fp32, quantised = generate(lm, prompt, cfg).token_ids, generate(int4, prompt, cfg).token_ids
        same += positional_matches(fp32, quantised)
        total += len(fp32)
        first_difference.append(next((i for i, (a, b) in enumerate(zip(fp32, quantised)) if a != b), None))
    return same / total, {"same": same, "compared": total, "prompts": len(prompts), "first_difference": first_difference,
                          "identical_outputs": sum(d is None for d in first_difference)}


def _ngram_draft_share(lm: LoadedModel) -> tuple[float, dict]:
    """Share of target forwards that verify at least one draft when the cost-aware n-gram drafter (k = 4)
    prices every match with the committed cost profile and drafts only where it promises to beat a plain
    step, on free text (two chat and two QA prompts). A count: the profile is committed, not measured."""
    r = _pooled_spec(lm, (*CHAT_PROMPTS, *suite_prompts("qa", 2)), drafter="ngram", k=4)
    return r["drafting_steps"] / r["forwards"], {key: r[key] for key in (
        "drafting_steps", "forwards", "drafted", "accepted", "acceptance_rate", "tau")} | {"drafter": "ngram", "k": 4}


def _suffix_recall(lm: LoadedModel) -> tuple[float, dict]:
    """The target forwards the suffix drafter needs to answer one suite question a second time, as a share
    of the first time's, with the first answer in its shared history (greedy, k = 8, 48 new tokens). A count:
    greedy decoding gives the same tokens and the same forwards on every run."""
    from ..drafters import SuffixHistory

    history = SuffixHistory()
    config = GenerationConfig(mode="spec", drafter="suffix", k=8, max_new_tokens=48)
    question = suite_prompts("qa", 1)[0]
    first, again = (generate(lm, question, config, history=history) for _ in range(2))
    if again.token_ids != first.token_ids:
        raise SpecDecError("suffix recall: the second answer differs from the first under greedy decoding")
    return again.metrics["target_forwards"] / first.metrics["target_forwards"], {
        "first_forwards": first.metrics["target_forwards"], "again_forwards": again.metrics["target_forwards"],
        "first_tau": first.metrics["mean_acceptance_length"], "again_tau": again.metrics["mean_acceptance_length"],
        "tokens": len(first.token_ids), "k": 8}


# --- trained drafters (lesson 13): every drafter whose weights ship, so a newly shipped one joins in ---


def shipped_drafters(model: str) -> tuple[str, ...]:
    """The trained drafters whose weights ship for `model` (entries of its weights manifest), in TRAINED order."""
    from ..drafters import TRAINED

    return tuple(kind for kind in TRAINED if kind in shipped(model))


def heldout_template_prompts(n: int) -> tuple[str, ...]:
    """The first n training-template prompts held out of every corpus (`train-draft` never trains on them)."""
    from ..training.corpus import is_heldout
    from ..training.prompts import training_prompts
    from ..training.sources import Item

    return tuple(p.text for p in training_prompts(0) if is_heldout(Item.single(p.text)))[:n]


OFFLINE_GROUPS = {"template": lambda: heldout_template_prompts(6),  # short answers: six give about as many anchors
                  "suite": lambda: (*suite_prompts("chat", 2), *suite_prompts("qa", 1), *suite_prompts("story", 1))}


def _offline_survival(lm: LoadedModel, k: int = 4, new_tokens: int = 48) -> tuple[float, dict]:
    """`eval-draft`'s measure on two kinds of text: teacher-forced per-position survival s_i of every shipped
    trained drafter along the target's own greedy answers (48 tokens) to 6 held-out prompts of the
    training templates and to 4 chat, qa and story prompts of the suite. No timing: the same numbers on
    every run of the same machine. Value: eagle's s_1 on the suite prompts."""
    from ..drafters import module_vocab
    from ..drafters.weights import drafter_module
    from ..target import Target
    from ..training.batches import decoded_sequence
    from ..training.kinds import KINDS, layers_needed
    from ..training.train import evaluate

    kinds = shipped_drafters(lm.name)
    if not kinds:
        raise SpecDecError(f"no trained drafter ships for {lm.name}: train one with python -m specdec_core train-draft")
    layers = tuple(sorted({layer for kind in kinds for layer in layers_needed(kind, lm)}))
    target = Target(lm)
    details: dict = {"k": k, "new_tokens": new_tokens, "drafters": list(kinds)}
    for group, prompts in OFFLINE_GROUPS.items():
        sequences = []
        for prompt in prompts():
            result = generate(lm, prompt, GenerationConfig(mode="ar", max_new_tokens=new_tokens))
            sequences.append(decoded_sequence(target, result.trace.prompt_ids, result.token_ids, layers))
        details[f"{group}_prompts"] = len(sequences)
        for kind in kinds:
            module = drafter_module(lm, kind, KINDS[kind].cls)
            r = evaluate(lm, kind, module, module_vocab(module, lm.model.lm_head.weight), sequences, k=k)["all"]
            details.setdefault(kind, {})[group] = {
                "anchors": r["anchors"], "survival": r["survival"], "conditional": r["conditional"],
                "tau": [r["tau"][i] for i in range(1, len(r["survival"]) + 1)],  # lists: the cache is JSON
                "tau_walked": [r["tau_walked"][i] for i in range(1, len(r["survival"]) + 1)]}
    main = "eagle" if "eagle" in kinds else kinds[0]
    return details[main]["suite"]["survival"][0], {**details, "value_of": main}


def _drafters_in_the_loop(lm: LoadedModel, k: int = 4, new_tokens: int = 48) -> tuple[float, dict]:
    """The untrained early exit and every shipped trained drafter in the decode loop (greedy, k = 4, 48 new
    tokens, the two chat prompts): tau, acceptance, and where the time goes. Per prompt AR runs before and
    after the drafters (their mean is the baseline, so a slow drift of the machine hits both sides). c =
    drafting seconds per drafted token and r = seconds per verify forward, both over AR's seconds per
    token on the same prompt. One run each: the times are noisy, the counts are not. Value: eagle's tau."""
    drafters = ("early-exit", *shipped_drafters(lm.name))
    pooled = {name: {"ar_s": 0.0, "tokens": 0.0, "forwards": 0, "drafted": 0, "accepted": 0, "draft_s": 0.0,
                     "verify_s": 0.0, "decode_s": 0.0, "identical": True, "bytes": 0} for name in drafters}
    ar_seconds = ar_tokens = 0.0
    for prompt in CHAT_PROMPTS:
        before = generate(lm, prompt, GenerationConfig(mode="ar", max_new_tokens=new_tokens))
        specs = {name: generate(lm, prompt, GenerationConfig(mode="spec", drafter=name, k=k, max_new_tokens=new_tokens))
                 for name in drafters}
        after = generate(lm, prompt, GenerationConfig(mode="ar", max_new_tokens=new_tokens))
        ar_token_s = (before.metrics["decode_s"] + after.metrics["decode_s"]) / (2 * (before.metrics["new_tokens"] - 1))
        ar_seconds += before.metrics["decode_s"] + after.metrics["decode_s"]
        ar_tokens += 2 * (before.metrics["new_tokens"] - 1)
        for name, spec in specs.items():
            m, row = spec.metrics, pooled[name]
            tokens = m["mean_acceptance_length"] * m["target_forwards"]
            row["ar_s"] += ar_token_s * tokens  # what AR would have spent on this run's tokens
            row["tokens"] += tokens
            for key, metric in (("forwards", "target_forwards"), ("drafted", "num_draft_tokens"),
                                ("accepted", "num_accepted_tokens"), ("draft_s", "draft_s"), ("verify_s", "verify_s"),
                                ("decode_s", "decode_s")):
                row[key] += m[metric]
            row["identical"] &= spec.token_ids == before.token_ids
            row["bytes"] = m["drafter_bytes"]
    rows = {}
    for name, row in pooled.items():
        unit = row["ar_s"] / row["tokens"]  # AR's seconds per token, weighted like this drafter's tokens
        rows[name] = {"tau": row["tokens"] / row["forwards"],
                      "acceptance_rate": row["accepted"] / row["drafted"] if row["drafted"] else 0.0,
                      "c": row["draft_s"] / row["drafted"] / unit if row["drafted"] else 0.0,
                      "r": row["verify_s"] / row["forwards"] / unit, "speedup": row["ar_s"] / row["decode_s"],
                      "identical_to_ar": row["identical"], "forwards": row["forwards"], "drafted": row["drafted"],
                      "drafter_bytes": row["bytes"]}
    main = "eagle" if "eagle" in rows else drafters[-1]
    return rows[main]["tau"], {"drafters": rows, "ar_ms_per_token": 1000 * ar_seconds / ar_tokens, "k": k,
                               "new_tokens": new_tokens, "prompts": len(CHAT_PROMPTS), "value_of": main}


def _markov_gain(lm: LoadedModel, k: int = 7) -> tuple[float, dict]:
    """tau of `block` over tau of `block-parallel` (the same model without its serial Markov head) at
    k = 7 on the two chat prompts and two suite QA prompts, greedy, 64 new tokens; with each one's
    per-position survival and conditional acceptance. Counts only: the same on every run."""
    prompts = (*CHAT_PROMPTS, *suite_prompts("qa", 2))
    runs = {name: _pooled_spec(lm, prompts, drafter=name, k=k) for name in ("block", "block-parallel")}
    details = {name: {key: r[key] for key in ("tau", "acceptance_rate", "survival", "conditional", "forwards")}
               for name, r in runs.items()}
    return runs["block"]["tau"] / runs["block-parallel"]["tau"], {**details, "k": k, "prompts": len(prompts)}


def _quant_first_acceptance(lm: LoadedModel, k: int = 4) -> tuple[float, dict]:
    """First-draft acceptance s_1 of the `quant` self-draft (the target's own weights in int4, bf16
    arithmetic) on the two chat prompts and the story, greedy, k = 4; beside it the int8 copy (requantised
    from fp32: different weights), with each one's per-position survival and τ. Counts only: the same on
    every run of one machine."""
    prompts = (*CHAT_PROMPTS, STORY_PROMPT)
    runs = {"int4": _pooled_spec(lm, prompts, drafter="quant", k=k),
            "int8": _pooled_spec(lm, prompts, drafter="quant", quant_bits=8, k=k)}
    details = {name: {key: r[key] for key in ("tau", "acceptance_rate", "survival", "conditional", "forwards")}
               for name, r in runs.items()}
    return runs["int4"]["survival"][0], {"copies": details, "k": k, "prompts": len(prompts)}


def _tree_gain(lm: LoadedModel, k: int = 4, nodes: int = 16) -> tuple[float, dict]:
    """τ of the trained heads with a dynamic tree of 16 nodes over τ of their chain of k = 4, on the two
    chat prompts, two suite QA prompts and the story, greedy, 64 new tokens; the static (Medusa) tree of
    the same size beside it, and each run's survival by depth. Counts only: the same on every run."""
    prompts = (*CHAT_PROMPTS, *suite_prompts("qa", 2), STORY_PROMPT)
    runs = {"chain": _pooled_spec(lm, prompts, drafter="heads", k=k),
            **{tree: _pooled_spec(lm, prompts, drafter="heads", k=k, tree=tree, tree_nodes=nodes)
               for tree in ("static", "dynamic")}}
    details = {name: {key: r[key] for key in ("tau", "survival", "forwards")} for name, r in runs.items()}
    return runs["dynamic"]["tau"] / runs["chain"]["tau"], {**details, "k": k, "nodes": nodes, "prompts": len(prompts)}


CURVE_FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "scaling-curve-cpu.json"


def _shipped_heads_on_curve(lm: LoadedModel) -> tuple[float, dict]:
    """The shipped heads scored exactly as a point of the scaling curve (`train-curve`): walked first-draft
    acceptance s_1 and tau(k) along the target's greedy answers to the curve's suite prompts (its setting:
    6 chat, 6 qa, 6 story, 64 tokens, k = 4). Value: s_1, the mean over the categories, as the curve's
    points are read. Teacher-forced, no timing: the same on every run of one machine."""
    from ..drafters import MedusaHeads, module_vocab
    from ..drafters.weights import drafter_module
    from ..suite import load_prompts
    from ..training.curve import answers, score

    setting = json.loads(CURVE_FILE.read_text(encoding="utf-8"))["setting"]
    cases = [c for c in load_prompts(PROMPTS_FILE) if c.id in set(setting["prompts"])]
    module = drafter_module(lm, "heads", MedusaHeads)
    rows = score(lm, "heads", module, module_vocab(module, lm.model.lm_head.weight),
                 answers(lm, "heads", cases, setting["max_new_tokens"]), setting["k"])
    return statistics.mean(row["s1"] for row in rows.values()), {"categories": rows, "k": setting["k"],
                                                                  "prompts": len(cases)}


EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in [
    Experiment("sim_tau_a07_k4", {"zh": "模拟草稿（命中率 0.7，k=4）的平均接受长度 τ", "en": "Mean accepted length τ of the sim drafter (hit rate 0.7, k=4)"},
               "tokens/forward", lambda lm: _tau(lm, SIM_PROMPTS, drafter="sim", hit_rate=0.7, k=4), reads=SUITE),
    Experiment("sim_tau_a05_k4", {"zh": "模拟草稿（命中率 0.5，k=4）的平均接受长度 τ", "en": "Mean accepted length τ of the sim drafter (hit rate 0.5, k=4)"},
               "tokens/forward", lambda lm: _tau(lm, SIM_PROMPTS, drafter="sim", hit_rate=0.5, k=4), reads=SUITE),
    Experiment("ngram_speedup_copy", {"zh": "n-gram 草稿在复制型提示上的加速比", "en": "n-gram drafting speedup on a copy prompt"},
               "x", lambda lm: _speedup(lm, COPY_PROMPT, drafter="ngram", k=4)),
    Experiment("ngram_speedup_story", {"zh": "n-gram 草稿在自由故事上的加速比", "en": "n-gram drafting speedup on a free story"},
               "x", lambda lm: _speedup(lm, STORY_PROMPT, drafter="ngram", k=4)),
    Experiment("ngram_fixed_speedup_story", {"zh": "总是整段验证的 n-gram 草稿（ngram-fixed）在自由故事上的加速比",
                                             "en": "Speedup of n-gram drafting that always verifies the whole match (ngram-fixed) on a free story"},
               "x", lambda lm: _speedup(lm, STORY_PROMPT, drafter="ngram-fixed", k=4)),
    Experiment("nar_match_rate", {"zh": "一次性并行（NAR）与 AR 相同位置相同 token 的比例", "en": "Share of one-shot NAR tokens equal to AR's"},
               "fraction", _nar_match),
    Experiment("jacobi_forwards_per_token", {"zh": "Jacobi 迭代每个 token 需要的目标前向次数", "en": "Target forwards per token for Jacobi iteration"},
               "forwards/token", _jacobi),
    Experiment("early_exit_acceptance", {"zh": "未训练的 4 层早退草稿的接受率 α", "en": "Acceptance rate α of the untrained 4-layer early-exit draft"},
               "fraction", _early_exit),
    Experiment("verify_cost_ratio_k4", {"zh": "一次 5-token 前向与 1-token 前向的耗时比", "en": "Time of a 5-token forward / a 1-token forward"},
               "x", _verify_cost),
    Experiment("spec_greedy_identity", {"zh": "贪心投机解码与 AR 输出逐 token 一致的比例（6 个提示、两种草稿器）",
                                        "en": "Share of greedy spec runs whose output equals AR (6 prompts, two drafters)"},
               "fraction", _identity, reads=SUITE),
    Experiment("batch_verify_ratio_b8_k4", {"zh": "batch 8 时，每行 5 个 token 的前向与每行 1 个 token 的前向耗时比",
                                            "en": "At batch 8: time of a 5-tokens-per-row forward / a 1-token-per-row forward"},
               "x", lambda lm: _forward_ratio(lm, 5, batch=8)),
    Experiment("ngram_forward_ratio_copy_k3", {"zh": "复制型提示上 AR 与 n-gram 投机（k=3）的目标前向次数之比",
                                               "en": "AR target forwards / n-gram spec (k=3) target forwards on copy prompts"},
               "x", lambda lm: _forward_reduction(lm, (COPY_PROMPT, *suite_prompts("copy", 2)), drafter="ngram", k=3), reads=COUNTED),
    Experiment("early_exit_tau_k4", {"zh": "未训练 4 层早退草稿（k=4，每步都起草 4 个）的 τ",
                                     "en": "τ of the untrained 4-layer early exit (k=4, drafting 4 every step)"},
               "tokens/forward", _early_exit_tau),
    Experiment("ngram_rollback_rate_free", {"zh": "自由文本上 n-gram 起草步中发生回滚（至少一个草稿被拒）的比例",
                                            "en": "Share of n-gram drafting steps on free text that roll back (at least one draft rejected)"},
               "fraction", _rollback_rate, reads=COUNTED),
    Experiment("ngram_copy_a4", {"zh": "复制型提示上 n-gram 草稿第 4 个位置的条件接受率 a_4（k=8）",
                                 "en": "Conditional acceptance a_4 of n-gram drafts at position 4 on copy prompts (k=8)"},
               "fraction", _survival, reads=SUITE),
    Experiment("kernel_table_tau_ratio", {"zh": "复制型提示上 n-gram 草稿（ngram-fixed，k=4）在旧的固定内核选择（legacy）下的 τ，相对本机实测内核表下 τ 之比",
                                          "en": "τ of n-gram drafting (ngram-fixed, k=4) on copy prompts under the old hard-coded kernel choice (legacy) over τ under this machine's measured kernel table"},
               "x", _kernel_table_tau, reads=SUITE),
    Experiment("ngram_tau_temperature_1", {"zh": "温度 1.0 时 n-gram 草稿在复制型提示上的 τ（附温度 0 与 0.7）",
                                           "en": "τ of n-gram drafting on copy prompts at temperature 1.0 (with 0 and 0.7 beside it)"},
               "tokens/forward", _temperature_tau, reads=COUNTED),
    Experiment("sampling_acceptance_real_pq", {"zh": "引擎的 verify_sampled 在真实 p（温度 1.0）与 q（温度 0.7）上的接受率",
                                               "en": "Acceptance rate of the engine's verify_sampled on a real p (temperature 1.0) and q (temperature 0.7)"},
               "fraction", _sampling_acceptance),
    Experiment("sampling_acceptance_onehot_top", {"zh": "确定性草稿（one-hot q，押目标最可能的 token）经引擎 verify_sampled 在温度 1.0 下的接受率",
                                                  "en": "Acceptance rate of a deterministic draft (one-hot q on the target's favourite token) through the engine's verify_sampled at temperature 1.0"},
               "fraction", _onehot_acceptance),
    Experiment("int4_token_agreement", {"zh": "int4 副本上的贪心 AR 与 fp32 AR 在相同位置写出相同 token 的比例（64 个新 token，一个故事、两条闲聊、两条问答提示）",
                                        "en": "Share of fp32 AR's greedy tokens that AR on the int4 copy writes at the same position (64 new tokens, a story, two chat and two QA prompts)"},
               "fraction", _int4_agreement, reads=SUITE),
    Experiment("ngram_draft_share_free", {"zh": "自由文本上按代价决策的 n-gram 草稿器（k=4）实际起草的目标前向所占比例（两条闲聊、两条问答提示）",
                                          "en": "Share of target forwards that verify a draft when the cost-aware n-gram drafter (k=4) runs on free text (two chat and two QA prompts)"},
               "fraction", _ngram_draft_share, reads=COUNTED),
    Experiment("suffix_recall_forwards", {"zh": "suffix 草稿器把一道测试集问答题再答一遍（第一遍的回答已在共享历史里）所需的目标前向，占第一遍的比例（贪心，k=8，48 个新 token）",
                                          "en": "Target forwards the suffix drafter needs to answer a suite QA question again, with the first answer in its shared history, as a share of the first time's (greedy, k=8, 48 new tokens)"},
               "fraction", _suffix_recall, reads=SUITE),
    Experiment("trained_offline_s1_suite", {"zh": "训练过的 eagle 草稿器在测试集提示（chat、qa、story）上的离线第 1 位存活率 s_1（同时给出训练模板留出提示上的数值，以及每个随附的训练草稿器）",
                                            "en": "Offline first-position survival s_1 of the trained eagle drafter on suite prompts (chat, qa, story), beside held-out training-template prompts, for every shipped trained drafter"},
               "fraction", _offline_survival, weights=True, reads=SUITE),
    Experiment("trained_tau_chat_k4", {"zh": "训练过的 eagle 草稿器在解码循环中的 τ（k=4，两个聊天提示），旁边是未训练的早退草稿与其他训练过的草稿器",
                                       "en": "τ of the trained eagle drafter in the decode loop (k=4, two chat prompts), with the untrained early exit and the other trained drafters beside it"},
               "tokens/forward", _drafters_in_the_loop, weights=True),
    Experiment("eagle_speedup_chat", {"zh": "训练过的 eagle 草稿器在聊天提示上的加速比（k=4）",
                                      "en": "Speedup of the trained eagle drafter on a chat prompt (k=4)"},
               "x", lambda lm: _speedup(lm, CHAT_PROMPTS[0], drafter="eagle", k=4), weights=True),
    Experiment("block_markov_gain_k7", {"zh": "分块草稿器 block 相对去掉马尔可夫头的 block-parallel 的 τ 之比（k=7，贪心，两条闲聊和两条问答提示）",
                                        "en": "τ of the block drafter over τ of block-parallel, the same model without its Markov head (k=7, greedy, two chat and two QA prompts)"},
               "x", _markov_gain, weights=True, reads=SUITE),
    Experiment("quant_first_acceptance", {"zh": "量化自投机草稿（目标模型自己的 int4 副本）第 1 个草稿被接受的比例 s_1（k=4，贪心，两条闲聊和一个故事提示）",
                                          "en": "Share of first drafts accepted, s_1, for the quant self-draft: the target's own int4 copy (k=4, greedy, two chat prompts and a story)"},
               "fraction", _quant_first_acceptance),
    Experiment("heads_tree_gain_16", {"zh": "训练过的 heads 草稿器用 16 个节点的动态树时的 τ，相对它 k=4 草稿链的 τ 之比（贪心，两条闲聊、两条问答和一个故事提示）",
                                      "en": "τ of the trained heads with a 16-node dynamic tree over τ of their chain of k=4 (greedy, two chat, two QA prompts and a story)"},
               "x", _tree_gain, weights=True, reads=(*SUITE, tree_table_path("smollm2-135m", "heads"))),
    Experiment("curve_shipped_heads_s1", {"zh": "随附的 heads 草稿器按规模曲线的方式打分：沿目标模型对测试集 6 条闲聊、6 条问答、6 条故事提示的贪心回答走出的第 1 位接受率 s_1（三个类别的平均）",
                                          "en": "The shipped heads scored as a point of the scaling curve: walked first-draft acceptance s_1 along the target's greedy answers to the suite's 6 chat, 6 QA and 6 story prompts (the mean over the three categories)"},
               "fraction", _shipped_heads_on_curve, weights=True, reads=(*SUITE, CURVE_FILE)),
]}


def _cache_file(name: str, model: str):
    return cache_dir() / "experiments" / f"{model}-{name}.json"


def _fingerprint(lm: LoadedModel, experiment: Experiment | None = None) -> dict:
    fingerprint = {"version": CACHE_VERSION, "model": lm.name, "device": str(lm.device), "dtype": str(lm.dtype),
                   "torch": torch.__version__, "transformers": transformers.__version__}
    table = kernel_table(lm.model)
    if table is not None:  # another kernel table times (and may round) differently: measure again
        fingerprint["kernels"] = table.summary()["routes"]
    if experiment is not None and experiment.weights:  # retrained or newly shipped weights: measure again
        fingerprint["weights"] = {kind: meta["sha256"] for kind, meta in sorted(shipped(lm.name).items())}
    if experiment is not None and experiment.reads:  # an edited prompt file: measure again
        fingerprint["reads"] = {path.name: sha256_file(path) for path in experiment.reads}
    return fingerprint


def run(name: str, lm: LoadedModel | None = None, refresh: bool = False) -> ExperimentResult:
    """Run (or read from the disk cache) one registered experiment on the real model."""
    if name not in EXPERIMENTS:
        raise SpecDecError(f"unknown experiment {name!r}: choose one of {', '.join(EXPERIMENTS)}")
    lm = lm or load_model("smollm2-135m")
    experiment, path = EXPERIMENTS[name], _cache_file(name, lm.name)
    if not refresh and path.is_file():
        try:
            saved = json.loads(path.read_text())
            if saved.pop("fingerprint") == _fingerprint(lm, experiment):
                return ExperimentResult(**{**saved, "cached": True})
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a broken cache entry is simply recomputed
    start = time.perf_counter()
    value, details = experiment.run(lm)
    result = ExperimentResult(name, float(value), experiment.unit, details, time.perf_counter() - start)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**asdict(result), "fingerprint": _fingerprint(lm, experiment)}))
    tmp.replace(path)
    return result
