"""Weight-only quantised linears (built by quant.py).

torch's CPU kernels for packed int4 / int8 weights are fast only with bf16 activations: the input is
cast to bf16 and the output back to the caller's dtype, so everything around a linear stays fp32.
"""
from __future__ import annotations

import torch

INT4_INNER_K_TILES = 2  # the kernel's packing parameter (2, 4 or 8 divide K / 16 for K = 576 and 1536)


class Int4Linear(torch.nn.Module):
    """y = x Wᵀ with W = (q − 8)·scale + zero per group of `group` inputs, q in 0..15, scale/zero in bf16."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group: int = 32) -> None:
        super().__init__()
        self.out_features, self.in_features = q.shape
        self.group = group
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32).contiguous(),
                                                                                          INT4_INNER_K_TILES))
        # (K / group, N, 2): the kernel's layout of each group's scale and zero
        self.register_buffer("scales_and_zeros", torch.stack((scale, zero), -1).transpose(0, 1).contiguous().to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed, self.group, self.scales_and_zeros)
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)


class Int8Linear(torch.nn.Module):
    """y = x Wᵀ with W = q · scale per output row, q in −127..127, scale in bf16."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__()
        self.out_features, self.in_features = q.shape
        self.register_buffer("weight_int8", q.to(torch.int8).contiguous())
        self.register_buffer("scales", scale.to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        y = torch.ops.aten._weight_int8pack_mm(rows, self.weight_int8, self.scales)
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
