"""Drafters: one file each, one registry. Adding a drafter touches no decode loop."""
from __future__ import annotations

from ..errors import SpecDecError
from ..models import LoadedModel
from .base import Draft, Drafter
from .block import BlockDrafter, BlockNet, ParallelBlockNet
from .draft import DraftNet, serving_lm
from .eagle import EagleDrafter, EagleNet
from .heads import HeadsDrafter, MedusaHeads
from .mix import MixDrafter
from .ngram import NgramDrafter
from .sim import SimulatedDrafter
from .small_model import DraftModelDrafter, early_exit_model
from .vocab import ReducedVocab, module_vocab
from .weights import drafter_module

DRAFTERS = ("ngram", "ngram-fixed", "sim", "early-exit", "draft", "heads", "eagle", "block", "block-parallel", "mix")
TRAINED = ("draft", "heads", "eagle", "block", "block-parallel")  # drafters with trained weights (`train-draft --kind`)
MIX_MODEL = "heads"  # the trained drafter `mix` weighs against n-gram lookup: the fastest one on free text (BENCHMARKS §7)


def make_drafter(name: str, lm: LoadedModel, config) -> Drafter:
    """A fresh drafter (with its own state) for one request under `config` (a GenerationConfig)."""
    if name == "ngram":
        from ..costmodel import verify_ratios  # measured once per process and model

        return NgramDrafter(config.ngram_min, config.ngram_max, verify_ratios(lm, config.k))
    if name == "ngram-fixed":
        return NgramDrafter(config.ngram_min, config.ngram_max, verify_ratios=None)
    if name == "sim":
        # Greedy output never leaves the oracle's path, so compute it once; sampling recomputes per step.
        horizon = config.max_new_tokens + config.k if config.temperature == 0 else config.k
        return SimulatedDrafter(lm, config.hit_rate, horizon, seed=config.seed or 0)
    if name == "early-exit":
        model = early_exit_model(lm, config.early_exit_layers)
        return DraftModelDrafter(model, lm.device, name="early-exit", dynamic_k=config.dynamic_k)
    if name == "draft":
        net = drafter_module(lm, "draft", DraftNet)
        model, vocab = serving_lm(net, lm.model)
        return DraftModelDrafter(model, lm.device, name="draft", dynamic_k=config.dynamic_k, vocab=vocab, owned=net)
    if name == "heads":
        heads = drafter_module(lm, "heads", MedusaHeads)
        return HeadsDrafter(heads, module_vocab(heads, lm.model.lm_head.weight), lm.model.config.num_hidden_layers,
                            config.dynamic_k)
    if name == "eagle":
        net = drafter_module(lm, "eagle", EagleNet)
        return EagleDrafter(net, module_vocab(net, lm.model.lm_head.weight), lm.model, config.dynamic_k)
    if name in ("block", "block-parallel"):
        net = drafter_module(lm, name, BlockNet if name == "block" else ParallelBlockNet)
        return BlockDrafter(net, module_vocab(net, lm.model.lm_head.weight), lm.model, name, config.dynamic_k)
    if name == "mix":
        from ..costmodel import draft_cost, verify_ratios  # measured once per process and model

        ngram = NgramDrafter(config.ngram_min, config.ngram_max, verify_ratios(lm, config.k))
        return MixDrafter(ngram, make_drafter(MIX_MODEL, lm, config), draft_cost(lm, MIX_MODEL), verify_ratios(lm))
    raise SpecDecError(f"unknown drafter {name!r}: choose one of {', '.join(DRAFTERS)}")


__all__ = ["DRAFTERS", "TRAINED", "BlockDrafter", "BlockNet", "Draft", "Drafter", "DraftModelDrafter", "DraftNet", "EagleDrafter", "EagleNet", "HeadsDrafter",
           "MIX_MODEL", "MedusaHeads", "MixDrafter", "NgramDrafter", "ParallelBlockNet", "ReducedVocab", "SimulatedDrafter", "early_exit_model", "make_drafter"]
