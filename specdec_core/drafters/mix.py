"""`mix`: per step, verify whichever of two drafters promises more accepted tokens per second.

Production systems run prompt lookup *and* a trained drafter: copying wins by far when the answer
repeats its input, the trained drafter wins on free text. Which one to verify is decided every step
from numbers the step already has, never from the prompt's text or category:
- the n-gram proposal (free to compute) with its own running conditional survival per position;
- the trained drafter's running conditional survival a_1 .. a_k (this request's verified steps);
- this machine's measured costs: a draft step of the trained drafter over one target forward (c), and
  the verify ratios R(d) of a forward over d+1 tokens (`costmodel`).
Expected tokens per target-forward time of a d-draft proposal with prefix survivals s_i:
(1 + s_1 + ... + s_d) / (R(d) + d c), against 1 for a plain step (no drafts). The trained drafter is only run when it wins, but it sees every
verification forward (its hidden states, its KV cache), so it is always ready. Either way the verify
step is the usual one, so the output stays exactly the target's.
"""
from __future__ import annotations

import torch

from ..sampling import SamplingParams
from ..drafting import Draft, Drafter
from .ngram import NgramDrafter, SurvivalStats


def expected_rate(conditional: list[float], c: float, verify_ratios: dict[int, float]) -> float:
    """Tokens per unit of target-forward time of verifying drafts with these conditional survivals."""
    survival, tokens = 1.0, 1.0
    for a in conditional:
        survival *= a
        tokens += survival
    d = len(conditional)
    return tokens / (verify_ratios.get(d, verify_ratios[max(verify_ratios)]) + d * c)


class MixDrafter(Drafter):
    name = "mix"

    def __init__(self, ngram: NgramDrafter, model: Drafter, c: float, verify_ratios: dict[int, float]) -> None:
        self.ngram = ngram
        self.model = model
        self.c = c  # the model drafter's measured step cost over one target forward
        self.verify_ratios = verify_ratios
        self.hidden_layers = model.hidden_layers
        self.reset([])

    def reset(self, prompt_ids: list[int]) -> None:
        self.ngram.reset(prompt_ids)
        self.model.reset(prompt_ids)
        self.survival = SurvivalStats()  # the model drafter's conditional survival per position
        self.source: str | None = None

    def prefill(self, hidden: dict[int, torch.Tensor]) -> None:
        self.model.prefill(hidden)

    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator) -> Draft:
        copied = self.ngram.propose(context, k, params, generator)
        model_rate = expected_rate(self.survival.confidence(0, k), self.c, self.verify_ratios)
        if copied.tokens and expected_rate(copied.confidence, 0.0, self.verify_ratios) >= model_rate:
            self.source = self.ngram.name
            copied.source = self.source
            return copied
        self.ngram.last_match = None  # not verified: no evidence for the n-gram statistics
        if model_rate < 1.0:  # a plain step (one token per one-token forward) beats both: draft nothing
            self.source = None
            return Draft([], None)
        self.source = self.model.name
        draft = self.model.propose(context, k, params, generator)
        draft.source = self.source
        return draft

    def observe(self, accepted: int, emitted: list[int], hidden: dict[int, torch.Tensor],
                verified: int | None = None) -> None:
        self.ngram.observe(accepted, emitted, hidden, verified)  # counts only a verified n-gram proposal
        self.model.observe(accepted, emitted, hidden, verified)  # keeps its state either way
        if self.source == self.model.name and verified:
            self.survival.update(0, verified, accepted)

    def memory_bytes(self) -> int:
        return self.ngram.memory_bytes() + self.model.memory_bytes()
