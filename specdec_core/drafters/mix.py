"""`mix`: per step, verify whichever drafter promises more accepted tokens per second.

Production systems run prompt lookup *and* a model drafter: copying wins by far when the answer repeats
its input, a model drafter wins on free text. Which one to verify, and how many of a model's drafts,
is decided every step from numbers the step already has, never from the prompt's text or category:
- the n-gram proposal (free to compute) with its own running conditional survival per position;
- with `mix_suffix`, the recipe book's proposal too (`suffix`: the request and earlier answers), already
  cut by its own record to the length that pays (its expected rate, `SuffixDrafter.rate`);
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
from ..theory import best_length, expected_rate
from .ngram import NgramDrafter, NgramOptions, SurvivalStats
from .suffix import SuffixDrafter

MODEL_PRIOR = (4, 5)  # a model drafter's prior survival per position: 4 of 5 (optimistic, so it gets tried)


@dataclass(frozen=True)
class MixOptions(NgramOptions):
    """`mix`'s knobs: the n-gram lookup's, and whether the recipe book (`suffix`, with its own options)
    is one more source."""

    mix_suffix: bool = False


class MixDrafter(Drafter):
    name = "mix"

    def __init__(self, ngram: NgramDrafter, models: list[tuple[Drafter, float]], verify_ratios: dict[int, float],
                 suffix: SuffixDrafter | None = None) -> None:
        """models: each model drafter with its measured step cost c over one target forward (per drafted
        token); suffix: the recipe book, built with the cut (its proposal is computed every step, like the
        n-gram lookup's, so its cost is paid before the choice and weighs nothing in it), or None."""
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
            self.suffix.reset(prompt_ids)
        self.source: str | None = None

    def prefill(self, hidden: dict[int, torch.Tensor]) -> None:
        for model, _ in self.models:
            model.prefill({layer: hidden[layer] for layer in model.hidden_layers})

    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator) -> Draft:
        copied = self.ngram.propose(context, k, params, generator)
        recalled = self.suffix.propose(context, k, params, generator) if self.suffix else Draft([], None)
        copy_rate = expected_rate(copied.confidence, 0.0, self.verify_ratios) if copied.tokens else 0.0
        recall_rate = self.suffix.rate if recalled.tokens else 0.0  # >= 1: the cut drafts nothing that loses to a plain step
        (rate, d), model = max(((best_length(self.survival[m.name].confidence(0, k), c, self.verify_ratios), m)
                                for m, c in self.models), key=lambda pair: pair[0][0], default=((0.0, 0), None))
        # the free proposals first (a tie goes to the lookup, then to the book); a model only when it beats them
        if copied.tokens and copy_rate >= max(rate, recall_rate):
            self.source, draft = self.ngram.name, copied
        elif recalled.tokens and recall_rate >= rate:
            self.source, draft = "suffix", recalled  # its source says where it came from (`suffix:INDEX:M:N`)
        elif rate >= 1.0:
            self.source, draft = model.name, model.propose(context, d, params, generator)
        else:  # a plain step (one token per one-token forward) beats every proposal: draft nothing
            self.source, draft = None, Draft([], None)
        # a proposal not verified is no evidence for its drafter's record
        if self.source != self.ngram.name:
            self.ngram.last_match = None
        if self.suffix and self.source != "suffix":
            self.suffix.withdraw()
        if self.source in (self.ngram.name, *self.survival):
            draft.source = self.source
        return draft

    def observe(self, accepted: int, emitted: list[int], hidden: dict[int, torch.Tensor],
                verified: int | None = None) -> None:
        self.ngram.observe(accepted, emitted, hidden, verified)  # counts only a verified n-gram proposal
        for model, _ in self.models:  # every model keeps its state (features, cache) either way
            model.observe(accepted, emitted, {layer: hidden[layer] for layer in model.hidden_layers}, verified)
        if self.suffix:  # the recipe book indexes every emitted token, whoever drafted it
            self.suffix.observe(accepted, emitted, hidden, verified)
        if self.source in self.survival and verified:
            self.survival[self.source].update(0, verified, accepted)

    def finish(self) -> None:
        if self.suffix:
            self.suffix.finish()
        for model, _ in self.models:
            model.finish()

    def memory_bytes(self) -> int:
        recipe_book = self.suffix.memory_bytes() if self.suffix else 0
        return self.ngram.memory_bytes() + recipe_book + sum(model.memory_bytes() for model, _ in self.models)
