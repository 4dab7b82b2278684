"""Sampling losslessness: speculative sampling leaves the target's distribution p unchanged.

(a) exact: the output distribution of one accept/residual step, computed analytically from the
    implementation's own functions, equals p;
(b) statistical: on `tiny`, the first token of a speculative step follows the distribution that AR
    sampling draws from. Both checks are shown to FAIL for deliberately wrong rules.
"""
import copy
import math

import pytest
import torch

import specdec_core as sd
import specdec_core.sampling as sampling
from specdec_core.decode import Piecer, Stopper, prefill, speculative_step
from specdec_core.generation import prepare
from specdec_core.sampling import chi2_rejects
from specdec_core.target import Target
from conftest import UniformDrafter


def output_distribution(p: torch.Tensor, q: torch.Tensor | None, draft_token: int | None = None) -> torch.Tensor:
    """P(first emitted token = y) for one drafted position, from the implementation's functions:
    sum_x q(x) [ a(x) [y = x] + (1 - a(x)) r_x(y) ]."""
    out = torch.zeros_like(p)
    proposals = [(draft_token, 1.0)] if q is None else [(x, float(q[x])) for x in range(len(p))]
    for x, q_x in proposals:
        if q_x == 0:
            continue
        a = sampling.acceptance_probability(p, q, x)
        out[x] += q_x * a
        out += q_x * (1 - a) * sampling.residual_distribution(p, q, x)
    return out


CASES = [(torch.tensor(p), torch.tensor(q)) for p, q in sampling.CHECK_CASES]


@pytest.mark.parametrize("p,q", CASES)
def test_accept_residual_step_reproduces_p_exactly(p, q):
    assert torch.allclose(output_distribution(p.double(), q.double()), p.double(), atol=1e-12)


@pytest.mark.parametrize("p,_", CASES)
def test_one_hot_proposals_are_lossless_for_every_draft(p, _):
    """ngram and sim propose deterministically (q one-hot): still exact, whatever they propose."""
    for x in range(len(p)):
        assert torch.allclose(output_distribution(p.double(), None, x), p.double(), atol=1e-12)


def test_exact_check_fails_for_wrong_rules(monkeypatch):
    p, q = (t.double() for t in CASES[0])
    monkeypatch.setattr(sampling, "acceptance_probability", lambda p, q, x: 1.0)  # always accept
    assert not torch.allclose(output_distribution(p, q), p, atol=1e-3)
    monkeypatch.undo()
    monkeypatch.setattr(sampling, "residual_distribution", lambda p, q, x: p)  # resample from p
    assert not torch.allclose(output_distribution(p, q), p, atol=1e-3)


def test_logits_to_probs_filters():
    logits = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0])
    top2 = sampling.logits_to_probs(logits, sd.SamplingParams(temperature=1.0, top_k=2))
    assert (top2[2:] == 0).all() and math.isclose(float(top2.sum()), 1.0, rel_tol=1e-6)
    nucleus = sampling.logits_to_probs(logits, sd.SamplingParams(temperature=1.0, top_p=0.7))
    assert nucleus[0] > 0 and nucleus[1] > 0 and (nucleus[2:] == 0).all()  # 0.64 < 0.7 needs the 2nd token
    hot = sampling.logits_to_probs(logits, sd.SamplingParams(temperature=2.0))
    assert hot[0] < torch.softmax(logits, -1)[0]


# --- (b) statistical test on tiny --------------------------------------------------------------

SAMPLING = dict(temperature=0.8, top_k=8)
N = 800


def first_spec_tokens(lm, n: int, drafter_from_exact=None, drafter: str | None = None, options: dict | None = None,
                      context: tuple[int, ...] = (1500, 2300, 77, 4100, 900, 1500, 2300)
                      ) -> tuple[dict[int, int], torch.Tensor]:
    """Run n independent speculative steps (k=2) from one fixed context and count the first emitted
    token; also return the exact distribution that AR sampling draws that token from. The drafter is
    built from that distribution (default: uniform over its top 8), or is the registry's `drafter`,
    prefilled by the prompt's forward like in decoding and copied fresh for every step."""
    cfg = sd.GenerationConfig(mode="spec", k=2, max_new_tokens=8, seed=0, **({"drafter": drafter} if drafter else {}),
                              drafter_options=options or {}, **SAMPLING)
    state = prepare(lm, list(context), cfg)
    target, stopper, piecer = Target(lm), Stopper(lm, cfg), Piecer(lm.tokenizer)
    prefill(target, state, cfg, stopper, piecer)
    logits = target.forward(copy.deepcopy(state.cache), [state.tokens[-1]]).logits[-1]
    exact = sampling.logits_to_probs(logits, cfg.sampling)  # what `ar` samples from at this position
    if drafter is None:
        state.drafter = (drafter_from_exact(exact) if drafter_from_exact else
                         UniformDrafter(torch.topk(exact, 8).indices.tolist(), len(exact)))
    counts: dict[int, int] = {}
    for _ in range(n):
        trial = copy.copy(state)
        trial.output_ids, trial.cache = list(state.output_ids), copy.deepcopy(state.cache)
        if drafter is not None:  # a model drafter keeps state (its cache, pending features): a fresh copy per
            # trial, sharing its modules (weights never change, and packed CPU weights cannot be copied)
            modules = {id(v): v for v in vars(state.drafter).values() if isinstance(v, torch.nn.Module)}
            trial.drafter = copy.deepcopy(state.drafter, modules)
        event = speculative_step(target, trial, cfg, stopper, piecer, 1)
        counts[event.emitted[0].id] = counts.get(event.emitted[0].id, 0) + 1
    return counts, exact


@pytest.mark.slow
def test_spec_sampling_matches_ar_distribution(tiny):
    counts, exact = first_spec_tokens(tiny, N)
    assert not chi2_rejects(counts, exact, N)


@pytest.mark.slow
def test_statistical_check_fails_for_always_accept(tiny, monkeypatch):
    """Negative control: accepting every draft yields q's distribution, which the test must catch."""
    monkeypatch.setattr(sampling, "acceptance_probability", lambda p, q, x: 1.0)
    counts, exact = first_spec_tokens(tiny, N)
    assert chi2_rejects(counts, exact, N)



# --- (c) the public check that learners and lessons use ---------------------------------------


def test_check_lossless_passes_the_engine_rule():
    result = sampling.check_lossless(sampling.verify_sampled)
    assert result.passed, [(c.p, c.q, c.observed) for c in result.cases if c.rejected]
    assert len(result.cases) == len(sampling.CHECK_CASES)
    assert all(c.total_variation < 0.05 for c in result.cases)


def test_check_lossless_accepts_tuple_verdicts():
    def as_tuple(draft, q, p, generator):
        verdict = sampling.verify_sampled(draft, q, p, generator)
        return verdict.accepted, verdict.next_token

    assert sampling.check_lossless(as_tuple, trials=2000).passed


def _always_accept(draft, q, p, generator):
    return len(draft), sampling.sample(p[len(draft)], generator)


def _resample_from_p(draft, q, p, generator):
    """The classic bug: after a rejection, sample from p instead of the residual max(0, p - q)."""
    for i, token in enumerate(draft):
        if torch.rand((), generator=generator).item() >= sampling.acceptance_probability(p[i], q[i], token):
            return i, sampling.sample(p[i], generator)
    return len(draft), sampling.sample(p[len(draft)], generator)


@pytest.mark.parametrize("wrong_rule", [_always_accept, _resample_from_p])
def test_check_lossless_fails_wrong_rules(wrong_rule):
    result = sampling.check_lossless(wrong_rule)
    assert not result.passed
    assert max(c.total_variation for c in result.cases) > 0.1
