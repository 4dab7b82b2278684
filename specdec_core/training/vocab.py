"""Choosing the reduced vocabulary (`drafters/vocab.py`) by measurement on the target's own text.

Count every token of the training responses; rank by count, ties (and tokens never seen) by token id,
which for a BPE vocabulary is merge order, a frequency prior of its own; then keep the smallest
candidate N whose top-N covers COVERAGE of the *held-out* responses. A token outside the subset can
never be drafted, so coverage is a ceiling on every position's acceptance; each extra 4k rows costs
about 2.4M multiply-adds per drafted token.
"""
from __future__ import annotations

import torch

CANDIDATES = (2048, 4096, 8192, 12288, 16384, 24576, 32768)
COVERAGE = 0.97


def ranked_tokens(responses: list[torch.Tensor], vocab_size: int) -> torch.Tensor:
    """All token ids, most frequent in `responses` first (ties by id)."""
    counts = torch.bincount(torch.cat(responses).long(), minlength=vocab_size)
    return torch.argsort(counts, descending=True, stable=True)


def coverage_table(ranked: torch.Tensor, heldout: list[torch.Tensor], candidates=CANDIDATES) -> dict[int, float]:
    """{N: share of held-out response tokens inside the top N}."""
    tokens = torch.cat(heldout).long()
    place = torch.empty_like(ranked)
    place[ranked] = torch.arange(len(ranked))  # token id -> its rank
    ranks = place[tokens]
    return {n: float((ranks < n).float().mean()) for n in candidates if n <= len(ranked)}


def choose_vocab(train: list[torch.Tensor], heldout: list[torch.Tensor], vocab_size: int,
                 coverage: float = COVERAGE, candidates=CANDIDATES) -> tuple[torch.Tensor, dict]:
    """The subset's ids (sorted, int32) and the measurement behind it (for the model card)."""
    ranked = ranked_tokens(train, vocab_size)
    table = coverage_table(ranked, heldout, candidates)
    n = next((n for n, c in table.items() if c >= coverage), max(table))
    report = {"rule": f"smallest N covering >= {coverage:.0%} of held-out response tokens (ranked by count on train, "
                      f"ties by token id)", "N": n, "coverage": table,
              "train_tokens": int(sum(len(t) for t in train)), "heldout_tokens": int(sum(len(t) for t in heldout)),
              "distinct_train_tokens": int((torch.bincount(torch.cat(train).long(), minlength=vocab_size) > 0).sum())}
    return ranked[:n].sort().values.to(torch.int32), report
