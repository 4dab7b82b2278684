"""`quant`: self-speculation with a quantised copy of the target as the drafter.

The cheapest drafter that is nearly always right is the target itself, read with fewer bytes: its
decoder linears in int4 (default) or int8 (`quant.py`), its own KV cache, drafting k tokens
autoregressively like any small draft model (`small_model.py`). Optionally only its first L layers
run before the final norm and head (`quant_layers`): a quantised early exit, cheaper still but far
less often right. Verification is the fp32 target's as always, so greedy output is exactly `ar`'s and
sampling stays lossless with q = the copy's own softmax.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import SpecDecError
from ..kernels import Int4Linear, Int8Linear
from ..models import LoadedModel
from ..quant import BITS, cached_copy
from ..trees import TreeSize
from .small_model import DraftModelDrafter


@dataclass(frozen=True)
class QuantOptions:
    """The copy's precision (4 or 8 bits) and depth (None: every layer)."""

    quant_bits: int = 4
    quant_layers: int | None = None

    def validate(self, num_layers: int) -> None:
        if self.quant_bits not in BITS:
            raise SpecDecError(f"quant-bits must be 4 or 8 (got {self.quant_bits})")
        if self.quant_layers is not None and not 1 <= self.quant_layers <= num_layers:
            raise SpecDecError(f"quant-layers must be between 1 and {num_layers} (got {self.quant_layers})")


def quant_drafter(lm: LoadedModel, options: QuantOptions, dynamic_k: float | None = None,
                  tree: TreeSize | None = None) -> DraftModelDrafter:
    """A drafter over the (cached) quantised copy; its memory is the packed codes it adds to the target."""
    model = cached_copy(lm, options.quant_bits, options.quant_layers)
    owned = torch.nn.ModuleList(m for m in model.modules() if isinstance(m, (Int4Linear, Int8Linear)))
    return DraftModelDrafter(model, lm.device, name="quant", dynamic_k=dynamic_k, owned=owned, tree=tree)
