"""`mix`: per step, verify whichever drafter promises more accepted tokens per second.

Production systems run prompt lookup *and* a model drafter: copying wins by far when the answer repeats
its input, a model drafter wins on free text. Which one to verify, and how many of a model's drafts,
is decided every step from numbers the step already has, never from the prompt's text or category:
- the n-gram proposal (free to compute) with its own running conditional survival per position;
- with `mix_suffix`, the recipe book's proposal too (`suffix`: the request and earlier answers), with
  its measured proposal cost and its own running conditional survival per match length;
- each model drafter's running conditional survival a_1 .. a_k (this request's verified steps); a model
  starts trusted (prior survival 0.8 a position) and keeps its place only while its drafts survive, so
  each one is tried before the evidence decides;
- this machine's measured costs: a draft step of each model drafter over one target forward (c), and
  the verify ratios R(d) of a forward over d+1 tokens (`costmodel`).
Expected tokens per target-forward time of a d-draft proposal with prefix survivals s_i:
(1 + s_1 + ... + s_d) / (R(d) + d c), against 1 for a plain step (no drafts); a model drafts the d that
maximises it. A model drafter is only run when it wins, but it sees every verification forward (its
hidden states, its KV cache), so it is always ready. Either way the verify step is the usual one, so
the output stays exactly the target's.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..drafting import Draft, Drafter
from ..sampling import SamplingParams
from .ngram import NgramDrafter, NgramOptions, SurvivalStats
from .suffix import SuffixDrafter

MODEL_PRIOR = (4, 5)  # a model drafter's prior survival per position: 4 of 5 (optimistic, so it gets tried)
# The recipe book's survival is kept per match length m up to this; longer matches share the last row.
SUFFIX_MATCH_ROWS = 8


@dataclass(frozen=True)
class MixOptions(NgramOptions):
    """`mix`'s knobs: the n-gram lookup's, and whether the recipe book (`suffix`, with its own options)
    is one more source."""

    mix_suffix: bool = False


def expected_rate(conditional: list[float], c: float, verify_ratios: dict[int, float]) -> float:
    """Tokens per unit of target-forward time of verifying drafts with these conditional survivals."""
    survival, tokens = 1.0, 1.0
    for a in conditional:
        survival *= a
        tokens += survival
    d = len(conditional)
    return tokens / (verify_ratios.get(d, verify_ratios[max(verify_ratios)]) + d * c)


def best_length(conditional: list[float], c: float, verify_ratios: dict[int, float]) -> tuple[float, int]:
    """(expected rate, d) of the most paying draft length d = 1 .. len(conditional)."""
    return max((expected_rate(conditional[:d], c, verify_ratios), d) for d in range(1, len(conditional) + 1))


class MixDrafter(Drafter):
    name = "mix"

    def __init__(self, ngram: NgramDrafter, models: list[tuple[Drafter, float]], verify_ratios: dict[int, float],
                 suffix: tuple[SuffixDrafter, float] | None = None) -> None:
        """models: each model drafter with its measured step cost c over one target forward (per drafted
        token); suffix: the recipe book and its measured c, or None."""
        self.ngram = ngram
        self.models = models
        self.suffix = suffix
        self.verify_ratios = verify_ratios
        self.hidden_layers = tuple(sorted({layer for model, _ in models for layer in model.hidden_layers}))
        self.reset([])

    def reset(self, prompt_ids: list[int]) -> None:
        self.ngram.reset(prompt_ids)
        for model, _ in self.models:
            model.reset(prompt_ids)
        # each model drafter's conditional survival per position, from the steps it drafted
        self.survival = {model.name: SurvivalStats(*MODEL_PRIOR) for model, _ in self.models}
        if self.suffix:
            self.suffix[0].reset(prompt_ids)
        self.suffix_survival = SurvivalStats()  # per match-length row, like n-gram's per n
        self.suffix_row: int | None = None  # the row of the pending recalled proposal
        self.source: str | None = None

    def prefill(self, hidden: dict[int, torch.Tensor]) -> None:
        for model, _ in self.models:
            model.prefill({layer: hidden[layer] for layer in model.hidden_layers})

    def _recall(self, context: list[int], k: int, params: SamplingParams,
                generator: torch.Generator) -> tuple[float, Draft | None]:
        """The recipe book's proposal cut to the length that pays under its own record, and its rate."""
        self.suffix_row = None
        if self.suffix is None:
            return 0.0, None
        drafter, c = self.suffix
        recalled = drafter.propose(context, k, params, generator)
        if not recalled.tokens or recalled.parents is not None:
            return 0.0, None
        row = min(drafter.last.match, SUFFIX_MATCH_ROWS)
        rate, d = best_length(self.suffix_survival.confidence(row, len(recalled.tokens)), c, self.verify_ratios)
        self.suffix_row = row
        return rate, Draft(recalled.tokens[:d], None, confidence=self.suffix_survival.confidence(row, d),
                           source=recalled.source)

    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator) -> Draft:
        copied = self.ngram.propose(context, k, params, generator)
        recall_rate, recalled = self._recall(context, k, params, generator)
        (rate, d), model = max(((best_length(self.survival[m.name].confidence(0, k), c, self.verify_ratios), m)
                                for m, c in self.models), key=lambda pair: pair[0][0], default=((0.0, 0), None))
        copy_rate = expected_rate(copied.confidence, 0.0, self.verify_ratios) if copied.tokens else 0.0
        if copied.tokens and copy_rate >= max(rate, recall_rate):  # a tie goes to the free lookup
            self.suffix_row = None
            self.source = self.ngram.name
            copied.source = self.source
            return copied
        self.ngram.last_match = None  # not verified: no evidence for the n-gram statistics
        if recalled is not None and recall_rate >= max(rate, 1.0):  # and beats a plain step
            self.source = "suffix"
            return recalled  # its source says where it was recalled from (`suffix:INDEX:M:N`)
        self.suffix_row = None
        if rate < 1.0:  # a plain step (one token per one-token forward) beats every proposal: draft nothing
            self.source = None
            return Draft([], None)
        self.source = model.name
        draft = model.propose(context, d, params, generator)
        draft.source = self.source
        return draft

    def observe(self, accepted: int, emitted: list[int], hidden: dict[int, torch.Tensor],
                verified: int | None = None) -> None:
        self.ngram.observe(accepted, emitted, hidden, verified)  # counts only a verified n-gram proposal
        for model, _ in self.models:  # every model keeps its state (features, cache) either way
            model.observe(accepted, emitted, {layer: hidden[layer] for layer in model.hidden_layers}, verified)
        if self.suffix:  # the recipe book indexes every emitted token, whoever drafted it
            self.suffix[0].observe(accepted, emitted, hidden, verified)
        if self.source in self.survival and verified:
            self.survival[self.source].update(0, verified, accepted)
        if self.suffix_row is not None and verified:
            self.suffix_survival.update(self.suffix_row, verified, accepted)
        self.suffix_row = None

    def finish(self) -> None:
        if self.suffix:
            self.suffix[0].finish()
        for model, _ in self.models:
            model.finish()

    def memory_bytes(self) -> int:
        recipe_book = self.suffix[0].memory_bytes() if self.suffix else 0
        return self.ngram.memory_bytes() + recipe_book + sum(model.memory_bytes() for model, _ in self.models)
