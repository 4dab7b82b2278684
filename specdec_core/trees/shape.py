"""A draft tree flattened into one forward: which row sees which, and at which rotary position.

Rows of the verify forward: row 0 is the context's last token (the tree's root: its logits judge the
depth-1 nodes), row i+1 is node i. A node's row sits at position past + depth, the position the token
would have in its own root path, so every root path reads exactly what a chain of those tokens would.
Nodes come parents-first (parents[i] < i), which every builder here guarantees.
"""
from __future__ import annotations

import torch


def node_depths(parents: list[int]) -> list[int]:
    """Depth of each node: 1 for a child of the root (the context's last token)."""
    depths: list[int] = []
    for parent in parents:
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return depths


def path_tokens(tokens: list[int], parents: list[int], node: int) -> list[int]:
    """The tokens from the root down to `node`, itself included."""
    path = []
    while node >= 0:
        path.append(tokens[node])
        node = parents[node]
    return path[::-1]


def sibling_ranks(parents: list[int]) -> list[int]:
    """Each node's rank among its siblings (0: its parent's first child, the drafter's best guess there)."""
    seen: dict[int, int] = {}
    ranks = []
    for parent in parents:
        ranks.append(seen.get(parent, 0))
        seen[parent] = ranks[-1] + 1
    return ranks


def children(parents: list[int]) -> dict[int, list[int]]:
    """node -> its children in node order (-1: the root's). Node order is sibling rank order."""
    kids: dict[int, list[int]] = {}
    for node, parent in enumerate(parents):
        kids.setdefault(parent, []).append(node)
    return kids


def row_parents(parents: list[int]) -> list[int]:
    """The verify forward's rows as a tree: row 0 (the last token) has no parent row (-1), node i is row i+1."""
    return [-1] + [p + 1 for p in parents]


def row_positions(rows: list[int]) -> list[int]:
    """Each row's offset from the cache's end (its depth in the rows' tree, row 0 at 0)."""
    offsets: list[int] = []
    for parent in rows:
        offsets.append(0 if parent < 0 else offsets[parent] + 1)
    return offsets


def ancestor_mask(past: int, rows: list[int], device: torch.device) -> torch.Tensor:
    """(n, past+n) bool: row i sees every position before `past` and the rows on its own root path
    (itself included). For a chain (rows[i] = i-1) this is exactly the causal mask."""
    n = len(rows)
    seen = torch.zeros(n, n, dtype=torch.bool)
    for i, parent in enumerate(rows):
        seen[i, i] = True
        if parent >= 0:
            seen[i] |= seen[parent]  # parents come first: the parent's row is complete
    return torch.cat((torch.ones(n, past, dtype=torch.bool), seen), dim=1).to(device)
