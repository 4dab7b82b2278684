"""The data run's sequences as padded training batches, in an order fixed by (seed, epoch).

Everything is aligned by *anchor*: row m of a sequence is the target's state at position
prompt_len - 1 + m; the context then ends with the token at position +1 (what the target's own head
predicted from row m), and draft i guesses the token at position +1+i, whose target distribution is
the output head on row m+i. Every drafter kind produces logits indexed the same way (K, B, n, N), so
one loss and one offline evaluation serve them all.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ..models import LoadedModel
from ..target import Target
from . import features
from .corpus import Corpus


@dataclass
class Sequence:
    next_tokens: torch.Tensor  # (rows,) int64: the token after each row's position (the last one: 0, none)
    position: int  # the absolute position of row 0 (prompt_len - 1)
    tokens: torch.Tensor  # (prompt_len + rows - 1,) int64: prompt and response, what a token-only drafter reads
    # layer -> (rows, H) float16: read from the feature cache, or computed when a batch is made (online)
    hidden: dict[int, torch.Tensor] | Callable[[], dict[int, torch.Tensor]]
    greedy: bool  # generated greedily (even sequence index) or sampled

    @property
    def rows(self) -> int:
        return len(self.next_tokens)

    def features(self) -> dict[int, torch.Tensor]:
        return self.hidden() if callable(self.hidden) else self.hidden


@dataclass
class Batch:
    next_tokens: torch.Tensor  # (B, n)
    positions: torch.Tensor  # (B, n) absolute rotary positions
    rows: torch.Tensor  # (B,) valid rows per sequence (the rest is padding)
    hidden: dict[int, torch.Tensor]  # layer -> (B, n, H) float32
    tokens: torch.Tensor  # (B, T) prompt + response from position 0, right-padded with 0
    starts: torch.Tensor  # (B,) the position of row 0 in `tokens` (prompt_len - 1)

    def valid(self, ahead: int) -> torch.Tensor:
        """(B, n) bool: anchors m whose row m + ahead exists."""
        n = self.next_tokens.shape[1]
        return torch.arange(n, device=self.rows.device)[None, :] + ahead < self.rows[:, None]

    def to(self, device: torch.device) -> "Batch":
        return Batch(self.next_tokens.to(device), self.positions.to(device), self.rows.to(device),
                     {layer: h.to(device) for layer, h in self.hidden.items()}, self.tokens.to(device),
                     self.starts.to(device))


def load_splits(lm: LoadedModel, corpus: Corpus, layers: tuple[int, ...], mode: str = "cache",
                on_sequence: Callable[[int], None] = lambda n: None, cache_root: Path | None = None
                ) -> tuple[list[Sequence], list[Sequence]]:
    """The corpus's train and held-out sequences (`Corpus.heldout`), with the target's states at
    `layers` from the feature cache (under `cache_root`, default the lab's cache) or computed online
    (features.py)."""
    if mode == "cache":
        hidden = features.cached(lm, corpus, layers, on_sequence=on_sequence, root=cache_root)
    else:
        target = Target(lm)
        hidden = [features.online(target, s.ids, s.prompt_len, layers) for s in corpus.sequences]
    splits: tuple[list[Sequence], list[Sequence]] = ([], [])
    for stored, h, held in zip(corpus.sequences, hidden, corpus.heldout()):
        tokens = torch.tensor(stored.ids, dtype=torch.long)
        next_tokens = torch.cat((tokens[stored.prompt_len:], torch.zeros(1, dtype=torch.long)))
        splits[held].append(Sequence(next_tokens, stored.prompt_len - 1, tokens, h, stored.greedy))
    return splits


def decoded_sequence(target, prompt_ids: list[int], output_ids: list[int], layers: tuple[int, ...]) -> Sequence:
    """A decoded answer as training sees one: the target's states at `layers` captured on prompt +
    output (`features.capture`), so `evaluate` measures it exactly as it measures held-out data."""
    ids, prompt_len = prompt_ids + output_ids, len(prompt_ids)
    hidden = features.capture(target, ids, prompt_len, layers)
    return Sequence(torch.tensor(ids[prompt_len:] + [0]), prompt_len - 1, torch.tensor(ids), hidden, True)


def make_batch(sequences: list[Sequence]) -> Batch:
    n = max(s.rows for s in sequences)
    b = len(sequences)
    next_tokens = torch.zeros(b, n, dtype=torch.long)
    positions = torch.zeros(b, n, dtype=torch.long)
    states = [s.features() for s in sequences]
    hidden = {layer: torch.zeros(b, n, h.shape[1]) for layer, h in states[0].items()}
    tokens = torch.zeros(b, max(len(s.tokens) for s in sequences), dtype=torch.long)
    for i, s in enumerate(sequences):
        next_tokens[i, :s.rows] = s.next_tokens
        positions[i] = torch.arange(s.position, s.position + n)
        tokens[i, :len(s.tokens)] = s.tokens
        for layer, h in states[i].items():
            hidden[layer][i, :s.rows] = h.float()
    return Batch(next_tokens, positions, torch.tensor([s.rows for s in sequences]), hidden, tokens,
                 torch.tensor([s.position for s in sequences]))


def epoch_order(count: int, seed: int, epoch: int) -> list[int]:
    """The sequence order of one epoch: a function of (seed, epoch) only, so a resumed run sees the
    same batches as an uninterrupted one."""
    return torch.randperm(count, generator=torch.Generator().manual_seed(seed * 1000 + epoch)).tolist()


def batch_at(sequences: list[Sequence], step: int, batch_size: int, seed: int) -> Batch:
    """Training step `step`'s batch (epochs of whole batches; the remainder of an epoch is dropped)."""
    per_epoch = max(len(sequences) // batch_size, 1)
    epoch, index = divmod(step, per_epoch)
    order = epoch_order(len(sequences), seed, epoch)
    return make_batch([sequences[i] for i in order[index * batch_size:(index + 1) * batch_size]])
