"""Prompt lookup: draft by copying what followed the last occurrence of the current n-gram.

Free to run and excellent when the answer repeats its input (code edits, quoting, extraction).
On free text a match is often a coincidence, and every drafted token makes the verify forward
longer, which costs real time on a CPU. So by default the drafter is *cost-aware*: it keeps a running
acceptance rate per match length and verifies only as many of the copied tokens as pay for
themselves under this machine's measured verify costs (theory.best_k with k = 0 allowed: a plain AR
step). `ngram-fixed` always drafts the whole match, like transformers' prompt lookup.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import SpecDecError
from ..sampling import SamplingParams
from ..theory import best_k
from ..drafting import Draft, Drafter

# Before any evidence a match is assumed right half the time (a Beta(1, 1) prior on alpha).
PRIOR_ACCEPTED, PRIOR_EXAMINED = 1, 2


@dataclass(frozen=True)
class NgramOptions:
    """The lookup's own knobs: match suffixes of ngram_max tokens down to ngram_min (`ngram`, `ngram-fixed`, `mix`)."""

    ngram_min: int = 1
    ngram_max: int = 3

    def validate(self, num_layers: int) -> None:
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise SpecDecError(f"need 1 <= ngram-min <= ngram-max (got {self.ngram_min}, {self.ngram_max})")


class SurvivalStats:
    """Running conditional survival per (match length n, draft position i): of the verified drafts at
    position i that followed a surviving prefix, how many survived. A copied run tends to hold once it
    has started, so a_2, a_3 … are usually far above a_1: one α per match length would undersell it.

    The serving engine shares one table among all requests of a run (it learns from the population,
    never from a prompt's text); a request decoded alone keeps its own.
    """

    def __init__(self, prior_survived: int = PRIOR_ACCEPTED, prior_reached: int = PRIOR_EXAMINED) -> None:
        self.counts: dict[tuple[int, int], list[int]] = {}  # (n, i) -> [survived, reached]
        self.prior = (prior_survived, prior_reached)  # pseudo-counts: Beta(1, 1) by default

    def confidence(self, n: int, length: int) -> list[float]:
        """a_1 .. a_length for a match of length n. a_1 starts from the prior; each deeper a_i starts from
        a_(i-1) with the prior's weight, so a position never verified yet is expected to survive as often
        as the one before it. (A fixed prior there traps a costly drafter: when the prior pays only one
        draft, position 2 is never verified, so its estimate never rises to show that more would pay.)"""
        out = []
        mean = self.prior[0] / self.prior[1]
        for i in range(1, length + 1):
            survived, reached = self.counts.get((n, i), (0, 0))
            mean = (survived + mean * self.prior[1]) / (reached + self.prior[1])
            out.append(mean)
        return out

    def update(self, n: int, verified: int, accepted: int) -> None:
        for i in range(1, min(verified, accepted + 1) + 1):  # positions reached: up to the first rejection
            counts = self.counts.setdefault((n, i), [0, 0])
            counts[0] += i <= accepted
            counts[1] += 1


class NgramDrafter(Drafter):
    name = "ngram"

    def __init__(self, ngram_min: int = 1, ngram_max: int = 3,
                 verify_ratios: dict[int, float] | None = None, survival: SurvivalStats | None = None) -> None:
        """verify_ratios: d -> cost of verifying d drafts (d+1 tokens) over a plain 1-token step, measured
        by the cost model; None drafts every match in full (`ngram-fixed`). survival: a table shared
        with other requests (serving), else the drafter keeps its own."""
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max
        self.verify_ratios = verify_ratios
        self.shared_survival = survival
        if verify_ratios is None:
            self.name = "ngram-fixed"
        self.reset([])

    def reset(self, prompt_ids: list[int]) -> None:
        # Per match length n: [accepted, examined] drafted positions (examined = accepted + the rejected one).
        self.stats = {n: [PRIOR_ACCEPTED, PRIOR_EXAMINED] for n in range(self.ngram_min, self.ngram_max + 1)}
        self.last_match: tuple[int, int] | None = None  # (n, drafted length) of the pending proposal
        self.survival = self.shared_survival or SurvivalStats()

    def acceptance(self, n: int) -> float:
        accepted, examined = self.stats[n]
        return accepted / examined

    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator) -> Draft:
        self.last_match = None
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
                if self.verify_ratios is not None and proposal:
                    # Drafting costs nothing here (c = 0); the verify forward's extra tokens are the cost.
                    worth = best_k(self.acceptance(n), 0.0, len(proposal), self.verify_ratios, k_min=0)
                    proposal = proposal[:worth]
                if proposal:
                    self.last_match = (n, len(proposal))
                    return Draft(proposal, None, confidence=self.survival.confidence(n, len(proposal)))
                return Draft([], None)  # a match, but not worth verifying: a plain step
        return Draft([], None)  # nothing to copy: the loop takes a plain step instead of verifying padding

    def observe(self, accepted: int, emitted: list[int], hidden: dict[int, torch.Tensor],
                verified: int | None = None) -> None:
        if self.last_match is None:
            return
        n, drafted = self.last_match
        drafted = drafted if verified is None else verified  # unverified drafts are no evidence either way
        self.survival.update(n, drafted, accepted)
        self.stats[n][0] += accepted
        self.stats[n][1] += accepted + (accepted < drafted)  # positions up to and including the first rejection
