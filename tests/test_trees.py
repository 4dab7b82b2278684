"""Draft trees (specdec_core/trees): the tree-attention forward reads each root path exactly as a chain
would, the accepted path's keys/values are compacted into a cache equal to a fresh prefill, greedy tree
decoding is identical to AR (one request and batched), and multi-candidate sampling is lossless. Every
property test has a negative control that must fail.
"""
import itertools
import math

import pytest
import torch

import specdec_core as sd
import specdec_core.sampling as sampling
import specdec_core.trees.verify as tree_verify
from specdec_core import llama
from specdec_core.drafting import Draft, Drafter
from specdec_core.errors import SpecDecError
from specdec_core.kvcache import KVCache
from specdec_core.models import build_tiny
from specdec_core.serving import engine as engine_module
from specdec_core.target import Target
from specdec_core.trees import best_blind_tree, row_parents, verify_siblings, verify_tree_greedy
from test_exactness import random_prompts
from test_serving import PROMPT, SAMPLING, second_token_distribution, serve

# A tree of six nodes over a 7-token context: the root has children 0 and 1, node 0 has 2 and 3, ...
TOKENS = [11, 12, 13, 14, 15, 16]
PARENTS = [-1, -1, 0, 0, 1, 2]
CONTEXT = [901, 902, 903, 904, 905, 906, 907]


@pytest.fixture(scope="module")
def tiny64(tiny):
    """tiny's architecture in float64 (a fresh, unpacked copy): every comparison below is exact to
    ~1e-12, so 1e-5 separates a right mask from a wrong one by many orders of magnitude."""
    return build_tiny(len(tiny.tokenizer)).double().eval()


def root_path(node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(node)
        node = PARENTS[node]
    return path[::-1]


def prefilled(model, ids: list[int]) -> KVCache:
    cache = KVCache()
    llama.forward(model, cache, torch.tensor([ids]))
    return cache


@torch.inference_mode()
def tree_vs_paths(model) -> float:
    """The largest logit difference between the tree forward's row of each node and a chain forward of
    that node's root path."""
    cache = prefilled(model, CONTEXT[:-1])
    tree_logits, _ = llama.forward(model, cache, torch.tensor([[CONTEXT[-1]] + TOKENS]), tree=row_parents(PARENTS))
    worst = 0.0
    for node in range(len(TOKENS)):
        chain = prefilled(model, CONTEXT[:-1])
        logits, _ = llama.forward(model, chain, torch.tensor([[CONTEXT[-1]] + [TOKENS[i] for i in root_path(node)]]))
        worst = max(worst, float((logits[0, -1] - tree_logits[0, node + 1]).abs().max()))
    return worst


def test_tree_attention_equals_each_root_path(tiny64):
    assert tree_vs_paths(tiny64) < 1e-5


def test_a_mask_that_lets_siblings_see_each_other_is_caught(tiny64, monkeypatch):
    monkeypatch.setattr(llama, "ancestor_mask", lambda past, rows, device: torch.ones(len(rows), past + len(rows), dtype=torch.bool))
    assert tree_vs_paths(tiny64) > 1e-3


def test_positions_by_row_instead_of_depth_are_caught(tiny64, monkeypatch):
    monkeypatch.setattr(llama, "row_positions", lambda rows: list(range(len(rows))))
    assert tree_vs_paths(tiny64) > 1e-3


@torch.inference_mode()
def after_keep(model, keep) -> float:
    """Verify the tree, keep the path root -> 0 -> 2 -> 5, feed one more token: its logits against a fresh
    prefill of the accepted text."""
    cache = prefilled(model, CONTEXT[:-1])
    llama.forward(model, cache, torch.tensor([[CONTEXT[-1]] + TOKENS]), tree=row_parents(PARENTS))
    path = [0, 2, 5]
    keep(cache, len(TOKENS) + 1, [0] + [n + 1 for n in path])
    accepted = CONTEXT + [TOKENS[n] for n in path]
    logits, _ = llama.forward(model, cache, torch.tensor([[77]]))
    fresh, _ = llama.forward(model, prefilled(model, accepted), torch.tensor([[77]]))
    assert cache.get_seq_length() == len(accepted) + 1
    return float((logits - fresh).abs().max())


def test_kv_compaction_equals_a_fresh_prefill(tiny64):
    assert after_keep(tiny64, Target.keep) < 1e-5


def test_cropping_without_compacting_is_caught(tiny64):
    assert after_keep(tiny64, lambda cache, new, rows: cache.crop(len(rows) - new)) > 1e-3


# --- building and verifying -------------------------------------------------------------------


def test_best_blind_tree_finds_the_n_best_paths():
    """Against brute force over every path of a small q: the same nodes, parents first, siblings by rank."""
    q = torch.softmax(torch.randn(3, 5, generator=torch.Generator().manual_seed(1)) * 2, dim=-1)
    scored = {path: sum(math.log(float(q[d, t])) for d, t in enumerate(path))
              for depth in (1, 2, 3) for path in itertools.product(range(5), repeat=depth)}
    for n in (1, 4, 9, 20):
        tree = best_blind_tree(q, n)
        tokens, parents, probs = tree.tokens, tree.parents, tree.probs
        paths = []
        for token, parent in zip(tokens, parents):
            assert parent < len(paths)  # parents first
            paths.append((paths[parent] if parent >= 0 else ()) + (token,))
        best = sorted(scored.values(), reverse=True)[:n]
        assert sorted((scored[p] for p in paths), reverse=True) == pytest.approx(best)
        assert probs == pytest.approx([float(q[len(p) - 1, p[-1]]) for p in paths])
        assert tree.reach == pytest.approx([math.exp(scored[p]) for p in paths])
        for parent in set(parents):  # siblings come in rank order
            ranks = [probs[i] for i, pa in enumerate(parents) if pa == parent]
            assert ranks == sorted(ranks, reverse=True)


@pytest.mark.parametrize("ratio", [lambda n: 1.0, lambda n: 1.0 + 0.04 * n, lambda n: 1.0 + 0.5 * n],
                         ids=["free", "cpu-like", "steep"])
def test_a_tree_sized_by_the_cost_table_keeps_what_pays(ratio):
    """Against brute force: the kept size maximises (1 + the n highest reaches) / ratio(n), and the kept
    nodes are those n, ancestor-closed."""
    q = torch.softmax(torch.randn(4, 50, generator=torch.Generator().manual_seed(2)) * 3, dim=-1)
    tree = best_blind_tree(q, 32)
    ratios = {n: ratio(n) for n in range(0, 33)}
    reach = sorted(tree.reach, reverse=True)
    rates = [(1 + sum(reach[:n])) / ratios[n] for n in range(1, 33)]
    sized = tree.sized(ratios)
    assert len(sized.tokens) == 1 + max(range(32), key=lambda i: rates[i])
    assert sorted(sized.reach, reverse=True) == pytest.approx(reach[:len(sized.tokens)])
    assert all(parent < i for i, parent in enumerate(sized.parents))
    if ratio(1) == ratio(30):
        assert len(sized.tokens) == 32  # verifying more costs nothing: keep every node


def test_greedy_tree_verification_follows_the_matching_sibling():
    # rows: 0 root, 1..6 nodes 0..5; the target picks 12 at the root (node 1), then 15 (node 4), then 99
    choices = [12, 0, 0, 0, 0, 15, 0]
    choices[2] = 15  # row of node 1 -> its child node 4 has token 15
    verdict = verify_tree_greedy(TOKENS, PARENTS, choices)
    assert verdict.path == [1, 4] and verdict.rows == [0, 2, 5] and verdict.next_token == choices[5]
    assert verify_tree_greedy(TOKENS, PARENTS, [99] * 7).path == []


CASES = [((0.5, 0.3, 0.1, 0.1, 0.0), (0.1, 0.2, 0.3, 0.2, 0.2)),
         ((0.05, 0.05, 0.8, 0.1), (0.7, 0.1, 0.1, 0.1)),
         ((0.2, 0.2, 0.2, 0.2, 0.2), (0.6, 0.3, 0.05, 0.05, 0.0))]
TRIALS = 6000


def first_emitted(p: torch.Tensor, candidates, q, generator) -> int:
    chosen, residual, _ = verify_siblings(p, candidates, q, generator)
    return candidates[chosen] if chosen is not None else sampling.sample(residual, generator)


def sibling_counts(draw, seed: int = 0) -> list[tuple[dict[int, int], torch.Tensor]]:
    """For each case, the first emitted token's counts over TRIALS steps whose siblings come from `draw`."""
    out = []
    generator = torch.Generator().manual_seed(seed)
    for p_values, q_values in CASES:
        p, q = torch.tensor(p_values, dtype=torch.float64), torch.tensor(q_values, dtype=torch.float64)
        counts: dict[int, int] = {}
        for _ in range(TRIALS):
            token = first_emitted(p, *draw(q, generator), generator)
            counts[token] = counts.get(token, 0) + 1
        out.append((counts, p))
    return out


def top_ranked(q, generator):  # the lab's trees: the drafter's 2 best tokens, chosen, not sampled
    return torch.topk(q, 2).indices.tolist(), None


def independent(q, generator):  # 3 siblings drawn with replacement from q
    return [sampling.sample(q, generator) for _ in range(3)], q


def without_replacement(q, generator):  # 2 distinct siblings, the second tested against the original q
    first = sampling.sample(q, generator)
    rest = q.clone()
    rest[first] = 0
    return [first, sampling.sample(rest / rest.sum(), generator)], q


@pytest.mark.parametrize("draw", [top_ranked, independent], ids=["deterministic", "independent"])
def test_multi_candidate_sampling_is_lossless(draw):
    assert not any(sampling.chi2_rejects(counts, p, TRIALS) for counts, p in sibling_counts(draw))


@pytest.mark.parametrize("draw", [top_ranked, independent], ids=["deterministic", "independent"])
def test_not_updating_the_residual_between_siblings_is_caught(draw, monkeypatch):
    monkeypatch.setattr(tree_verify, "residual_distribution", lambda p, q, token: p)
    assert any(sampling.chi2_rejects(counts, p, TRIALS) for counts, p in sibling_counts(draw))


def test_siblings_drawn_without_replacement_bias_the_rule():
    """Why the lab's trees do not sample their siblings: the same rule on distinct samples is biased."""
    assert any(sampling.chi2_rejects(counts, p, TRIALS) for counts, p in sibling_counts(without_replacement))


# --- decoding with trees ----------------------------------------------------------------------


def tree_config(**kw) -> sd.GenerationConfig:
    return sd.GenerationConfig(**{**dict(mode="spec", drafter="heads", k=4, tree="dynamic", tree_nodes=8, max_new_tokens=20), **kw})


def test_greedy_tree_decoding_equals_ar_tiny(tiny):
    for prompt in random_prompts(6, seed=3):
        expected = sd.generate(tiny, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=20)).token_ids
        result = sd.generate(tiny, prompt, tree_config())
        assert result.token_ids == expected
        steps = [s for s in result.trace.steps if s.tree_parents]
        assert steps and all(len(s.drafted) == len(s.tree_parents) <= 8 for s in steps)


def test_trees_sized_by_this_machines_costs_decode_exactly_tiny(tiny):
    sizes = set()
    for prompt in random_prompts(3, seed=7):
        expected = sd.generate(tiny, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=20)).token_ids
        result = sd.generate(tiny, prompt, tree_config(tree_nodes=0))
        assert result.token_ids == expected
        sizes |= {len(s.tree_parents) for s in result.trace.steps if s.tree_parents}
    assert sizes and max(sizes) <= 32


def test_batched_greedy_tree_decoding_equals_ar_tiny(tiny):
    prompts = random_prompts(5, seed=4)
    configs = [tree_config(), sd.GenerationConfig(mode="spec", drafter="ngram", k=4, max_new_tokens=20),
               tree_config(tree_nodes=3), sd.GenerationConfig(mode="ar", max_new_tokens=20), tree_config(tree_nodes=16)]
    requests, engine = serve(tiny, prompts, configs)
    for r, p in zip(requests, prompts):
        assert r.output_ids == sd.generate(tiny, p, sd.GenerationConfig(mode="ar", max_new_tokens=20)).token_ids
    assert max(s.tokens for s in engine.steps) > 5 * 2  # trees and chains were verified in one forward


@pytest.mark.slow
def test_greedy_tree_decoding_equals_ar_smollm2(smol):
    prompts = [[{"role": "user", "content": t}] for t in ("Write a short story about a cat who learns to swim.",
                                                           "What is the capital of France? Explain briefly.")]
    for prompt in prompts:
        expected = sd.generate(smol, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=24)).token_ids
        for nodes in (4, 12):
            assert sd.generate(smol, prompt, tree_config(tree_nodes=nodes, max_new_tokens=24)).token_ids == expected
    requests, _ = serve(smol, prompts, [tree_config(max_new_tokens=24)] * 2)
    for r, p in zip(requests, prompts):
        assert r.output_ids == sd.generate(smol, p, sd.GenerationConfig(mode="ar", max_new_tokens=24)).token_ids


TREE_N = 480


class TopRankedTree(Drafter):
    """A fixed tree: q's three best tokens at depth 1, each with q's best token as a child (deterministic)."""

    def __init__(self, q: torch.Tensor) -> None:
        self.q = q

    def propose(self, context, k, params, generator) -> Draft:
        top = torch.topk(self.q, 3).indices.tolist()
        return Draft(top + [top[0]] * 3, None, confidence=[0.5] * 6, parents=[-1, -1, -1, 0, 1, 2])


def batched_tree_second_tokens(lm, monkeypatch) -> dict[int, int]:
    """TREE_N requests, 16 per batch: prefill + one tree step; count the second new token."""
    exact = second_token_distribution(lm)
    q = torch.zeros_like(exact)
    q[torch.topk(exact, 8).indices[:4]] = 0.25  # the tree names 3 of the 4 most likely tokens
    monkeypatch.setattr(engine_module, "serving_drafter", lambda lm_, config, survival=None, costs=None, history=None: TopRankedTree(q))
    counts: dict[int, int] = {}
    for start in range(0, TREE_N, 16):
        configs = [sd.GenerationConfig(mode="spec", drafter="ngram", k=2, max_new_tokens=4, seed=start + i, **SAMPLING)
                   for i in range(16)]
        requests, _ = serve(lm, [PROMPT] * 16, configs)
        for r in requests:
            counts[r.output_ids[1]] = counts.get(r.output_ids[1], 0) + 1
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True], ids=["lossless", "no-residual-update-is-caught"])
def test_batched_tree_sampling_is_lossless_on_tiny(tiny, monkeypatch, broken):
    if broken:
        monkeypatch.setattr(tree_verify, "residual_distribution", lambda p, q, token: p)
    counts = batched_tree_second_tokens(tiny, monkeypatch)
    assert sampling.chi2_rejects(counts, second_token_distribution(tiny), TREE_N) == broken


def test_bad_tree_settings_are_one_line_errors(tiny):
    with pytest.raises(SpecDecError, match="cannot draft a dynamic tree"):
        sd.generate(tiny, "hello", sd.GenerationConfig(mode="spec", drafter="ngram", tree="dynamic"))
    with pytest.raises(SpecDecError, match="unknown tree"):
        sd.generate(tiny, "hello", sd.GenerationConfig(mode="spec", drafter="heads", tree="bushy"))
    with pytest.raises(SpecDecError, match="tree-nodes"):
        sd.generate(tiny, "hello", tree_config(tree_nodes=1))


# --- drafters growing trees -----------------------------------------------------------------------


def first_step_records(lm, name: str, tree: str, monkeypatch, module, prompt: list[int]) -> list:
    """The first spec step of `name` on one prompt: the chain's (tokens, q rows) (first of the list), or
    every (path, q) the first tree's expansion computed (the root's path is empty)."""
    records: list = []
    if tree == "chain":
        real = module.model_draft
        monkeypatch.setattr(module, "model_draft", lambda tokens, qs: records.append((list(tokens), list(qs))) or real(tokens, qs))
    else:
        real = module.expand_tree

        def spy(root_q, children_q, depth, n_nodes, branch=4):
            first = not records
            if first:
                records.append(([], root_q))

            def recorded(tokens, rows, paths):
                qs = children_q(tokens, rows, paths)
                if first:
                    records.extend(zip(paths, qs))
                return qs
            return real(root_q, recorded, depth, n_nodes, branch)
        monkeypatch.setattr(module, "expand_tree", spy)
    sd.generate(lm, prompt, tree_config(drafter=name, tree=tree, tree_nodes=12, max_new_tokens=8))
    return records


@pytest.mark.parametrize("name", ["draft", "eagle"])
def test_a_drafters_tree_reads_each_path_as_its_chain_would(smol, name, monkeypatch):
    """Along the chain's own greedy drafts, the q a tree's level-by-level forward computes equals the
    chain's q at the same position (the drafter's tree mask and positions are right); a mask that lets
    siblings see each other is caught."""
    from specdec_core.drafters import eagle, small_model
    module = eagle if name == "eagle" else small_model

    def worst(prompt: list[int], tokens: list[int], chain_q: list) -> tuple[float, int]:
        by_path = {tuple(path): q for path, q in first_step_records(smol, name, "dynamic", monkeypatch, module, prompt)}
        compared = [(by_path[tuple(tokens[:i])], chain_q[i]) for i in range(len(tokens)) if tuple(tokens[:i]) in by_path]
        return max(float((a - b).abs().max()) for a, b in compared), len(compared)

    # The dynamic tree keeps the likeliest paths, which need not hold the chain's greedy one to depth 3:
    # the first prompt whose tree does is compared (which one depends on the shipped weights).
    for prompt in random_prompts(6, seed=5):
        tokens, chain_q = first_step_records(smol, name, "chain", monkeypatch, module, prompt)[0]
        monkeypatch.undo()
        difference, compared = worst(prompt, tokens, chain_q)
        monkeypatch.undo()
        if compared >= 3:
            break
    assert compared >= 3 and difference < 1e-5
    monkeypatch.setattr(module if name == "eagle" else llama, "ancestor_mask",
                        lambda past, rows, device: torch.ones(len(rows), past + len(rows), dtype=torch.bool))
    assert worst(prompt, tokens, chain_q)[0] > 1e-4


@pytest.mark.parametrize("name", ["draft", "eagle", "early-exit", "quant", "block", "block-parallel"])
def test_greedy_dynamic_trees_of_every_tree_drafter_equal_ar_tiny(tiny, name):
    for prompt in random_prompts(3, seed=6):
        expected = sd.generate(tiny, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=20)).token_ids
        options = {"early_exit_layers": 1} if name == "early-exit" else {}  # tiny has two layers
        assert sd.generate(tiny, prompt, tree_config(drafter=name, tree_nodes=10, drafter_options=options)).token_ids == expected


@pytest.mark.parametrize("name", ["block", "block-parallel"])
def test_a_block_tree_biases_each_node_by_its_own_token(tiny, name, monkeypatch):
    """Along the chain's own greedy drafts, the q of each tree node equals the chain's q at that position:
    the Markov bias of a node's children comes from the node's own token (block-parallel: no bias). The
    batched path (one backbone forward for many requests) drafts the same trees."""
    from specdec_core.drafters import block
    chains, trees = [], []
    real_chain, real_expand = block.draft_chain, block.expand_tree
    monkeypatch.setattr(block, "draft_chain", lambda *args: chains.append(real_chain(*args)) or chains[-1])

    def spy(root_q, children_q, depth, n_nodes, branch=4):
        record = {(): root_q}

        def recorded(tokens, rows, paths):
            qs = children_q(tokens, rows, paths)
            record.update({tuple(path): q for path, q in zip(paths, qs)})
            return qs
        trees.append(record)
        return real_expand(root_q, recorded, depth, n_nodes, branch)
    monkeypatch.setattr(block, "expand_tree", spy)
    prompt = random_prompts(1, seed=5)[0]
    sd.generate(tiny, prompt, sd.GenerationConfig(mode="spec", drafter=name, k=4, max_new_tokens=8))
    sd.generate(tiny, prompt, tree_config(drafter=name, tree_nodes=12, max_new_tokens=8))
    tokens, chain_q = chains[0]
    compared = [float((trees[0][tuple(tokens[:i])] - chain_q[i]).abs().max())
                for i in range(len(tokens)) if tuple(tokens[:i]) in trees[0]]
    assert len(compared) >= 3 and max(compared) < 1e-6
    first_served = len(trees)
    requests, _ = serve(tiny, [prompt, prompt], [tree_config(drafter=name, tree_nodes=12, max_new_tokens=8),
                                                 sd.GenerationConfig(mode="spec", drafter=name, k=4, max_new_tokens=8)])
    assert [r.output_ids for r in requests] == [sd.generate(tiny, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=8)).token_ids] * 2
    served = trees[first_served]  # the served request's first tree: the same nodes, the same q
    assert served.keys() == trees[0].keys() and all(torch.allclose(served[path], q, atol=1e-6) for path, q in trees[0].items())


# --- static (Medusa) trees --------------------------------------------------------------------------


def test_static_trees_keep_their_shape_and_decode_exactly_tiny(tiny):
    shapes = set()
    for prompt in random_prompts(3, seed=8):
        expected = sd.generate(tiny, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=20)).token_ids
        result = sd.generate(tiny, prompt, tree_config(tree="static", tree_nodes=9))
        assert result.token_ids == expected
        shapes |= {tuple(s.tree_parents) for s in result.trace.steps if len(s.tree_parents) == 9}
    assert len(shapes) == 1  # one fixed shape wherever the whole tree fits (not cut short by the token limit)


def test_static_shape_follows_the_rank_accuracies():
    from specdec_core.trees import TreeSize, node_depths, static_shape

    table = [[0.6, 0.2, 0.1], [0.3, 0.2, 0.1], [0.2, 0.05, 0.01]]
    shape = static_shape(table, TreeSize(5))
    paths = []
    for rank, parent in zip(shape.tokens, shape.parents):
        paths.append((paths[parent] if parent >= 0 else ()) + (rank,))
    # the five rank paths of highest accuracy product: (0) .6, (0,0) .18, (1) .2, (0,1) .12, (2) .1 ties (1,0) .06 ...
    assert set(paths) == {(0,), (1,), (0, 0), (0, 1), (2,)}
    assert shape.within(1).tokens == [0, 1, 2] and node_depths(shape.within(1).parents) == [1, 1, 1]


@pytest.mark.slow
def test_rank_accuracy_counts_the_heads_guesses(tiny):
    """On the smoke corpus: rank 0 at depth 1 is how often head 1's argmax is the target's token, counted
    independently here; every depth's accuracies sum to at most 1."""
    from specdec_core.drafters import MedusaHeads, module_vocab
    from specdec_core.drafters.weights import drafter_module
    from specdec_core.training.batches import load_splits, make_batch
    from specdec_core.training.data import smoke_corpus
    from specdec_core.training.corpus import load_corpus
    from specdec_core.training.tree_shape import rank_accuracy

    corpus = load_corpus(smoke_corpus(tiny))
    table = rank_accuracy(tiny, corpus, ranks=4)
    assert all(sum(row) <= 1 + 1e-6 for row in table["rank_accuracy"])
    heads = drafter_module(tiny, "heads", MedusaHeads)
    vocab = module_vocab(heads, tiny.model.lm_head.weight)
    final = tiny.model.config.num_hidden_layers
    hits = anchors = 0
    for sequence in load_splits(tiny, corpus, (final,), mode="online")[1]:
        h = make_batch([sequence]).hidden[final][0]
        guess = vocab.ids[vocab.logits(heads(h)[0]).argmax(-1)]
        target = tiny.model.lm_head(h).argmax(-1)
        hits += int((guess[:-1] == target[1:]).sum())
        anchors += len(target) - 1
    assert table["rank_accuracy"][0][0] == pytest.approx(hits / anchors, abs=1e-4)


def test_metrics_count_acceptance_per_sibling_rank():
    from specdec_core.metrics import tree_counts
    from specdec_core.trace import StepEvent, Token

    def step(parents, path):
        return StepEvent(index=1, mode="spec", kind="decode", drafted=[Token(i, str(i)) for i in range(len(parents))],
                         accepted=len(path), tree_parents=parents, tree_path=path)

    # root -> 0, 1, 2; 0 -> 3, 4. Step A accepts 1 (rank 1) and stops; step B accepts 0 then 4 (rank 1 under 0).
    counts = tree_counts([step([-1, -1, -1, 0, 0], [1]), step([-1, -1, -1, 0, 0], [0, 4])])
    # offered: A reached the root (ranks 0, 1, 2); B the root (0, 1, 2) and node 0 (ranks 0, 1)
    assert counts["offered_per_rank_count"] == [3, 3, 2]
    assert counts["accepted_per_rank_count"] == [1, 2, 0]
    assert counts["accepted_per_rank"] == pytest.approx([1 / 3, 2 / 3, 0.0])


def test_a_static_tree_table_must_belong_to_the_shipped_weights(tmp_path):
    """The shipped table loads; a missing one, or one measured on other weights, is a one-line error."""
    import json
    import shutil
    from types import SimpleNamespace

    from specdec_core.drafters.weights import WEIGHTS_DIR, rank_accuracy, save_rank_accuracy

    lm = SimpleNamespace(name="smollm2-135m")
    shipped = rank_accuracy(lm, "heads")
    assert len(shipped) == 4 and all(0 <= a <= 1 for row in shipped for a in row)
    folder = tmp_path / "smollm2-135m"
    folder.mkdir()
    shutil.copy(WEIGHTS_DIR / "smollm2-135m" / "manifest.json", folder)
    (folder / "heads.safetensors").write_bytes(b"stand-in")  # entry() needs the file; its hash is the manifest's
    with pytest.raises(SpecDecError, match="tree-shape"):
        rank_accuracy(lm, "heads", tmp_path)
    save_rank_accuracy("smollm2-135m", "heads", {"rank_accuracy": [[0.5]]}, tmp_path)
    assert rank_accuracy(lm, "heads", tmp_path) == [[0.5]]
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["heads.safetensors"]["sha256"] = "0" * 64  # the heads were retrained since
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SpecDecError, match="other 'heads' weights"):
        rank_accuracy(lm, "heads", tmp_path)
