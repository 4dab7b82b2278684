"""The drafter kinds `train-draft` and `eval-draft` know, in one table.

A kind says which target layers its training reads from the data, how a fresh module is built, what it
computes on a batch (objectives.py) and how far it can draft. Nothing else in training asks which
kind it is running.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..drafters import BlockNet, DraftNet, EagleNet, MedusaHeads, ParallelBlockNet, ReducedVocab
from ..drafters.block import RANK, feature_layers as block_layers
from ..models import LoadedModel
from .batches import Batch
from .block import block_logits, block_loss, calibrate
from .objectives import distillation_loss, eagle_logits, heads_logits, token_lm_logits

Logits = Callable[[torch.nn.Module, ReducedVocab, torch.nn.Module, Batch, int], torch.Tensor]
# (module, vocab, target, batch, train depth, final layer, generator) -> (loss, per-position top-1 agreement)
Loss = Callable[[torch.nn.Module, ReducedVocab, torch.nn.Module, Batch, int, int, torch.Generator],
                tuple[torch.Tensor, list[float]]]


@dataclass(frozen=True)
class Kind:
    cls: type[torch.nn.Module]
    features: Callable[[LoadedModel], tuple[int, ...]]  # the target layers it reads (besides the final one)
    build: Callable[[LoadedModel, int, int, int], torch.nn.Module]  # (lm, N, depth, intermediate) -> fresh module
    logits: Logits  # (K, B, n, N): draft i of anchor m at [i-1, b, m]
    train_depth: Callable[[int], int]  # --depth -> the draft positions the loss unrolls
    max_k: Callable[[torch.nn.Module], int | None]  # the most it drafts (None: no limit)
    loss: Loss | None = None  # None: the distillation loss on `logits` (objectives.py)
    # Kinds with a confidence head: (module, vocab, target, held-out sequences, fit) -> calibration report,
    # fitting the module's temperatures first where `fit` (calibration.py).
    calibrate: Callable[[torch.nn.Module, ReducedVocab, torch.nn.Module, list, bool], dict] | None = None

    def training_loss(self, module: torch.nn.Module, vocab: ReducedVocab, target: torch.nn.Module, batch: Batch,
                      depth: int, final_layer: int, generator: torch.Generator) -> tuple[torch.Tensor, list[float]]:
        if self.loss is not None:
            return self.loss(module, vocab, target, batch, depth, final_layer, generator)
        return distillation_loss(self.logits(module, vocab, target, batch, depth), vocab, batch, final_layer)


def _heads(lm: LoadedModel, n: int, depth: int, intermediate: int) -> torch.nn.Module:
    return MedusaHeads({"hidden": lm.model.config.hidden_size, "heads": depth, "vocab": n})


def _eagle(lm: LoadedModel, n: int, depth: int, intermediate: int) -> torch.nn.Module:
    return EagleNet(EagleNet.target_config(lm, n, intermediate or None))


def _draft(lm: LoadedModel, n: int, depth: int, intermediate: int) -> torch.nn.Module:
    config = DraftNet.target_config(lm, n) if lm.name != "tiny" else DraftNet.tiny_config(lm)
    if intermediate:
        config["intermediate"] = intermediate
    config["vocab"] = n
    return DraftNet(config).from_target(lm.model)


def _block(rank: int) -> Callable[[LoadedModel, int, int, int], torch.nn.Module]:
    def build(lm: LoadedModel, n: int, depth: int, intermediate: int) -> torch.nn.Module:
        cls = BlockNet if rank else ParallelBlockNet
        config = BlockNet.target_config(lm, n, rank) if lm.name != "tiny" else cls.tiny_config(lm)
        if intermediate:
            config["intermediate"] = intermediate
        config["vocab"] = n
        return cls(config)
    return build


def _block_kind(rank: int) -> Kind:
    # One backbone forward per block, the Markov head of rank `rank` (0: block-parallel) and the
    # confidence head; many random blocks per sequence, the published three-part loss (block.py).
    return Kind(BlockNet if rank else ParallelBlockNet, lambda lm: block_layers(lm.model.config.num_hidden_layers),
                _block(rank), block_logits, lambda depth: depth, lambda m: m.config["block"],
                lambda m, v, t, b, depth, final, g: block_loss(m, v, t, b, final, g), calibrate)


KINDS: dict[str, Kind] = {
    # Medusa: head i reads the final state itself; --depth is the number of heads.
    "heads": Kind(MedusaHeads, lambda lm: (), _heads,
                  lambda m, v, t, b, k: heads_logits(m, v, b, t.config.num_hidden_layers, k),
                  lambda depth: depth, lambda m: len(m.blocks)),
    # EAGLE: fused low/middle/high features; --depth is the training-time-test unroll.
    "eagle": Kind(EagleNet, lambda lm: tuple(EagleNet.target_config(lm, 1)["layers"]), _eagle, eagle_logits,
                  lambda depth: depth, lambda m: None),
    # A token-only LM: draft i at anchor m is its ordinary next-token output at row m+i, so one shift
    # already trains every row it will ever draft.
    "draft": Kind(DraftNet, lambda lm: (), _draft, token_lm_logits, lambda depth: 1, lambda m: None),
    "block": _block_kind(RANK),
    "block-parallel": _block_kind(0),
}


def layers_needed(kind: str, lm: LoadedModel) -> tuple[int, ...]:
    """The hidden layers a kind's data must hold: its features and the final state (the teacher)."""
    return tuple(sorted({lm.model.config.num_hidden_layers, *KINDS[kind].features(lm)}))
