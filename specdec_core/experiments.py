"""The registry of runnable experiments shared by the quiz ("predict, then run"), the app and the
notebooks. Each experiment measures one number on the real model; results are cached on disk so a
notebook, the quiz and the app do not pay for the same measurement twice.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch
import transformers

from .errors import SpecDecError
from .decode import GenerationConfig, generate
from .metrics import positional_matches
from .models import LoadedModel, cache_dir, load_model

CACHE_VERSION = 5  # bump when an experiment's definition or the engine's kernels change

COPY_PROMPT = ("Repeat the following paragraph exactly, word for word:\n\n"
               "The library opens at nine in the morning and closes at six in the evening. Visitors may borrow "
               "up to five books at a time, and each book can be kept for three weeks. Please return books to the "
               "front desk and ask the staff if you need help finding anything.")
STORY_PROMPT = "Write a short story about a lighthouse keeper who finds a mysterious bottle on the beach."
CHAT_PROMPTS = ("What are three tips for staying focused while studying?",
                "Explain why the sky is blue in simple words.")


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


def _tau(lm: LoadedModel, prompts, **config) -> tuple[float, dict]:
    """Mean accepted length over prompts: all decode tokens / all decode forwards."""
    tokens = forwards = 0
    for prompt in prompts:
        m = generate(lm, prompt, GenerationConfig(mode="spec", max_new_tokens=64, **config)).metrics
        tokens += m["mean_acceptance_length"] * m["target_forwards"]
        forwards += m["target_forwards"]
    return tokens / forwards, {"prompts": len(prompts), "target_forwards": forwards, **config}


def _speedup(lm: LoadedModel, prompt: str, repeats: int = 3, **config) -> tuple[float, dict]:
    """Median AR wall time / median spec wall time, runs interleaved (A B A B ...) after a warm-up."""
    ar_cfg = GenerationConfig(mode="ar", max_new_tokens=64)
    spec_cfg = GenerationConfig(mode="spec", max_new_tokens=64, **config)
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
    from .costmodel import measure_forward_times
    rows = {r["tokens"]: r["seconds"] for r in measure_forward_times(lm, tokens=(1, 5), repeats=7)}
    return rows[5] / rows[1], {"one_token_s": rows[1], "five_tokens_s": rows[5]}


def _identity(lm: LoadedModel) -> tuple[float, dict]:
    prompts = (COPY_PROMPT, STORY_PROMPT, *CHAT_PROMPTS)
    same = 0
    for prompt in prompts:
        ar = generate(lm, prompt, GenerationConfig(mode="ar", max_new_tokens=48)).token_ids
        spec = generate(lm, prompt, GenerationConfig(mode="spec", drafter="ngram", k=4, max_new_tokens=48)).token_ids
        same += ar == spec
    return same / len(prompts), {"identical": same, "prompts": len(prompts), "drafter": "ngram", "k": 4}


EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in [
    Experiment("sim_tau_a07_k4", {"zh": "模拟草稿（命中率 0.7，k=4）的平均接受长度 τ", "en": "Mean accepted length τ of the sim drafter (hit rate 0.7, k=4)"},
               "tokens/forward", lambda lm: _tau(lm, CHAT_PROMPTS, drafter="sim", hit_rate=0.7, k=4)),
    Experiment("sim_tau_a05_k4", {"zh": "模拟草稿（命中率 0.5，k=4）的平均接受长度 τ", "en": "Mean accepted length τ of the sim drafter (hit rate 0.5, k=4)"},
               "tokens/forward", lambda lm: _tau(lm, CHAT_PROMPTS, drafter="sim", hit_rate=0.5, k=4)),
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
    Experiment("spec_greedy_identity", {"zh": "贪心投机解码与 AR 输出逐 token 一致的比例", "en": "Share of prompts where greedy spec output equals AR"},
               "fraction", _identity),
]}


def _cache_file(name: str, model: str):
    return cache_dir() / "experiments" / f"{model}-{name}.json"


def _fingerprint(lm: LoadedModel) -> dict:
    return {"version": CACHE_VERSION, "model": lm.name, "device": str(lm.device), "dtype": str(lm.dtype),
            "torch": torch.__version__, "transformers": transformers.__version__}


def run(name: str, lm: LoadedModel | None = None, refresh: bool = False) -> ExperimentResult:
    """Run (or read from the disk cache) one registered experiment on the real model."""
    if name not in EXPERIMENTS:
        raise SpecDecError(f"unknown experiment {name!r}: choose one of {', '.join(EXPERIMENTS)}")
    lm = lm or load_model("smollm2-135m")
    experiment, path = EXPERIMENTS[name], _cache_file(name, lm.name)
    if not refresh and path.is_file():
        try:
            saved = json.loads(path.read_text())
            if saved.pop("fingerprint") == _fingerprint(lm):
                return ExperimentResult(**{**saved, "cached": True})
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a broken cache entry is simply recomputed
    start = time.perf_counter()
    value, details = experiment.run(lm)
    result = ExperimentResult(name, float(value), experiment.unit, details, time.perf_counter() - start)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**asdict(result), "fingerprint": _fingerprint(lm)}))
    tmp.replace(path)
    return result
