"""Verifying a draft tree: greedy, and lossless sampling over siblings.

Greedy is the chain rule applied at every node: follow the child whose token is the target's argmax
at its parent's row, until no child matches; the target's argmax there is the correction (or, at a
leaf, the bonus). The output is the target's own greedy text, whatever the tree.

Sampling tries the children of the current node one after another (SpecInfer's multi-candidate rule):
accept child x with probability min(1, p(x)/q(x)); on rejection replace p by the residual
norm(max(0, p - q)) and try the next sibling; when every sibling is rejected, sample from the last
residual. Why it is lossless, and what it assumes about how the siblings were drawn:

- *Deterministic siblings* (q = None: the tree's builder chose them, e.g. the drafter's top-ranked
  tokens, without looking at the target). Each sibling is a one-hot proposal, so x_1 is accepted with
  probability p(x_1), and the residual is p with x_1 removed and renormalised. Then
  P(emit x_j) = (1 - p(x_1)) ... × p(x_j) / (1 - p(x_1) - ... - p(x_(j-1))) = p(x_j): the products
  telescope; and a token no sibling names is drawn from p restricted to the rest, i.e. with
  probability p(y). Exact for any list of distinct candidates. Every tree in this lab is built this way.
- *Siblings drawn independently from one q* (with replacement). Each stage is a fresh speculative step
  (Leviathan et al.) whose proposal is independent of everything before it and whose target is the
  previous stage's residual; one step emits exactly its target's distribution, so by induction from the
  last stage back to the first, the node emits p.
- *Siblings drawn without replacement* (distinct samples). Then q is no longer the law of every sibling:
  the second was drawn from q with x_1 removed and renormalised, the third with x_1 and x_2 removed, and so
  on. Testing the second against the original q (the rule above, unchanged) is biased: on p = (.5, .3,
  .1, .1, 0), q = (.1, .2, .3, .2, .2) the first emitted token is off by a total variation of ~0.036
  (`tests/test_trees.py` measures it). The rule is exact again only when sibling j is tested, and the
  residual taken, against its own law q_j (Jeon et al. 2024, recursive speculative decoding). The trees
  here never sample their siblings, so the lab implements the deterministic and the independent cases.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..sampling import SamplingParams, acceptance_probability, penalise_repeats, residual_distribution, sample
from .shape import children


@dataclass
class TreeVerdict:
    path: list[int]  # accepted nodes, root to leaf (each the child of the one before)
    next_token: int  # the correction after the last accepted node, or the bonus at a leaf
    accept_probs: list[float]  # sampling: min(1, p/q) of every sibling tried, in order
    residual: torch.Tensor | None  # sampling: the distribution the correction came from (None: a bonus)

    @property
    def rows(self) -> list[int]:
        """The verify forward's rows to keep: the root (row 0) and each accepted node's row."""
        return [0] + [node + 1 for node in self.path]


def process_tree_logits(logits: torch.Tensor, history: list[int], tokens: list[int], parents: list[int],
                        params: SamplingParams) -> torch.Tensor:
    """`sampling.process_logits` for a tree's rows (N+1, V): row i+1 continues history + node i's own root
    path, so a repetition penalty sees exactly the tokens that path would have emitted."""
    if params.repetition_penalty == 1.0:
        return logits
    paths: list[list[int]] = [[]]  # per row: the tokens from the root to it
    for token, parent in zip(tokens, parents):
        paths.append(paths[parent + 1] + [token])
    return torch.stack([penalise_repeats(row, history + path, params.repetition_penalty) for row, path in zip(logits, paths)])


def verify_tree_greedy(tokens: list[int], parents: list[int], choices: list[int]) -> TreeVerdict:
    """choices[r]: the target's argmax at forward row r (row 0 the root, row i+1 node i)."""
    kids = children(parents)
    node, path = -1, []
    while True:
        want = choices[node + 1]
        match = next((child for child in kids.get(node, []) if tokens[child] == want), None)
        if match is None:
            return TreeVerdict(path, want, [], None)
        path.append(match)
        node = match


def verify_siblings(p: torch.Tensor, candidates: list[int], q: torch.Tensor | None,
                    generator: torch.Generator) -> tuple[int | None, torch.Tensor, list[float]]:
    """Try candidates (token ids) in order against p (V,). q: None (deterministic candidates, each a
    one-hot proposal) or (V,), the law every candidate was drawn from independently. Returns the index of
    the accepted candidate (None: all rejected), the distribution the last test was against (the residual
    to sample the correction from when all were rejected) and min(1, p/q) of each candidate tried."""
    probs: list[float] = []
    for j, token in enumerate(candidates):
        a = acceptance_probability(p, q, token)
        probs.append(a)
        if torch.rand((), generator=generator).item() < a:
            return j, p, probs
        p = residual_distribution(p, q, token)
    return None, p, probs


def verify_tree_sampled(tokens: list[int], parents: list[int], p: torch.Tensor, generator: torch.Generator,
                        q: torch.Tensor | None = None) -> TreeVerdict:
    """p: (N+1, V) the target's sampling distributions per forward row; q: None (deterministic nodes) or
    (N, V), node i's row = the law it was drawn from at its parent (siblings share it)."""
    kids = children(parents)
    node, path, tried = -1, [], []
    while True:
        siblings = kids.get(node, [])
        if not siblings:  # a leaf: every draft on this path was accepted, the bonus comes from p
            return TreeVerdict(path, sample(p[node + 1], generator), tried, None)
        chosen, residual, probs = verify_siblings(p[node + 1], [tokens[s] for s in siblings],
                                                  None if q is None else q[siblings[0]], generator)
        tried += probs
        if chosen is None:
            return TreeVerdict(path, sample(residual, generator), tried, residual)
        node = siblings[chosen]
        path.append(node)
