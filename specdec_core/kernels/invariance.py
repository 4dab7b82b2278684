"""The row-invariance harness: does a row's result depend on how many rows share its forward?

Greedy speculative decoding is exact only if the target scores a token the same way in a k+1-row verify
as in the 1-row step plain decoding takes. Mathematically it does; numerically a kernel may sum a row's
products in a different order when it multiplies more rows (another blocking, another kernel), and a
near-tie between the top two logits can then flip. This harness measures it directly: row j of one
n-row forward against the same token scored by 1-row forwards — for a chain, the j-th of n successive
1-row forwards; for a tree, 1-row forwards along row j's own ancestors — and reports, per row count and
cache length, whether logits and every hidden state are bitwise equal, or their largest difference.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from .. import llama
from ..kvcache import KVCache


@dataclass(frozen=True)
class Invariance:
    rows: int
    cache_len: int
    tree: bool
    bitwise: bool  # logits and every hidden state of every row identical
    max_logit_diff: float
    max_hidden_diff: float


def _ancestors(tree: list[int], j: int) -> list[int]:
    """Row j's path from the tree's root: [root, …, parent, j]."""
    path = [j]
    while tree[path[-1]] >= 0:
        path.append(tree[path[-1]])
    return path[::-1]


def row_invariance(model: torch.nn.Module, rows: int, cache_len: int, tree: list[int] | None = None,
                   seed: int = 0) -> Invariance:
    """Compare one `rows`-row forward on a `cache_len`-token cache with its 1-row equivalents. `tree`
    (len = rows, tree[i] = parent row, -1 for a root) checks a tree verify; None, a chain."""
    generator = torch.Generator().manual_seed(seed)
    layers = tuple(range(model.config.num_hidden_layers + 1))
    prefix = torch.randint(100, 10000, (1, cache_len), generator=generator)
    ids = torch.randint(100, 10000, (1, rows), generator=generator)
    with torch.inference_mode():
        cache = KVCache()
        llama.forward(model, cache, prefix, last_only=True)
        together, hidden = llama.forward(model, copy.deepcopy(cache), ids, layers, tree=tree)  # (1, rows, V)
        logit_diff = hidden_diff = 0.0
        bitwise = True
        paths = [list(range(j + 1)) for j in range(rows)] if tree is None else [_ancestors(tree, j) for j in range(rows)]
        chain_cache = copy.deepcopy(cache)
        for j, path in enumerate(paths):
            if tree is None:  # successive 1-row forwards: one cache grows by row j
                steps, step_cache = [j], chain_cache
            else:  # 1-row forwards along row j's ancestors, on a fresh copy of the prefix
                steps, step_cache = path, copy.deepcopy(cache)
            for row in steps:
                alone, alone_hidden = llama.forward(model, step_cache, ids[:, row:row + 1], layers)
            logit_diff = max(logit_diff, float((together[0, j] - alone[0, 0]).abs().max()))
            for layer in layers:
                hidden_diff = max(hidden_diff, float((hidden[layer][0, j] - alone_hidden[layer][0, 0]).abs().max()))
            bitwise = bitwise and torch.equal(together[0, j], alone[0, 0]) and \
                all(torch.equal(hidden[layer][0, j], alone_hidden[layer][0, 0]) for layer in layers)
    return Invariance(rows, cache_len, tree is not None, bitwise, logit_diff, hidden_diff)


def binary_tree(rows: int) -> list[int]:
    """A tree of `rows` rows where row i's parent is row (i - 1) // 2: a root, two children each — the
    siblings of a tree verify beside the deep paths of a chain."""
    return [(i - 1) // 2 if i else -1 for i in range(rows)]
