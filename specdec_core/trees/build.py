"""Which nodes to draft: the N root paths the drafter itself finds most likely (EAGLE-2's rule).

A node's score is its path's cumulative draft probability, q(x_1) q(x_2 | x_1) ... — the drafter's own
estimate that the target walks down to it (EAGLE-2 found it tracks acceptance well). Keeping the N best
nodes gives an ancestor-closed tree (a child never outscores its parent) that spends its nodes where
the drafter is unsure: one long spine when q is confident, a bushy top when it is not.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable

import torch

from .shape import node_depths, path_tokens

AUTO_NODES = 32  # the most nodes a tree sized by the cost table may keep (its candidates are drafted first)


@dataclass
class Tree:
    """A drafted tree, parents-first: tokens, parents (-1: the root), each node's own q at its parent, and
    its reach: the path's cumulative q, the drafter's estimate that verification walks down to it."""

    tokens: list[int]
    parents: list[int]
    probs: list[float]
    reach: list[float]

    def best(self, n: int) -> "Tree":
        """The n nodes of highest reach, parents-first (ancestor-closed: a child never outreaches its parent,
        and on a tie the parent, drafted first, is kept first)."""
        keep = sorted(sorted(range(len(self.tokens)), key=lambda node: -self.reach[node])[:n])
        index = {node: i for i, node in enumerate(keep)}
        return Tree([self.tokens[i] for i in keep], [index[self.parents[i]] if self.parents[i] >= 0 else -1 for i in keep],
                    [self.probs[i] for i in keep], [self.reach[i] for i in keep])

    def within(self, depth: int) -> "Tree":
        """The nodes at most `depth` deep (ancestor-closed: a parent is shallower than its children)."""
        depths = node_depths(self.parents)
        keep = [i for i, d in enumerate(depths) if d <= depth]
        index = {node: i for i, node in enumerate(keep)}
        return Tree([self.tokens[i] for i in keep], [index[self.parents[i]] if self.parents[i] >= 0 else -1 for i in keep],
                    [self.probs[i] for i in keep], [self.reach[i] for i in keep])

    def sized(self, verify_ratios: dict[int, float]) -> "Tree":
        """The size that pays best on this machine: n maximising (1 + the n highest reaches) / verify_ratios[n].
        Each accepted node is one token and the step adds one more (correction or bonus), so with a
        calibrated q the numerator is the step's expected tokens; the denominator is what verifying n
        drafts costs in plain steps (the drafting is already paid when the size is chosen)."""
        reach = sorted(self.reach, reverse=True)
        best_n, best_rate, expected = 1, 0.0, 1.0
        for n in range(1, min(len(reach), max(verify_ratios)) + 1):
            expected += reach[n - 1]
            if expected / verify_ratios[n] > best_rate:
                best_n, best_rate = n, expected / verify_ratios[n]
        return self.best(best_n)


def best_blind_tree(q: torch.Tensor, n_nodes: int) -> Tree:
    """The n_nodes best nodes for a drafter whose depth-d guess does not depend on the tokens before it
    (Medusa heads: q (D, V), one distribution per depth). Then the best N are found exactly, in order of
    score, by lazy enumeration: a node's next sibling (rank + 1) and its first child (depth + 1, rank 0)
    become candidates only once the node itself is taken. Nodes come parents-first, siblings by rank."""
    depth_count = q.shape[0]
    values, ids = torch.topk(q.float(), min(n_nodes, q.shape[-1]), dim=-1)  # (D, r) each, by rank
    values, ids = values.tolist(), ids.tolist()
    tokens: list[int] = []
    parents: list[int] = []
    probs: list[float] = []
    scores: list[float] = []
    # heap of (-score, tie-break, parent node, depth, rank)
    heap = [(-math.log(values[0][0]), 0, -1, 0, 0)] if values[0][0] > 0 else []
    pushed = 1
    while heap and len(tokens) < n_nodes:
        neg_score, _, parent, depth, rank = heapq.heappop(heap)
        node = len(tokens)
        tokens.append(ids[depth][rank])
        parents.append(parent)
        probs.append(values[depth][rank])
        scores.append(-neg_score)
        base = scores[parent] if parent >= 0 else 0.0
        candidates = [(parent, depth, rank + 1, base)] if rank + 1 < len(ids[depth]) else []
        if depth + 1 < depth_count:
            candidates.append((node, depth + 1, 0, -neg_score))
        for at, d, r, prefix in candidates:
            if values[d][r] > 0:
                heapq.heappush(heap, (-(prefix + math.log(values[d][r])), pushed, at, d, r))
                pushed += 1
    return Tree(tokens, parents, probs, [math.exp(score) for score in scores])


@dataclass(frozen=True)
class TreeSize:
    """How big a drafter's trees are: `nodes` nodes, or with nodes = 0 the size that pays on this machine
    (`Tree.sized` on the measured `verify_ratios`), at most AUTO_NODES."""

    nodes: int = 0
    verify_ratios: dict[int, float] | None = None

    @property
    def cap(self) -> int:
        """How many candidates to draft before cutting."""
        return self.nodes or AUTO_NODES

    def cut(self, tree: Tree) -> Tree:
        return tree.sized(self.verify_ratios) if not self.nodes and self.verify_ratios else tree


BRANCH = 4  # EAGLE-2 expands the top K nodes of each level, K children each (K = 10 on a GPU; this CPU reads fewer)


def expand_tree(root_q: torch.Tensor, children_q: Callable[[list[int], list[int], list[list[int]]], torch.Tensor],
                depth: int, n_nodes: int, branch: int = BRANCH) -> Tree:
    """EAGLE-2's dynamic tree for a drafter whose guesses depend on the tokens before them.

    Level 1: the `branch` best tokens of root_q (V,). Each further level: the `branch` best nodes of the
    level before (by score, the path's cumulative q) are fed to the drafter in one call,
    children_q(tokens, tree, paths) -> (len(tokens), V): the drafter reads `tokens` as the last rows of
    `tree` (every row it has been fed this proposal, each row's parent row, -1: the context; what
    `llama.forward` reads as `tree`) and returns q after each, `paths` being each one's root path (for a
    repetition penalty). Their `branch` best children join the candidates. Then the n_nodes best
    candidates by score (ancestor-closed: a child never outscores its parent) are the tree."""
    tokens: list[int] = []
    parents: list[int] = []
    probs: list[float] = []
    scores: list[float] = []
    fed: dict[int, int] = {}  # candidate -> its row in what the drafter has been fed
    tree: list[int] = []

    def add_children(q: torch.Tensor, parent: int) -> list[int]:
        values, ids = torch.topk(q.float(), min(branch, q.shape[-1]))
        base = scores[parent] if parent >= 0 else 0.0
        added = []
        for value, token in zip(values.tolist(), ids.tolist()):
            if value > 0:
                added.append(len(tokens))
                tokens.append(token)
                parents.append(parent)
                probs.append(value)
                scores.append(base + math.log(value))
        return added

    level = add_children(root_q, -1)
    for _ in range(depth - 1):
        expand = sorted(level, key=lambda node: -scores[node])[:branch]
        if not expand:
            break
        for node in expand:
            tree.append(fed.get(parents[node], -1))  # an expanded node's parent was expanded the level before
            fed[node] = len(tree) - 1
        rows = children_q([tokens[node] for node in expand], tree, [path_tokens(tokens, parents, node) for node in expand])
        level = [child for node, q in zip(expand, rows) for child in add_children(q, node)]
    return Tree(tokens, parents, probs, [math.exp(score) for score in scores]).best(n_nodes)


def static_shape(rank_accuracy: list[list[float]], size: TreeSize) -> Tree:
    """Medusa's static tree: the rank paths (r_1, ..., r_d) whose product of measured accuracies
    acc[d][r_d] is highest (their chance to be accepted if the depths were independent, Medusa's
    approximation), chosen and sized once. The Tree's tokens are ranks, its probs the accuracies; the
    drafter puts its rank-r guess of each step at each node."""
    return size.cut(best_blind_tree(torch.tensor(rank_accuracy, dtype=torch.float64), size.cap))
