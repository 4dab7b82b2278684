"""Draft trees: many candidate continuations verified in one target forward.

A chain drafter bets every draft on its first guess; a tree keeps the second- and third-ranked guesses
as siblings, so one wrong guess at depth 1 no longer throws the whole step away. A tree is a `Draft`
whose `parents` name each node's parent (-1: the context's last token); a chain is the tree with one
child per node (`parents is None`, today's fast path).

- `shape.py`: the flattened tree as the target reads it: forward rows, depths (RoPE positions) and the
  ancestor mask (a node sees the cache, its ancestors and itself, never a sibling or a cousin);
- `build.py`: which nodes to draft: Medusa's static shape (from measured rank accuracies), EAGLE-2's
  dynamic tree (the best N by cumulative draft probability), and the size that pays on the cost table;
- `verify.py`: greedy (the longest root path that matches the target's argmax) and lossless sampling
  over siblings (recursive rejection sampling, as in SpecInfer), with the proof of what it assumes.
"""
from .build import AUTO_NODES, Tree, TreeSize, best_blind_tree, expand_tree, static_shape
from .shape import ancestor_mask, children, node_depths, path_tokens, row_parents, row_positions, sibling_ranks
from .verify import TreeVerdict, process_tree_logits, verify_siblings, verify_tree_greedy, verify_tree_sampled

TREES = ("chain", "static", "dynamic")

__all__ = ["AUTO_NODES", "TREES", "Tree", "TreeSize", "TreeVerdict", "ancestor_mask", "best_blind_tree", "children",
           "expand_tree", "node_depths", "path_tokens", "process_tree_logits", "row_parents", "row_positions",
           "sibling_ranks", "static_shape", "verify_siblings", "verify_tree_greedy", "verify_tree_sampled"]
