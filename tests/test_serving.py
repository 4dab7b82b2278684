"""Serving many requests at once (specdec_core/serving): batched decoding is exact and lossless per
request, requests join and leave mid-batch, schedulers back off under load, and the look-ahead rule
that would bias sampling is caught. Every property test has a negative control that must fail.
"""
import json
import subprocess
import sys

import pytest
import torch

import specdec_core as sd
import specdec_core.sampling as sampling
from specdec_core.target import Target
from specdec_core import llama
from specdec_core.drafters import Draft
from specdec_core import batch as batch_module
from specdec_core.batch import RaggedCache, batch_forward
from specdec_core.serving import Candidate, CostTable, ServingEngine, make_scheduler, prefix_survival
from specdec_core.serving import engine as engine_module
from specdec_core.bench.loadtest import level_metrics, matched_throughput, workload
from specdec_core.bench.replay import replay
from specdec_core.serving.server import BatchServer
from conftest import UniformDrafter
from test_exactness import random_prompts  # ragged lengths, half of them repeating themselves

MAX_NEW = 20


def table(seconds) -> CostTable:
    """A synthetic cost table: seconds(rows, tokens) on a grid of 1..32 requests x 1..9 tokens each."""
    grid = [{"rows": b, "tokens": b * t, "seconds": seconds(b, b * t)} for b in (1, 2, 4, 8, 16, 32) for t in (1, 2, 3, 5, 9)]
    return CostTable(machine="synthetic", grid=grid)


IDLE = table(lambda rows, tokens: 1.0)  # a token row costs nothing: the weights are read anyway
SATURATED = table(lambda rows, tokens: float(tokens))  # every token row costs a whole forward's worth


def ar_ids(lm, prompt, max_new=MAX_NEW, **kw) -> list[int]:
    return sd.generate(lm, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=max_new, **kw)).token_ids


def serve(lm, prompts, configs, scheduler="fixed", costs=IDLE, **engine_kw):
    engine = ServingEngine(lm, make_scheduler(scheduler), costs, **engine_kw)
    requests = [engine.submit(p, c) for p, c in zip(prompts, configs)]
    engine.run()
    return requests, engine


# --- the packed forward -------------------------------------------------------------------------


def test_single_row_forward_is_the_one_request_forward_bit_for_bit(smol):
    """Concurrency 1 runs the same ops as llama.forward: prefill, one-token and verify steps."""
    prompt = smol.encode("Name three colours.")
    cache, ragged = Target(smol).new_cache(), RaggedCache(smol.model, slots=1, capacity=4)
    with torch.inference_mode():
        for ids in (prompt, [3, 4, 5, 6], [7]):
            expected, _ = llama.forward(smol.model, cache, torch.tensor([ids]))
            got, _ = batch_forward(smol.model, ragged, 0, [ids])
            assert torch.equal(got[0], expected[0].float())
    assert ragged.lengths[0] == len(prompt) + 5


def test_ragged_rows_match_their_own_forwards(tiny):
    """Rows of different past lengths and token counts in one packed forward: each row's logits equal
    its own single-request forward's (up to matmul rounding)."""
    prompts = random_prompts(4, seed=3)
    news = [[5], [6, 7, 8], [9, 10], [11, 12, 13, 14, 15]]
    ragged = RaggedCache(tiny.model, slots=2, capacity=8)  # both grow on demand
    with torch.inference_mode():
        for slot, p in enumerate(prompts):
            batch_forward(tiny.model, ragged, slot, [p], last_only=True)
        got, _ = batch_forward(tiny.model, ragged, 0, news)
        for p, new, logits in zip(prompts, news, got):
            cache = Target(tiny).new_cache()
            llama.forward(tiny.model, cache, torch.tensor([p]))
            expected, _ = llama.forward(tiny.model, cache, torch.tensor([new]))
            assert torch.allclose(logits, expected[0].float(), atol=1e-4)
    assert ragged.lengths[:4] == [len(p) + len(n) for p, n in zip(prompts, news)]


# --- greedy exactness ---------------------------------------------------------------------------

# (scheduler, drafter, k): n-gram drafts all-or-nothing runs, sim accepts 70 % of its drafts at random.
CASES = [("fixed", "ngram", 1), ("fixed", "ngram", 8), ("fixed", "sim", 4), ("hardware", "ngram", 8), ("confidence", "sim", 4),
         ("hardware", "early-exit", 4), ("budget", "ngram", 8)]
PROMPTS = random_prompts(7, seed=4)
LIMITS = [MAX_NEW - 3 * (i % 3) for i in range(len(PROMPTS))]  # requests leave at different steps


@pytest.fixture(scope="module")
def references(tiny) -> list[list[int]]:
    return [ar_ids(tiny, p, n) for p, n in zip(PROMPTS, LIMITS)]


@pytest.mark.parametrize("scheduler,drafter,k", CASES, ids=lambda c: str(c))
def test_batched_greedy_equals_ar_tiny(tiny, references, scheduler, drafter, k):
    """Ragged prompts, ragged acceptance, ragged lengths and a plain AR request in the same batch."""
    configs = [sd.GenerationConfig(mode="ar" if i == 3 else "spec", drafter=drafter, k=k, max_new_tokens=n,
                                   drafter_options={"early_exit_layers": 1}) for i, n in enumerate(LIMITS)]
    requests, engine = serve(tiny, PROMPTS, configs, scheduler)
    for r, expected in zip(requests, references):
        assert r.output_ids == expected, f"request {r.id} ({scheduler}, {drafter}, k={k}) diverged"
    assert max(s.rows for s in engine.steps) == len(PROMPTS)
    assert any(max(s.lengths) > 0 for s in engine.steps), "nothing was ever verified: the test would be vacuous"


class FeatureRecorder(sd.drafters.NgramDrafter):
    """An n-gram drafter that asks for hidden states, as heads and EAGLE will, and records what it gets."""

    hidden_layers = (1, 2)

    def reset(self, prompt_ids: list[int]) -> None:
        super().reset(prompt_ids)
        self.prefilled: list[dict] = []
        self.observed: list[dict] = []

    def prefill(self, hidden: dict) -> None:
        self.prefilled.append(hidden)

    def observe(self, accepted, emitted, hidden, verified=None) -> None:
        super().observe(accepted, emitted, hidden, verified)
        self.observed.append(hidden)


def test_prefill_hands_the_prompt_features_to_the_drafter(tiny, monkeypatch):
    """Drafters get the prompt's hidden states from the prefill forward itself (no extra target forward),
    in the one-request loop and in the serving engine alike, then every verify forward's."""
    prompt = PROMPTS[0]
    expected = Target(tiny).forward(Target(tiny).new_cache(), prompt, hidden_layers=(1, 2)).hidden
    config = sd.GenerationConfig(mode="spec", drafter="ngram-fixed", k=4, max_new_tokens=12)
    drafters = []

    def recorder(*_args) -> FeatureRecorder:
        drafters.append(FeatureRecorder(verify_ratios=None))
        return drafters[-1]

    monkeypatch.setattr(sd.generation, "make_drafter", recorder)
    result = sd.generate(tiny, prompt, config)
    requests, _ = serve(tiny, [prompt], [config], make_drafter=recorder)
    assert requests[0].output_ids == result.token_ids
    for drafter in drafters:
        assert len(drafter.prefilled) == 1 and set(drafter.prefilled[0]) == {1, 2}
        for layer in (1, 2):
            assert torch.equal(drafter.prefilled[0][layer], expected[layer])  # (prompt length, H), bit for bit
        assert drafter.observed and all(set(h) == {1, 2} for h in drafter.observed)
    # The same loops with a drafter that asks for nothing request nothing.
    assert sd.drafters.NgramDrafter.hidden_layers == ()


def test_model_drafters_propose_in_one_batched_forward(tiny):
    """early-exit's propose_batch drafts what its one-request propose drafts (tiny's peaked logits keep
    argmax stable across the batched kernels), with one forward per drafted position for all requests."""
    config = sd.GenerationConfig(mode="spec", drafter="early-exit", k=4, drafter_options={"early_exit_layers": 1})
    contexts = PROMPTS[:4]
    alone, together = [], [sd.drafters.make_drafter("early-exit", tiny, config) for _ in contexts]
    for c in contexts:
        d = sd.drafters.make_drafter("early-exit", tiny, config)
        d.reset(c)
        alone.append(d.propose(c, 4, config.sampling, torch.Generator()).tokens)
    for d, c in zip(together, contexts):
        d.reset(c)
    drafts = type(together[0]).propose_batch(together, contexts, [4, 2, 4, 0], [config.sampling] * 4, [torch.Generator()] * 4)
    assert [d.tokens for d in drafts] == [alone[0], alone[1][:2], alone[2], []]
    assert all(len(d.confidence) == len(d.tokens) for d in drafts)


def test_exactness_test_fails_without_the_mask(tiny, references, monkeypatch):
    """Negative control: attention that ignores the ragged mask (queries see stale and padded keys)."""
    original = llama.attention
    monkeypatch.setattr(batch_module.llama, "attention",
                        lambda q, k, v, mask, scale: original(q, k, v, None if mask is not None and mask.dim() == 4 else mask, scale))
    configs = [sd.GenerationConfig(mode="spec", drafter="ngram", k=4, max_new_tokens=n) for n in LIMITS]
    requests, _ = serve(tiny, PROMPTS, configs)
    assert any(r.output_ids != expected for r, expected in zip(requests, references))


def test_requests_join_and_leave_mid_batch(tiny):
    """Closed loop: a new request arrives whenever one finishes, so slots are freed and refilled."""
    prompts = random_prompts(9, seed=5)
    engine = ServingEngine(tiny, make_scheduler("hardware"), IDLE)
    config = lambda i: sd.GenerationConfig(mode="spec", drafter="ngram", k=4, max_new_tokens=6 + 3 * (i % 4))
    requests = [engine.submit(prompts[i], config(i)) for i in range(3)]
    while not engine.idle:
        for _ in engine.step():
            if len(requests) < len(prompts):
                requests.append(engine.submit(prompts[len(requests)], config(len(requests))))
    assert len(engine.finished) == len(prompts)
    for i, r in enumerate(requests):
        assert r.output_ids == ar_ids(tiny, prompts[i], config(i).max_new_tokens)
    assert engine.cache.lengths[:3] == [0, 0, 0]


def test_a_bad_request_is_refused_while_the_others_finish(tiny):
    engine = ServingEngine(tiny, make_scheduler("fixed"))
    good = engine.submit([5, 6, 7, 5, 6], sd.GenerationConfig(mode="spec", max_new_tokens=8))
    bad = engine.submit([5, 6, 7], sd.GenerationConfig(mode="spec", k=0))
    long = engine.submit(list(range(100, 100 + tiny.context_length)), sd.GenerationConfig(mode="ar"))
    engine.run()
    assert bad.error == "k must be between 1 and 16 (got 0)"
    assert "context" in long.error and "\n" not in long.error
    assert good.output_ids == ar_ids(tiny, [5, 6, 7, 5, 6], 8)


def test_batched_greedy_equals_ar_smollm2(smol):
    """Real prompts, concurrency 3, the hardware scheduler on the measured-shape synthetic table. If a
    near-tie ever flips under batched rounding, the message reports its margin."""
    prompts = [[{"role": "user", "content": t}] for t in (
        "Repeat exactly: the quick brown fox jumps over the lazy dog.", "What is the capital of France?")]
    configs = [sd.GenerationConfig(mode="spec", drafter="ngram", k=8, max_new_tokens=16)] * 2
    requests, _ = serve(smol, prompts, configs, "hardware", table(lambda rows, tokens: 0.03 + 0.002 * tokens))
    for r, p in zip(requests, prompts):
        expected = ar_ids(smol, p, 16)
        if r.output_ids != expected:
            i = next(i for i, (a, b) in enumerate(zip(r.output_ids, expected)) if a != b)
            cache = Target(smol).new_cache()
            logits, _ = llama.forward(smol.model, cache, torch.tensor([smol.encode(p) + expected[:i]]), last_only=True)
            top2 = torch.topk(logits[0, -1].float(), 2).values
            pytest.fail(f"request {r.id} diverged at token {i}; the target's top-2 logit margin there is {float(top2[0] - top2[1]):.2e}")


# --- sampling: lossless per row -----------------------------------------------------------------


SAMPLING = dict(temperature=0.8, top_k=8)
PROMPT = [1500, 2300, 77, 4100, 900, 1500, 2300]
N = 240


def second_token_distribution(lm) -> torch.Tensor:
    """Exact P(2nd new token) under AR sampling: sum over the first token t1 of p(t1) p(. | t1)."""
    params = sd.SamplingParams(**SAMPLING)
    cache = Target(lm).new_cache()
    first = sampling.logits_to_probs(Target(lm).forward(cache, PROMPT, last_only=True).logits[-1], params)
    out = torch.zeros_like(first)
    for t1 in torch.nonzero(first).flatten().tolist():
        c = Target(lm).new_cache()
        out += first[t1] * sampling.logits_to_probs(Target(lm).forward(c, PROMPT + [t1], last_only=True).logits[-1], params)
    return out


def batched_second_tokens(lm, monkeypatch, drafter: str | None = None, scheduler: str = "fixed") -> dict[int, int]:
    """N requests with their own seeds, 16 at a time in one batch, each: prefill + a spec step (k=2) + one more.
    drafter None: the uniform drafter above, every draft verified; else a real drafter under `scheduler`,
    which then chooses each request's verify length from its confidences (asserted to vary)."""
    exact = second_token_distribution(lm)
    if drafter is None:
        support = torch.topk(exact, 8).indices.tolist()
        monkeypatch.setattr(engine_module, "serving_drafter", lambda lm_, config, survival=None, costs=None, history=None: UniformDrafter(support, len(exact)))
    counts: dict[int, int] = {}
    lengths: set[int] = set()
    for start in range(0, N, 16):
        # max_new_tokens 4: after the prefill's token, 2 drafts still fit, so the second token is verified.
        configs = [sd.GenerationConfig(mode="spec", drafter=drafter or "ngram", k=2, max_new_tokens=4, seed=start + i, **SAMPLING)
                   for i in range(16)]
        requests, engine = serve(lm, [PROMPT] * 16, configs, scheduler)
        if drafter is None:
            assert engine.steps[0].lengths == [2] * 16  # every request verifies its drafts in the first step
        lengths.update(engine.steps[0].lengths)
        for r in requests:
            counts[r.output_ids[1]] = counts.get(r.output_ids[1], 0) + 1
    if drafter is not None:
        assert len(lengths) > 1, f"the {scheduler} scheduler never varied the verify length: the test would be vacuous"
    return counts


def test_batched_sampling_is_lossless_per_row(tiny, monkeypatch):
    counts = batched_second_tokens(tiny, monkeypatch)
    assert not sampling.chi2_rejects(counts, second_token_distribution(tiny), N)


def test_batched_sampling_check_fails_for_always_accept(tiny, monkeypatch):
    monkeypatch.setattr(sampling, "acceptance_probability", lambda p, q, x: 1.0)
    counts = batched_second_tokens(tiny, monkeypatch)
    assert sampling.chi2_rejects(counts, second_token_distribution(tiny), N)


@pytest.mark.parametrize("broken", [False, True], ids=["lossless", "always-accept-is-caught"])
def test_block_drafts_under_the_confidence_scheduler_sample_losslessly(tiny, monkeypatch, broken):
    """The block drafter's calibrated confidences choose how many of its drafts each request verifies
    (0, 1 or 2 here): the second token still follows the target exactly; always accepting is caught."""
    if broken:
        monkeypatch.setattr(sampling, "acceptance_probability", lambda p, q, x: 1.0)
    counts = batched_second_tokens(tiny, monkeypatch, drafter="block", scheduler="confidence")
    assert sampling.chi2_rejects(counts, second_token_distribution(tiny), N) == broken


# --- schedulers ---------------------------------------------------------------------------------


def candidates(confidences: list[list[float]], limit: int = 8) -> list[Candidate]:
    return [Candidate(Draft([1] * len(c), None, confidence=c), limit) for c in confidences]


def test_hardware_scheduler_backs_off_when_saturated_and_drafts_long_when_idle():
    batch = candidates([[0.9] * 8, [0.6] * 8, [0.99] * 8])
    hardware = make_scheduler("hardware")
    assert hardware.verify_lengths(batch, SATURATED, 0.0) == [0, 0, 0]
    assert hardware.verify_lengths(batch, IDLE, 0.0) == [8, 8, 8]
    # In between, the surest drafts are verified first, the weakest request verifies fewest.
    middle = table(lambda rows, tokens: rows + 0.4 * (tokens - rows))
    lengths = hardware.verify_lengths(batch, middle, 0.0)
    assert lengths[2] >= lengths[0] >= lengths[1] and sum(lengths) > 0
    assert make_scheduler("fixed").verify_lengths(batch, SATURATED, 0.0) == [8, 8, 8]
    assert make_scheduler("confidence", 0.5).verify_lengths(batch, None, 0.0) == [6, 1, 8]


def test_the_saturated_engine_takes_plain_steps(tiny):
    prompts = random_prompts(4, seed=2)
    configs = [sd.GenerationConfig(mode="spec", drafter="ngram", k=4, max_new_tokens=12)] * 4
    _, engine = serve(tiny, prompts, configs, "hardware", SATURATED)
    assert all(max(s.lengths) == 0 for s in engine.steps)
    _, engine = serve(tiny, prompts, configs, "hardware", SATURATED, force_ar=False)
    _, forced = serve(tiny, prompts, configs, "fixed", IDLE, force_ar=True)
    assert all(max(s.lengths) == 0 for s in forced.steps)  # the rollback switch


# The look-ahead case. Draft x1 ~ q1 and x2 ~ q2; the confidence of position 2 depends on x1 (as a real
# drafter's top probability does). Cost: verifying 1 draft does not pay, verifying 2 pays only when
# the second one is likely. p is the same at both positions, so the target's joint is p x p.
P = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
Q1 = torch.tensor([0.2, 0.6, 0.2], dtype=torch.float64)
Q2 = torch.tensor([0.3, 0.3, 0.4], dtype=torch.float64)
LOOKAHEAD_COSTS = CostTable("synthetic", [{"rows": 1, "tokens": t, "seconds": s} for t, s in ((1, 1.0), (2, 1.7), (3, 1.75))])
STEP_COSTS = CostTable("synthetic", [{"rows": 1, "tokens": t, "seconds": s} for t, s in ((1, 1.0), (2, 1.3), (3, 1.35))])


def lookahead_argmax(candidate: Candidate, costs: CostTable) -> int:
    """The biased rule: the length with the best expected tokens per second over ALL lengths."""
    survival = prefix_survival(candidate.draft, candidate.limit)
    rate = lambda n: (1 + sum(survival[:n])) / costs.verify_s(1, 1 + n)
    return max(range(len(survival) + 1), key=rate)


def joint_counts(choose_length, costs: CostTable, trials: int = 6000, seed: int = 0) -> dict[int, int]:
    generator = torch.Generator().manual_seed(seed)
    counts: dict[int, int] = {}
    for _ in range(trials):
        x1, x2 = sampling.sample(Q1, generator), sampling.sample(Q2, generator)
        draft = Draft([x1, x2], torch.stack([Q1, Q2]), confidence=[float(Q1.max()), 0.95 if x1 == 1 else 0.05])
        n = choose_length(Candidate(draft, 2), costs)
        verdict = sampling.verify_sampled(draft.tokens[:n], draft.q[:n], torch.stack([P] * (n + 1)), generator)
        emitted = draft.tokens[:verdict.accepted] + [verdict.next_token]
        if len(emitted) < 2:  # the next step samples the second token from p (nothing drafted)
            emitted.append(sampling.sample(P, generator))
        key = emitted[0] * 3 + emitted[1]
        counts[key] = counts.get(key, 0) + 1
    return counts


JOINT = torch.outer(P, P).flatten()


def hardware_length(candidate: Candidate, costs: CostTable) -> int:
    return make_scheduler("hardware").verify_lengths([candidate], costs, 0.0)[0]


def test_lookahead_argmax_biases_sampling():
    assert sampling.chi2_rejects(joint_counts(lookahead_argmax, LOOKAHEAD_COSTS), JOINT, 6000)


@pytest.mark.parametrize("costs", [LOOKAHEAD_COSTS, STEP_COSTS], ids=["lookahead-case", "drafting-case"])
def test_the_hardware_scheduler_keeps_sampling_lossless(costs):
    counts = joint_counts(hardware_length, costs)
    assert not sampling.chi2_rejects(counts, JOINT, 6000)


def test_the_budget_scheduler_keeps_sampling_lossless():
    """Variant (b): each trial's budget comes from the trial before (an independent earlier step), so
    it varies (1 or 2 drafts under STEP_COSTS) but never with the current draft: lossless. The same
    allocation with the budget taken from the current step's own look-ahead optimum is biased."""
    from specdec_core.serving.schedulers import allocate

    budget = make_scheduler("budget")
    budgets: set[int] = set()

    def deployed(candidate: Candidate, costs: CostTable) -> int:
        if budget.per_request is not None:
            budgets.add(round(budget.per_request))
        return budget.verify_lengths([candidate], costs, 0.0)[0]

    assert not sampling.chi2_rejects(joint_counts(deployed, STEP_COSTS), JOINT, 6000)
    assert budgets == {1, 2}

    def from_this_step(candidate: Candidate, costs: CostTable) -> int:
        return allocate([prefix_survival(candidate.draft, candidate.limit)], lookahead_argmax(candidate, costs))[0]

    assert sampling.chi2_rejects(joint_counts(from_this_step, LOOKAHEAD_COSTS), JOINT, 6000)


def test_allocate_gives_prefixes_to_the_surest_drafts():
    from specdec_core.serving.schedulers import allocate

    survival = [[0.9, 0.9, 0.5], [0.95, 0.2], [0.8, 0.8, 0.8]]
    assert allocate(survival, 0) == [0, 0, 0]
    assert allocate(survival, 3) == [2, 1, 0]  # 0.95, then the tied 0.9s (earlier position first)
    assert allocate(survival, 6) == [2, 1, 3]
    assert allocate(survival, 99) == [3, 2, 3]


def test_the_drafting_case_really_varies_its_length():
    """Makes the test above meaningful: with STEP_COSTS the scheduler verifies 1 or 2 drafts, by x1."""
    lengths = {hardware_length(Candidate(Draft([x, 0], None, confidence=[0.6, 0.95 if x == 1 else 0.05]), 2), STEP_COSTS)
               for x in range(3)}
    assert lengths == {1, 2}


# --- metrics, workload, matched throughput, CLI --------------------------------------------------


def test_metrics_add_up(tiny):
    prompts = random_prompts(6, seed=7)
    configs = [sd.GenerationConfig(mode="spec", drafter="ngram", k=4, max_new_tokens=MAX_NEW)] * 6
    requests, engine = serve(tiny, prompts, configs, "hardware", IDLE)
    for r in requests:
        assert sum(s.emitted for s in r.records) + 1 == len(r.output_ids)
        assert r.state.target_forwards == len(r.records)
        assert all(s.accepted <= s.verified <= s.drafted for s in r.records)
    # Concurrency 6 with 6 requests: no steady state to cut, so every request counts.
    m = level_metrics(requests, len(requests), engine)
    records = [s for r in requests for s in r.records]
    assert m["num_accepted_tokens"] <= m["num_draft_tokens"] and m["num_draft_tokens"] > 0
    assert m["tau"] == pytest.approx(sum(s.emitted for s in records) / len(records))
    assert sum(m["scheduler_decisions"].values()) == len(records)
    assert 0 <= m["rollback_rate"] <= 1 and m["kv_entries_discarded"] == m["num_draft_tokens"] - m["num_accepted_tokens"]


def test_steady_state_cuts_by_arrival_so_every_scheme_keeps_the_same_prompts():
    """Closed loop, C = 2, 8 requests: the steady ones are arrivals 2..5 whatever their speeds. A cut by
    completion would drop each scheme's slowest prompts instead (here: the 'slow' ones), flattering its median."""
    from specdec_core.bench.loadtest import speed_metrics, steady_state
    from specdec_core.bench.replay import _SimRequest

    def run(slow_label: str) -> list:
        requests, free, now = [], [0.0, 0.0], 0.0
        for i in range(8):
            label = "slow" if i % 2 else "fast"
            duration = 8.0 if label == slow_label else 1.0
            start = min(free)
            slot = free.index(start)
            free[slot] = start + duration
            requests.append(_SimRequest(i, start, start + duration, [(start + 0.1, 1), (start + duration, 9)], label))
        return requests

    for slow in ("slow", "fast"):
        requests = run(slow)
        steady, start, end = steady_state(requests, 2)
        assert [r.id for r in steady] == [r.id for r in sorted(requests, key=lambda r: r.arrival_s)[2:6]]
        assert start == steady[0].arrival_s and end == sorted(r.arrival_s for r in requests)[6]
        m = speed_metrics(requests, 2, {"fast": "copy", "slow": "chat"})
        assert set(m["per_user_by_category"]) == {"copy", "chat"} and m["steady_requests"] == 4
    # Too short a run to leave 2 x C out: all of them, first arrival to last completion.
    assert len(steady_state(run("slow")[:4], 2)[0]) == 4


def test_workload_alternates_categories():
    cases = workload()
    assert len(cases) == 22 and {c.category for c in cases} == {"chat", "qa", "copy"}
    assert all(len({c.category for c in cases[i:i + 5]}) >= 2 for i in range(len(cases) - 4))
    assert [c.id for c in workload()] == [c.id for c in cases]  # one fixed seeded order


def test_matched_throughput_interpolates_and_needs_three_levels():
    runs = [{"scheme": "ar", "concurrency": c, "aggregate_tok_s": a, "per_user_tok_s": u}
            for c, a, u in ((1, 10, 10), (2, 18, 9), (4, 30, 7.5), (8, 40, 5))]
    runs += [{"scheme": "spec-hardware", "concurrency": c, "aggregate_tok_s": a, "per_user_tok_s": u}
             for c, a, u in ((1, 14, 14), (2, 24, 12), (4, 36, 9), (8, 44, 5.5))]
    result = matched_throughput(runs, "spec-hardware")
    assert [l["concurrency"] for l in result["levels"]] == [2, 4, 8]  # 10 tok/s lies below the scheme's range
    assert result["levels"][0]["scheme_per_user_tok_s"] == pytest.approx(14 + (12 - 14) * (18 - 14) / (24 - 14))
    assert result["per_user_speedup"] == pytest.approx(sorted(l["ratio"] for l in result["levels"])[1])
    assert matched_throughput(runs[:2] + runs[4:6], "spec-hardware")["per_user_speedup"] is None


@pytest.mark.slow
def test_load_test_cli_and_replay(tmp_path):
    out = tmp_path / "load.json"
    cmd = [sys.executable, "-m", "specdec_core", "load-test", "--model", "tiny", "--concurrency", "1,2,3",
           "--requests-per-level", "2", "--max-new-tokens", "8", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert set(result) >= {"environment", "runs", "matched_throughput", "matched_throughput_vs"}
    run_keys = {"scheme", "drafter", "k", "concurrency", "num_requests", "per_user_tok_s", "ttft_s", "p50_itl_s",
                "p95_itl_s", "aggregate_tok_s", "mean_verify_tokens", "tau", "identical_to_ar"}
    assert all(run_keys <= set(r) for r in result["runs"]) and len(result["runs"]) == 12
    assert all(r["identical_to_ar"] == f"{r['num_requests']}/{r['num_requests']}" for r in result["runs"])
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps(result["cost_table"]))
    sim = tmp_path / "sim.json"
    done = subprocess.run([sys.executable, "-m", "specdec_core", "load-test", "--replay", str(out), "--costs", str(costs),
                           "--max-new-tokens", "8", "--out", str(sim)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    replayed = json.loads(sim.read_text())
    assert replayed["simulated"] and all(r["simulated"] for r in replayed["runs"])


@pytest.mark.parametrize("args,needle", [(["--schemes", "ar,warp"], "warp"), (["--concurrency", "0"], "concurrency"),
                                         (["--replay", "missing.json"], "missing.json")])
def test_load_test_bad_input_is_one_line(tmp_path, capsys, args, needle):
    from specdec_core.cli import main

    assert main(["load-test", "--model", "tiny", *args, "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.strip().count("\n") == 0 and needle in err


def test_replay_walks_recorded_steps():
    """Two recorded requests; under an idle table the hardware replay verifies whole drafts and needs
    as many steps as the record, under a saturated one it takes one token per step."""
    recorded = {"k": 4, "drafter": "ngram", "levels": {"1": [
        {"prompt_tokens": 5, "steps": [[4, 4, [0.9] * 4], [4, 1, [0.9] * 4], [0, 0, []], [4, 4, [0.9] * 4]]},
        {"prompt_tokens": 5, "steps": [[4, 4, [0.9] * 4], [4, 1, [0.9] * 4], [0, 0, []], [4, 4, [0.9] * 4]]}]}}
    idle = {r["scheme"]: r for r in replay(recorded, IDLE, max_new_tokens=64)}
    slow = {r["scheme"]: r for r in replay(recorded, SATURATED, max_new_tokens=64)}
    assert idle["spec-hardware"]["per_user_tok_s"] > idle["ar"]["per_user_tok_s"]
    assert slow["spec-hardware"]["per_user_tok_s"] == pytest.approx(slow["ar"]["per_user_tok_s"])


# --- the app's shared server ---------------------------------------------------------------------


def test_batch_server_gives_each_caller_its_single_request_result(tiny):
    import threading

    server = BatchServer(tiny)
    prompts = random_prompts(6, seed=11)
    configs = [sd.GenerationConfig(mode=("ar", "spec")[i % 2], drafter="ngram", k=4, max_new_tokens=16) for i in range(6)]
    results = {}
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, server.generate(prompts[i], configs[i])))
               for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(6):
        alone = sd.generate(tiny, prompts[i], configs[i])
        assert results[i].token_ids == alone.token_ids
        assert [len(s.emitted) for s in results[i].trace.steps] == [len(s.emitted) for s in alone.trace.steps]
    assert server.forwards_shared > 0
    with pytest.raises(sd.SpecDecError, match="batch server decodes"):
        list(server.stream([5, 6], sd.GenerationConfig(mode="jacobi")))


def test_cost_table_is_monotone_in_tokens_and_interpolates():
    from specdec_core.serving.costs import monotone

    assert monotone([0.13, 0.10, 0.12, 0.13]) == pytest.approx([0.115, 0.115, 0.12, 0.13])
    assert monotone([1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0]
    linear = table(lambda rows, tokens: 0.5 + 0.1 * tokens)
    assert linear.verify_s(3, 7) == pytest.approx(1.2)  # between row counts 2 and 4, off-grid tokens
    assert linear.verify_s(64, 64) == pytest.approx(2 * (0.5 + 0.1 * 32))  # past the grid: scaled by rows


def test_requests_arriving_later_wait_for_their_arrival(tiny):
    """Open loop: requests with future arrival times are admitted only once they arrive."""
    engine = ServingEngine(tiny, make_scheduler("fixed"))
    start = engine.clock()
    prompts = random_prompts(3, seed=9)
    config = sd.GenerationConfig(mode="spec", drafter="ngram", k=4, max_new_tokens=6)
    requests = [engine.submit(p, config, arrival_s=start + 0.2 * i) for i, p in enumerate(prompts)]
    engine.run()
    for r, p in zip(requests, prompts):
        assert r.deliveries[0][0] >= r.arrival_s and r.output_ids == ar_ids(tiny, p, 6)
