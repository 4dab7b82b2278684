"""Drafters: one file each, one registry. Adding a drafter touches no decode loop."""
from __future__ import annotations

from ..errors import SpecDecError
from ..models import LoadedModel
from .base import Draft, Drafter
from .ngram import NgramDrafter
from .sim import SimulatedDrafter
from .small_model import DraftModelDrafter, early_exit_model

DRAFTERS = ("ngram", "ngram-fixed", "sim", "early-exit")


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
        return DraftModelDrafter(model, lm.device, name="early-exit", dynamic_k=config.dynamic_k, shared_params=True)
    raise SpecDecError(f"unknown drafter {name!r}: choose one of {', '.join(DRAFTERS)}")


__all__ = ["DRAFTERS", "Draft", "Drafter", "DraftModelDrafter", "NgramDrafter", "SimulatedDrafter",
           "early_exit_model", "make_drafter"]
