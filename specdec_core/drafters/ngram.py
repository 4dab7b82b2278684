"""Prompt lookup: draft by copying what followed the last occurrence of the current n-gram.

Free to run and excellent when the answer repeats its input (code edits, quoting, extraction).
"""
from __future__ import annotations

import numpy as np
import torch

from ..sampling import SamplingParams
from .base import Draft, Drafter


class NgramDrafter(Drafter):
    name = "ngram"

    def __init__(self, ngram_min: int = 1, ngram_max: int = 3) -> None:
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max

    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator) -> Draft:
        tokens = np.asarray(context)
        # Longest n first: a longer matching suffix is stronger evidence for the continuation.
        for n in range(self.ngram_max, self.ngram_min - 1, -1):
            if len(tokens) <= n:
                continue
            suffix = tokens[-n:]
            windows = np.lib.stride_tricks.sliding_window_view(tokens[:-1], n)  # (T-n, n), excludes the suffix itself
            hits = np.flatnonzero((windows == suffix).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n  # most recent occurrence
                proposal = tokens[start:start + k].tolist()
                if proposal:
                    return Draft(proposal, None)
        return Draft([], None)  # nothing to copy: the loop takes a plain step instead of verifying padding
