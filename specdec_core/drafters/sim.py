"""A controllable drafter for teaching: each drafted token is, independently with probability
`hit_rate`, the target's true next token, otherwise a wrong one.

This rebuilds the seed article's toy simulation on real target outputs, so the measured mean
accepted length can be compared with the i.i.d. theory (1 - a^(k+1)) / (1 - a).
The "true next token" comes from an oracle: the target's own greedy continuation of the context,
computed with its own KV cache. Oracle time is reported as overhead, not as draft time, so sim
behaves like a free drafter of known quality. Its q is one-hot, which keeps rejection sampling exact.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..errors import SpecDecError
from ..models import LoadedModel
from ..sampling import SamplingParams, penalise_repeats
from ..target import Target
from ..drafting import Draft, Drafter


@dataclass(frozen=True)
class SimOptions:
    """`sim`'s one knob: the chance that each drafted token is the target's own."""

    hit_rate: float = 0.7

    def validate(self, num_layers: int) -> None:
        if not 0 <= self.hit_rate <= 1:
            raise SpecDecError(f"hit rate must be in [0, 1] (got {self.hit_rate})")


class SimulatedDrafter(Drafter):
    name = "sim"

    def __init__(self, lm: LoadedModel, hit_rate: float, horizon: int, seed: int = 0) -> None:
        self.target = Target(lm)
        self.hit_rate = hit_rate
        self.horizon = horizon  # how far ahead the oracle looks each time it is (re)computed
        self.vocab_size = lm.model.config.vocab_size
        self.rng = torch.Generator().manual_seed(seed)  # its own stream: drafting never shifts sampling
        self.cache = None
        self.path: list[int] = []  # tokens in the oracle's cache + its greedy continuation

    def reset(self, prompt_ids: list[int]) -> None:
        self.cache = self.target.new_cache()
        self.path = []

    def _oracle(self, context: list[int], n: int, params: SamplingParams) -> list[int]:
        """The target's greedy next n tokens after `context`."""
        if len(self.path) >= len(context) + n and self.path[:len(context)] == context:
            return self.path[len(context):len(context) + n]
        common, cached = 0, self.cache.get_seq_length()
        while common < min(cached, len(context) - 1) and self.path[common] == context[common]:
            common += 1
        self.target.rollback(self.cache, cached - common)
        path = list(context)
        logits = self.target.forward(self.cache, context[common:], last_only=True).logits[-1]
        steps = max(n, self.horizon)
        for i in range(steps):
            token = int(torch.argmax(penalise_repeats(logits, path, params.repetition_penalty)))
            path.append(token)
            if i < steps - 1:
                logits = self.target.forward(self.cache, [token]).logits[-1]
        self.path = path  # the cache holds path[:-1]
        return path[len(context):len(context) + n]

    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator) -> Draft:
        start = time.perf_counter()
        truth = self._oracle(context, k, params)
        overhead = time.perf_counter() - start
        tokens = []
        for true_token in truth:
            if torch.rand((), generator=self.rng).item() < self.hit_rate:
                tokens.append(true_token)
            else:  # any token but the true one
                wrong = int(torch.randint(self.vocab_size - 1, (), generator=self.rng))
                tokens.append(wrong + (wrong >= true_token))
        # Its confidence is what it is built to be: each draft right with probability hit_rate.
        return Draft(tokens, None, overhead_s=overhead, confidence=[self.hit_rate] * len(tokens))

    def memory_bytes(self) -> int:
        return Target.cache_bytes(self.cache) if self.cache is not None else 0
