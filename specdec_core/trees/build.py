"""Which nodes to draft: the N root paths the drafter itself finds most likely (EAGLE-2's rule).

A node's score is its path's cumulative draft probability, q(x_1) q(x_2 | x_1) ... — the drafter's own
estimate that the target walks down to it (EAGLE-2 found it tracks acceptance well). Keeping the N best
nodes gives an ancestor-closed tree (a child never outscores its parent) that spends its nodes where
the drafter is unsure: one long spine when q is confident, a bushy top when it is not.
"""
from __future__ import annotations

import heapq
import math

import torch


def best_blind_tree(q: torch.Tensor, n_nodes: int) -> tuple[list[int], list[int], list[float]]:
    """The n_nodes best nodes for a drafter whose depth-d guess does not depend on the tokens before it
    (Medusa heads: q (D, V), one distribution per depth). Then the best N are found exactly, in order of
    score, by lazy enumeration: a node's next sibling (rank + 1) and its first child (depth + 1, rank 0)
    become candidates only once the node itself is taken. Returns tokens, parents (-1: the root) and
    each node's own draft probability, nodes parents-first and siblings by rank."""
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
    return tokens, parents, probs
