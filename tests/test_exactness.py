"""Greedy exactness: every mode that claims it produces exactly AR's token ids.

`tiny` has peaked logits (mean top probability ~0.6), so argmax does not flip between the
1-token and multi-token kernel paths; each test is shown to fail on a deliberately broken loop.
"""
import random

import pytest

import specdec_core as sd
from specdec_core.target import Target

MAX_NEW = 24


def random_prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        body = [rng.randrange(100, 40000) for _ in range(rng.randrange(4, 24))]
        if rng.random() < 0.5:  # half of them repeat themselves, so n-gram lookup finds matches
            body = body + body[: rng.randrange(2, len(body))]
        prompts.append(body)
    return prompts


def ar_ids(lm, prompt, **kw) -> list[int]:
    return sd.generate(lm, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=MAX_NEW, **kw)).token_ids


SPEC_CASES = [dict(drafter=d, k=k) for d in ("ngram", "sim", "early-exit") for k in (1, 2, 4, 8)] + [
    dict(drafter="ngram-fixed", k=4),
    dict(drafter="early-exit", k=8, dynamic_k=0.3),
    dict(drafter="early-exit", k=4, dynamic_k=0.6),
    dict(drafter="sim", k=4, dynamic_k=0.5, drafter_options={"hit_rate": 0.9}),
    dict(drafter="ngram", k=4, drafter_options={"ngram_min": 2, "ngram_max": 4}),
    *(dict(drafter="suffix", k=k) for k in (1, 4, 8)),
    dict(drafter="suffix", k=4, tree="dynamic"),
    dict(drafter="suffix", k=8, drafter_options={"suffix_factor": 2.0, "suffix_min_prob": 0.0}),
]


@pytest.mark.parametrize("case", SPEC_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_spec_greedy_equals_ar_tiny(tiny, case):
    extra = {"drafter_options": {"early_exit_layers": 1}} if case["drafter"] == "early-exit" else {}
    for prompt in random_prompts(6, seed=case["k"]):
        result = sd.generate(tiny, prompt, sd.GenerationConfig(mode="spec", max_new_tokens=MAX_NEW, **case, **extra))
        assert result.token_ids == ar_ids(tiny, prompt), f"spec {case} diverged from AR on {prompt}"


def test_sim_drafts_are_accepted_at_the_dialled_rate(tiny):
    """Makes the exactness tests above meaningful: sim really exercises long accepted blocks."""
    m = sd.generate(tiny, random_prompts(1)[0], sd.GenerationConfig(mode="spec", drafter="sim", drafter_options={"hit_rate": 1.0}, k=4, max_new_tokens=40)).metrics
    assert m["draft_acceptance_rate"] == 1.0 and m["mean_acceptance_length"] > 4


@pytest.mark.parametrize("window", [1, 3, 8])
def test_jacobi_equals_ar_tiny(tiny, window):
    for prompt in random_prompts(5, seed=window):
        result = sd.generate(tiny, prompt, sd.GenerationConfig(mode="jacobi", window=window, max_new_tokens=MAX_NEW))
        assert result.token_ids == ar_ids(tiny, prompt)


def test_exactness_holds_with_repetition_penalty(tiny):
    """History-dependent processing is applied position by position on the growing prefix."""
    for prompt in random_prompts(4, seed=7):
        ar = ar_ids(tiny, prompt, repetition_penalty=1.3)
        for mode, extra in (("spec", dict(drafter="sim", drafter_options={"hit_rate": 0.8})), ("jacobi", dict(window=4))):
            cfg = sd.GenerationConfig(mode=mode, max_new_tokens=MAX_NEW, repetition_penalty=1.3, **extra)
            assert sd.generate(tiny, prompt, cfg).token_ids == ar


def test_exactness_check_fails_without_rollback(tiny, monkeypatch):
    """Negative control: a loop that forgets to roll back rejected drafts must be caught."""
    monkeypatch.setattr(Target, "rollback", staticmethod(lambda cache, n: None))
    diverged = 0
    for prompt in random_prompts(4):
        spec = sd.generate(tiny, prompt, sd.GenerationConfig(mode="spec", drafter="sim", drafter_options={"hit_rate": 0.5}, k=4, max_new_tokens=MAX_NEW))
        monkeypatch.undo()
        diverged += spec.token_ids != ar_ids(tiny, prompt)
        monkeypatch.setattr(Target, "rollback", staticmethod(lambda cache, n: None))
    assert diverged >= 3


def test_exactness_check_fails_with_a_wrong_accept_rule(tiny, monkeypatch):
    """Negative control: accepting every draft without comparing it to the target must be caught."""
    import specdec_core.decode as gen

    def accept_everything(draft, choices):
        return len(draft), choices[len(draft)]

    prompts = random_prompts(3)
    expected = [ar_ids(tiny, p) for p in prompts]
    monkeypatch.setattr(gen, "verify_greedy", accept_everything)
    cfg = sd.GenerationConfig(mode="spec", drafter="sim", drafter_options={"hit_rate": 0.5}, k=4, max_new_tokens=MAX_NEW)
    assert all(sd.generate(tiny, p, cfg).token_ids != e for p, e in zip(prompts, expected))


@pytest.mark.parametrize("mode,extra", [("spec", dict(drafter="sim", k=8, drafter_options={"hit_rate": 1.0})), ("jacobi", dict(window=16)), ("nar", dict(window=16))])
def test_every_mode_stops_exactly_at_the_limit_or_eos(tiny, mode, extra):
    prompt = random_prompts(1, seed=3)[0]
    for limit in (1, 2, 5, 13):
        cfg = sd.GenerationConfig(mode=mode, max_new_tokens=limit, **extra)
        ids = sd.generate(tiny, prompt, cfg).token_ids
        assert len(ids) == limit
        if mode != "nar":
            assert ids == ar_ids(tiny, prompt)[:limit]


def test_stops_at_eos_inside_an_accepted_block(tiny):
    """Make EOS the AR output's 6th token by choosing it as the EOS id; spec must truncate there."""
    prompt = random_prompts(1, seed=5)[0]
    ar = ar_ids(tiny, prompt)
    eos = ar[5]
    first = ar.index(eos)
    old = tiny.model.generation_config.eos_token_id
    tiny.model.generation_config.eos_token_id = eos
    try:
        for mode, extra in (("ar", {}), ("spec", dict(drafter="sim", drafter_options={"hit_rate": 1.0}, k=8)), ("jacobi", dict(window=8))):
            result = sd.generate(tiny, prompt, sd.GenerationConfig(mode=mode, max_new_tokens=MAX_NEW, **extra))
            assert result.token_ids == ar[: first + 1] and result.trace.stop_reason == "eos"
    finally:
        tiny.model.generation_config.eos_token_id = old


def test_stop_string_ends_every_mode_at_the_same_token(smol):
    prompt = "List the numbers from one to ten in words, separated by commas."
    full = sd.generate(smol, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=32))
    stop = smol.decode(full.token_ids[:12]).rstrip()[-4:]  # a string the model is known to produce
    ar = sd.generate(smol, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=32, stop=(stop,)))
    assert ar.trace.stop_reason == "stop_string" and stop in ar.text and len(ar.token_ids) <= 12
    spec = sd.generate(smol, prompt, sd.GenerationConfig(mode="spec", drafter="sim", drafter_options={"hit_rate": 1.0}, k=8, max_new_tokens=32, stop=(stop,)))
    assert spec.token_ids == ar.token_ids


@pytest.mark.parametrize("drafter", ["ngram", "suffix", "early-exit", "sim"])
def test_spec_greedy_equals_ar_smollm2(smol, drafter):
    prompts = ["Repeat exactly: the cat sat on the mat, the dog sat on the log.", "What is the capital of France?"]
    for prompt in prompts:
        ar = sd.generate(smol, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=32)).token_ids
        spec = sd.generate(smol, prompt, sd.GenerationConfig(mode="spec", drafter=drafter, k=4, max_new_tokens=32)).token_ids
        assert spec == ar


def test_jacobi_equals_ar_smollm2(smol):
    prompt = "Repeat exactly: the cat sat on the mat."
    ar = sd.generate(smol, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=24)).token_ids
    assert sd.generate(smol, prompt, sd.GenerationConfig(mode="jacobi", window=6, max_new_tokens=24)).token_ids == ar
