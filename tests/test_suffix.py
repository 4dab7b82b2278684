"""The recipe book (drafters/suffix.py): its implicit suffix tree against one built node by node, its
proposals, the history's bound, and exactness in the decode loop."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from specdec_core.drafters import suffix
from specdec_core.drafters.suffix import SuffixDrafter, SuffixHistory, SuffixIndex, SuffixOptions


def explicit_tree(sequences: list[list[int]], depth: int) -> dict:
    """The depth-limited suffix tree stored node by node: string -> count of its occurrences. SEEN[string]:
    where its first and its last occurrence end, the sequences laid end to end (a streaming tree's order)."""
    counts: dict[tuple[int, ...], int] = {}
    SEEN.clear()
    offset = 0
    for seq in sequences:
        for start in range(len(seq)):
            for end in range(start + 1, min(len(seq), start + depth) + 1):
                key = tuple(seq[start:end])
                counts[key] = counts.get(key, 0) + 1
                first, _ = SEEN.get(key, (offset + end, 0))
                SEEN[key] = (min(first, offset + end), offset + end)
        offset += len(seq) + 1
    return counts


SEEN: dict[tuple[int, ...], tuple[int, int]] = {}


def tie_rank(key: tuple[int, ...], count: int) -> int:
    """Among children of equal count, higher ranks first: seen once, the first met; more often, the last to
    reach its count (arctic-inference moves a child to the front of its count's group as it grows)."""
    first, last = SEEN[key]
    return last if count > 1 else -first


def explicit_chain(counts: dict, context: list[int], k: int, options: SuffixOptions) -> tuple[list[int], float, int]:
    """The paper's path speculation on the explicit tree cut at depth D: best score over match lengths
    m < len(context) (tie: longer), at most D − m tokens past the match."""
    best: tuple[list[int], float, int] = ([], -1.0, 0)
    for m in range(1, min(options.suffix_depth, len(context) - 1) + 1):
        node = tuple(context[-m:])
        if node not in counts:
            break
        budget = min(k, int(m * options.suffix_factor + options.suffix_offset + 1e-6), options.suffix_depth - m)
        drafted, prob, score = [], 1.0, 0.0
        while len(drafted) < budget:
            here = node + tuple(drafted)
            children = [(counts[here + (t,)], tie_rank(here + (t,), counts[here + (t,)]), t)
                        for t in range(10) if here + (t,) in counts]
            if not children:
                break
            count, _, token = max(children)  # the most frequent; a tie: as arctic-inference orders them
            if prob * count / counts[here] < options.suffix_min_prob:
                break
            prob *= count / counts[here]
            drafted.append(token)
            score += prob
        if drafted and score >= best[1]:
            best = (drafted, score, m)
    return best


def random_corpus(rng: random.Random) -> list[list[int]]:
    # a small alphabet and repeated phrases, so that long matches and branching both occur
    phrases = [[rng.randrange(10) for _ in range(rng.randrange(2, 6))] for _ in range(4)]
    return [[t for _ in range(rng.randrange(3, 8)) for t in rng.choice(phrases) + [rng.randrange(10)]]
            for _ in range(rng.randrange(1, 4))]


def index_of(sequences: list[list[int]]) -> SuffixIndex:
    index = SuffixHistory(max_tokens=10_000)
    for seq in sequences:
        index.add(seq)
    return index


@pytest.mark.parametrize("seed", range(40))
def test_the_implicit_tree_counts_what_an_explicit_one_stores(seed):
    rng = random.Random(seed)
    sequences = random_corpus(rng)
    depth = rng.randrange(2, 7)
    counts = explicit_tree(sequences, depth)
    tokens = index_of(sequences).tokens
    context = rng.choice(sequences)[: rng.randrange(1, 12)] or [0]
    for m, ends in suffix._ends(tokens, context, depth):
        assert ends.size == counts[tuple(context[-m:])]
        if m < depth:  # the explicit tree stops at its depth; the implicit one reads on
            assert {t: c.size for t, c in suffix._children(tokens, ends)} == {
                t: counts[tuple(context[-m:]) + (t,)] for t in range(10) if tuple(context[-m:]) + (t,) in counts}


@pytest.mark.parametrize("seed", range(40))
def test_chain_proposals_follow_the_papers_rule(seed):
    rng = random.Random(seed)
    sequences = random_corpus(rng)
    options = SuffixOptions(suffix_depth=6, suffix_factor=rng.choice([0.5, 1.0, 2.0]),
                            suffix_min_prob=rng.choice([0.0, 0.1, 0.3]))
    context = rng.choice(sequences)[: rng.randrange(2, 14)]
    got = index_of(sequences).propose(context, 4, options, tree=False, index="history")
    drafted, score, m = explicit_chain(explicit_tree(sequences, 64), context, 4, options)
    assert (got.tokens, got.match) == (drafted, m) if got else drafted == []
    if got:
        assert got.score == pytest.approx(score)


def test_a_match_that_forgets_the_token_before_is_caught():
    """Negative check: an _ends that does not filter by the preceding token counts too much."""
    sequences = [[1, 2, 3, 1, 2, 4, 5, 2, 3]]
    counts = explicit_tree(sequences, 4)
    tokens = index_of(sequences).tokens

    def careless(tokens, context, depth):
        ends = np.flatnonzero(tokens == context[-1]) + 1
        for m in range(1, depth + 1):
            yield m, ends  # never narrowed

    mismatched = [m for m, ends in careless(tokens, [1, 2], 2) if ends.size != counts.get(tuple([1, 2][-m:]), 0)]
    assert mismatched == [2]


def test_trees_come_parents_first_and_hold_the_best_paths():
    index = index_of([[1, 2, 3], [1, 2, 4], [1, 2, 3], [1, 5, 6]])
    got = index.propose([9, 1], 3, SuffixOptions(suffix_factor=3.0, suffix_min_prob=0.1), tree=True, index="history")
    assert got.tokens[0] == 2 and got.parents[0] == -1  # 1 -> 2 in 3 of 4 occurrences
    assert all(p < i for i, p in enumerate(got.parents))
    assert set(zip(got.tokens, got.parents)) >= {(2, -1), (5, -1)}  # the runner-up child of the root's node
    assert got.score == pytest.approx(sum(_path_probs(got)))


def _path_probs(p):
    probs = []
    for conf, parent in zip(p.confidence, p.parents):
        probs.append(conf * (probs[parent] if parent >= 0 else 1.0))
    return probs


def test_the_history_keeps_its_bound_and_evicts_the_oldest_request():
    history = SuffixHistory(max_tokens=10)
    history.add([1, 2, 3, 4])
    history.add([5, 6, 7, 8])
    history.add([9, 9, 9])
    assert history.size == 7 and 1 not in history.tokens.tolist()
    history.add(list(range(20)))  # longer than the bound: only its last 10 tokens, alone
    assert history.size == 10 and history.tokens.tolist()[:10] == list(range(10, 20))


def test_a_drafter_recalls_an_earlier_answer_only_once_it_finished():
    history = SuffixHistory()
    first = SuffixDrafter(SuffixOptions(suffix_factor=4.0), history)
    first.reset([7, 7])
    first.observe(0, [1, 2, 3, 4, 5], {})
    second = SuffixDrafter(SuffixOptions(suffix_factor=4.0), history)
    second.reset([8, 1, 2])
    params, generator = None, None
    assert second.propose([8, 1, 2], 3, params, generator).tokens == []  # not finished: not in the history
    first.finish()
    draft = second.propose([8, 1, 2], 3, params, generator)
    assert draft.tokens == [3, 4, 5] and draft.q is None and second.last.index == "history"


# --- the history's lifetime: generate, the serving engine, bench ------------------------------------------------
def _spec(**overrides):
    from specdec_core.decode import GenerationConfig

    return GenerationConfig(mode="spec", drafter="suffix", k=4, max_new_tokens=24, seed=0,
                            drafter_options={"suffix_factor": 4.0}, **overrides)


def test_generate_feeds_a_shared_history_and_recalls_it_on_the_next_request(tiny):
    from specdec_core.generation import generate

    history = SuffixHistory()
    first = generate(tiny, "Say the alphabet.", _spec(), history=history)
    assert history.tokens.tolist()[:-1] == first.token_ids  # the finished output joined it (then a separator)
    second = generate(tiny, "Say the alphabet.", _spec(), history=history)
    assert second.token_ids == first.token_ids  # greedy: what the target says, whatever was recalled
    # the second request drafts its whole answer from the first's: fewer target forwards, all drafts accepted
    assert second.metrics["target_forwards"] < first.metrics["target_forwards"]
    assert second.metrics["num_accepted_tokens"] > first.metrics["num_accepted_tokens"]
    alone = generate(tiny, "Say the alphabet.", _spec())  # no history given: nothing carried between requests
    assert alone.metrics["target_forwards"] == first.metrics["target_forwards"]


def test_a_shared_history_counts_once_not_in_every_requests_memory():
    shared = SuffixHistory()
    shared.add(list(range(1000)))
    borrowed, owned = SuffixDrafter(history=shared), SuffixDrafter()
    owned.history.add(list(range(1000)))
    for drafter in (borrowed, owned):
        drafter.reset([1, 2, 3])
    assert owned.memory_bytes() - borrowed.memory_bytes() == shared.nbytes() > 0


def test_the_serving_engine_feeds_one_history_with_every_finished_request(tiny):
    from specdec_core.serving.engine import ServingEngine
    from specdec_core.serving.schedulers import make_scheduler

    history = SuffixHistory()
    engine = ServingEngine(tiny, make_scheduler("fixed"), history=history)
    for prompt in ("Say the alphabet.", "Count to ten.", "Say the alphabet."):
        engine.submit([{"role": "user", "content": prompt}], _spec())
    requests = engine.run()
    assert not any(r.error for r in requests)
    assert history.size == sum(len(r.output_ids) for r in requests)
    alone = ServingEngine(tiny, make_scheduler("fixed"))  # none shared: each request's drafter keeps its own
    alone.submit([{"role": "user", "content": "Say the alphabet."}], _spec())
    assert alone.run()[0].output_ids == requests[0].output_ids and alone.history is None


def test_bench_histories_are_fresh_or_one_per_repeat_and_a_resume_rebuilds_them():
    from specdec_core.bench.modes import parse_mode
    from specdec_core.bench.run import Histories
    from specdec_core.decode import GenerationConfig

    suffix_mode, ngram_mode = parse_mode("spec:suffix"), parse_mode("spec:ngram")
    point = GenerationConfig(mode="ar", drafter="ngram", k=4)
    assert Histories("fresh").get(suffix_mode, point, 0) is None
    run = Histories("run")
    assert run.get(ngram_mode, point, 0) is None  # only the suffix drafter keeps one
    kept = run.get(suffix_mode, point, 0)
    assert run.get(suffix_mode, point, 0) is kept and run.get(suffix_mode, point, 1) is not kept
    rows = [{"mode": "spec:suffix", "k": 4, "temperature": 0.0, "repeat": 0, "token_ids": [1, 2, 3, 4, 5],
             "turn_tokens": [2, 3]},
            {"mode": "spec:ngram", "k": 4, "temperature": 0.0, "repeat": 0, "token_ids": [9, 9], "turn_tokens": [2]}]
    resumed = Histories("run")
    resumed.replay(rows, [suffix_mode, ngram_mode], lambda k, t: GenerationConfig(mode="ar", drafter="ngram", k=k, temperature=t))
    # each turn joined on its own, as when the row was first run; the n-gram row fed nothing
    assert resumed.get(suffix_mode, point, 0).tokens.tolist() == [1, 2, -1, 3, 4, 5, -1]


def test_the_first_token_no_drafter_observes_joins_the_request_and_its_history():
    history = SuffixHistory()
    drafter = SuffixDrafter(history=history)
    drafter.reset([5, 6])
    drafter.propose([5, 6, 7], 4, None, None)  # 7 came from the prompt's forward
    drafter.observe(0, [8], {})
    drafter.finish()
    assert drafter.own.tokens.tolist()[:4] == [5, 6, 7, 8] and history.tokens.tolist() == [7, 8, -1]


def test_a_classroom_asks_every_variant_once_with_learners_in_flight_on_different_groups():
    from specdec_core.bench.classroom import classroom, learner_order
    from specdec_core.errors import SpecDecError
    from specdec_core.suite import PromptCase

    order = classroom(8)
    groups = {c.category for c in order}
    assert len(order) == 8 * len(groups) and len({c.turns[0] for c in order}) == len(order)  # none asked twice
    for r in range(len(groups)):  # each round: every learner once, the learners spread over the groups
        round_ = order[r * 8:(r + 1) * 8]
        assert sorted(c.id.split("@")[1] for c in round_) == sorted(f"learner-{j}" for j in range(1, 9))
        assert {c.category for c in round_} == groups
    two = learner_order([PromptCase("a1", "a", ["x"]), PromptCase("b1", "b", ["y"])], 3)
    assert [c.id for c in two] == ["a1@learner-1", "b1@learner-2", "a1@learner-3",
                                   "b1@learner-1", "a1@learner-2", "b1@learner-3"]  # more learners than variants: repeats
    with pytest.raises(SpecDecError, match="one at a time"):
        learner_order([PromptCase("m", "a", ["x", "y"])], 2)


@pytest.mark.parametrize("argv, message", [
    (["bench", "--endpoint", "http://127.0.0.1:9", "--history", "run"], "--history"),
    (["load-test", "--endpoint", "http://127.0.0.1:9", "--learners", "4"], "--learners"),
    (["load-test", "--learners", "-1"], "learners must be"),
])
def test_history_options_refuse_what_they_cannot_do(argv, message, tmp_path, capsys):
    from conftest import run_main

    code, _, err = run_main(capsys, *argv, "--out", str(tmp_path / "x.json"))
    assert code == 2 and message in err and "Traceback" not in err


def test_bench_reports_tau_per_turn_over_the_sessions_that_reach_it():
    from specdec_core.bench.run import _tau_by_turn

    assert _tau_by_turn([{"turn_tau": [1.0, 2.0, 3.0]}, {"turn_tau": [2.0, 4.0]}, {"turn_tau": None}]) == [1.5, 3.0, 3.0]
    assert _tau_by_turn([{"turn_tau": [1.2]}, {"turn_tau": [1.4]}]) is None  # single-turn prompts only


# --- the peer: arctic-inference's suffix tree (`make arctic`) ---------------------------------------------------
def _arctic_tree_class():
    from specdec_core.drafters.suffix_arctic import arctic_cache_class
    from specdec_core.errors import SpecDecError

    try:
        arctic_cache_class()
    except SpecDecError:
        pytest.skip("arctic-inference's suffix decoding is not built here (make arctic)")
    from arctic_inference.suffix_decoding._C import SuffixTree

    return SuffixTree


@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_the_lab_index_proposes_what_arctic_s_suffix_tree_proposes(tree):
    """The same sequences in both, the same settings, 2,000 contexts over 200 small-alphabet corpora (ties
    everywhere): the same tokens and match length at >= 95 % of them, and there arctic's path probabilities
    equal the products of the lab's conditional ones. What differs is the order of equal-count children
    deep in arctic's compressed tree and of equal-probability nodes in its heap."""
    SuffixTree = _arctic_tree_class()
    same = total = 0
    for seed in range(200):
        rng = random.Random(seed)
        sequences = random_corpus(rng)
        options = SuffixOptions(suffix_depth=rng.randrange(3, 9), suffix_factor=rng.choice([1.0, 2.0]),
                                suffix_offset=rng.choice([0.0, 1.0]), suffix_min_prob=rng.choice([0.0, 0.1, 0.3]))
        peer = SuffixTree(options.suffix_depth)
        for i, seq in enumerate(sequences):
            peer.extend(i, seq)
        ours = index_of(sequences)
        for _ in range(10):
            context = rng.choice(sequences)[: rng.randrange(2, 14)]
            k = rng.randrange(1, 9)
            mine = ours.propose(context, k, options, tree, "history")
            theirs = peer.speculate(context[-options.suffix_depth:], k, options.suffix_factor, options.suffix_offset,
                                    options.suffix_min_prob, tree)
            total += 1
            if mine is None:
                same += not theirs.token_ids
            elif list(theirs.token_ids) == mine.tokens and theirs.match_len == mine.match:
                probs = _path_probs(mine) if tree else [math.prod(mine.confidence[:i + 1]) for i in range(len(mine.tokens))]
                assert list(theirs.probs) == pytest.approx(probs, rel=1e-5)
                same += 1
    assert same / total >= 0.95, f"{same} of {total} proposals identical"


# --- mix: the recipe book as one more source --------------------------------------------------------------------
def _mix_spec(mix_suffix: bool):
    from specdec_core.decode import GenerationConfig

    return GenerationConfig(mode="spec", drafter="mix", k=4, max_new_tokens=24, seed=0,
                            drafter_options={"suffix_factor": 4.0, "mix_suffix": mix_suffix})


def _fixed_costs(monkeypatch):
    """Fixed costs: which source pays must not hang on how busy this machine is while it measures."""
    import specdec_core as sd
    from specdec_core.costmodel import DraftCosts
    from specdec_core.drafters import MIX_MODELS

    costs = DraftCosts({d: 1.0 + 0.05 * d for d in range(33)}, {name: 0.05 for name in MIX_MODELS})
    monkeypatch.setattr(sd.generation, "drafter_costs", lambda lm, name, sized_tree=False, options=None: costs)


def test_mix_recalls_an_earlier_answer_through_its_recipe_book_and_stays_exact(tiny, monkeypatch):
    from dataclasses import replace

    from specdec_core.generation import generate

    _fixed_costs(monkeypatch)
    prompt = "Name the planets in order."
    reference = generate(tiny, prompt, replace(_mix_spec(False), mode="ar"))
    history = SuffixHistory()
    first = generate(tiny, prompt, _mix_spec(True), history=history)
    assert history.tokens.tolist()[:-1] == first.token_ids  # mix.finish handed the finished answer on
    second = generate(tiny, prompt, _mix_spec(True), history=history)
    assert first.token_ids == second.token_ids == reference.token_ids
    sources = [s.draft_source for s in second.trace.steps if s.drafted]
    assert any(s.startswith("suffix:history:") for s in sources)  # recalled from the first answer
    assert second.metrics["target_forwards"] < first.metrics["target_forwards"]
    without = generate(tiny, prompt, _mix_spec(False), history=SuffixHistory())
    assert not any((s.draft_source or "").startswith("suffix") for s in without.trace.steps)  # off by default


def test_the_cut_verifies_only_what_its_record_pays_for_and_learns_from_rejections():
    """The book's proposal is cut to the prefix that pays under the verify ratios and its running survival
    per match length; where nothing pays, a plain step. Without ratios (the peer's proposer) it drafts all."""
    history = SuffixHistory()
    history.add(list(range(100, 140)))
    context = [1, 2, 100, 101, 102]
    options = SuffixOptions(suffix_factor=4.0)
    cheap = {d: 1.0 + 0.05 * d for d in range(17)}
    costly = {d: 1.0 + 2.0 * d for d in range(17)}  # a drafted token costs two plain steps: nothing pays
    full = SuffixDrafter(options, history)
    full.reset(context)
    assert full.propose(context, 8, None, None).tokens == list(range(103, 111))
    for ratios, drafts in ((cheap, True), (costly, False)):
        cut = SuffixDrafter(options, history, verify_ratios=ratios)
        cut.reset(context)
        draft = cut.propose(context, 8, None, None)
        assert bool(draft.tokens) == drafts and (cut.rate >= 1.0) == drafts, (ratios, draft)
    # rejections teach it: after the first drafted token is rejected again and again, it stops drafting
    cut = SuffixDrafter(options, history, verify_ratios=cheap)
    cut.reset(context)
    lengths = []
    for _ in range(30):  # a_1 falls as 1/(2 + rejections); one draft pays at R(1) = 1.05 until a_1 < 0.05
        draft = cut.propose(context, 8, None, None)
        lengths.append(len(draft.tokens))
        cut.observe(0, [], {}, verified=len(draft.tokens))
    assert lengths[0] > 1 and lengths[-1] == 0, lengths


def test_mix_weighs_the_books_cut_proposal_and_withdraws_it_when_another_wins():
    from specdec_core.drafters.mix import MixDrafter
    from specdec_core.drafters.ngram import NgramDrafter

    ratios = {d: 1.0 + 0.05 * d for d in range(17)}
    history = SuffixHistory()
    history.add(list(range(100, 140)))
    book = SuffixDrafter(SuffixOptions(suffix_factor=4.0), history, verify_ratios=ratios)
    mix = MixDrafter(NgramDrafter(1, 3, ratios), [], ratios, book)
    mix.reset([1, 2, 100, 101, 102])
    draft = mix.propose([1, 2, 100, 101, 102], 8, None, None)
    assert draft.tokens == list(range(103, 103 + len(draft.tokens))) and mix.source == "suffix" and book.pending
    mix.reset([5, 6, 7, 5, 6])  # the request repeats itself: the free lookup copies, and the book is not verified
    draft = mix.propose([5, 6, 7, 5, 6], 8, None, None)
    assert mix.source == "ngram" and book.pending is None


def test_an_answer_in_flight_joins_the_history_as_it_grows_and_once():
    history = SuffixHistory()
    writer = SuffixDrafter(SuffixOptions(suffix_in_flight=True, suffix_factor=4.0), history)
    writer.reset([7, 7])
    writer.propose([7, 7, 1], 4, None, None)
    writer.observe(0, [2, 3, 4], {})
    assert history.tokens.tolist() == [1, 2, 3, 4, -1]  # before it finished: arctic's active response
    reader = SuffixDrafter(SuffixOptions(suffix_factor=4.0), history)
    reader.reset([9, 1, 2])
    assert reader.propose([9, 1, 2], 2, None, None).tokens == [3, 4]  # a request served beside it recalls it
    writer.finish()
    assert history.size == 4  # not added a second time at the end
    default = SuffixDrafter(SuffixOptions(), SuffixHistory())
    default.reset([7])
    default.observe(0, [1, 2], {})
    assert default.history.size == 0  # by default only a finished answer joins


def test_an_answer_in_flight_is_evicted_like_any_other():
    history = SuffixHistory(max_tokens=5)
    writer = SuffixDrafter(SuffixOptions(suffix_in_flight=True), history)
    writer.reset([])
    writer.observe(0, [1, 2, 3], {})
    history.add([4, 5, 6])  # 6 tokens > 5: the oldest, the answer in flight, goes
    writer.observe(0, [7], {})  # and it does not come back
    assert history.tokens.tolist() == [4, 5, 6, -1] and history.size == 3


def test_the_cut_is_an_option_that_asks_for_this_machines_verify_ratios_and_serving_never_cuts(tiny):
    from specdec_core.decode import GenerationConfig
    from specdec_core.bench.modes import mode_config, parse_mode
    from specdec_core.costmodel import DraftCosts
    from specdec_core.drafters import costs_needed, make_drafter
    from specdec_core.serving.engine import serving_drafter

    assert costs_needed("suffix") is None and costs_needed("suffix", options={"suffix_cut": True}) == ()
    costs = DraftCosts({d: 1.0 + 0.05 * d for d in range(33)})
    plain = GenerationConfig(mode="spec", drafter="suffix", k=4)
    cut = mode_config(plain, parse_mode("spec:suffix@cut=1"))
    assert make_drafter("suffix", tiny, plain, costs).verify_ratios is None
    assert make_drafter("suffix", tiny, cut, costs).verify_ratios == {d: 1.0 + 0.05 * d for d in range(5)}
    assert serving_drafter(tiny, cut, costs=costs).verify_ratios is None  # the scheduler owns the verify length


def test_mix_refuses_arctics_book_with_one_line(tiny):
    from specdec_core.drafters import check_drafter
    from specdec_core.errors import SpecDecError

    with pytest.raises(SpecDecError, match="drop --suffix-impl arctic or --mix-suffix"):
        check_drafter("mix", {"mix_suffix": True, "suffix_impl": "arctic"}, tiny)
    check_drafter("mix", {"mix_suffix": True}, tiny)  # the lab's book: fine
