"""Matmul kernel choice for small decode forwards on CPU.

A decode forward multiplies a handful of token rows x (n, d_in) by every weight matrix W (d_out, d_in).
`nn.Linear` computes x @ W.T. On this project's CPU (AMD EPYC, MKL, 2 threads) that call picks poor
kernels for small n: n = 1 goes through a matrix-vector routine that reaches about half the memory
bandwidth, n = 2–3 cost 2–3× the n = 1 time (each row re-reads W), and from n = 4 MKL switches to a
GEMM that costs ~1.9× a single token — the "4+ tokens cost double" effect in PLATFORM_NOTES.md.
Speculative decoding lives on the premise that verifying a few tokens costs about as much as one, so
we pick, per call, the fastest way we measured:

- n ≤ 2 rows (every AR step, 1-draft verifies): (W @ x.T).T, a lone row padded to two. It streams W
  once for both rows at close to copy bandwidth.
- n ≥ 3 rows (verify forwards, Jacobi windows, prefill): oneDNN's linear on a copy of W that was
  reordered ("packed") once at load into the blocked layout its small-batch kernel reads. This is
  what torch.compile's CPU backend does with frozen weights; here it is done by hand so the eager
  model keeps working. The price is memory: the packed copy doubles the weights' bytes.

Per-forward times for SmolLM2-135M are in BENCHMARKS.md (`scripts/ab_kernels.py` re-measures them).
The results are the same products up to float rounding (a different summation order), like any change
of kernel. The weights must not change after packing (this is an inference-only engine). Set
SPECDEC_PLAIN_LINEAR=1 to keep nn.Linear's own kernel (for an A/B comparison).
"""
from __future__ import annotations

import os
import types

import torch
import torch.nn.functional as F

# Up to this many rows the weight-left product is the fastest; above it the packed oneDNN kernel is.
WEIGHT_LEFT_MAX_ROWS = 2
# The batch-size hint the weights are packed for; measured flat from 3 to 16 rows with hints 4..16.
PACK_HINT = 8


def pack_weight(weight: torch.Tensor) -> torch.Tensor | None:
    """The oneDNN-packed copy of a float32 weight, or None where this build or CPU cannot do it."""
    if weight.dtype != torch.float32 or not torch.backends.mkldnn.is_available():
        return None
    try:
        with torch.no_grad():
            packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), PACK_HINT)
            probe = torch.zeros(WEIGHT_LEFT_MAX_ROWS + 1, weight.shape[1])
            torch.ops.mkldnn._linear_pointwise(probe, packed, None, "none", [], "")
        return packed
    except (RuntimeError, AttributeError):
        return None


def small_batch_linear(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """nn.Linear.forward through the fastest kernel for this many rows: same result up to rounding."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()  # (n, d_in); a strided input would be copied inside mm
    n = rows.shape[0]
    if n <= WEIGHT_LEFT_MAX_ROWS:
        if n == 1:  # a lone row would take the slow matrix-vector path: pad it to two (a copy of itself)
            rows = rows.expand(2, -1).contiguous()
        y = (self.weight @ rows.T).T[:n]  # (n, d_out)
        if self.bias is not None:
            y = y + self.bias
    elif self.packed_weight is not None:
        y = torch.ops.mkldnn._linear_pointwise(rows, self.packed_weight, self.bias, "none", [], "")  # (n, d_out)
    else:
        y = F.linear(rows, self.weight, self.bias)
    return y.reshape(*x.shape[:-1], -1)


def plain_linear_requested() -> bool:
    return os.environ.get("SPECDEC_PLAIN_LINEAR", "") not in ("", "0")


def use_fast_small_matmuls(model: torch.nn.Module, packed: bool = True) -> int:
    """Route every nn.Linear of a CPU model through `small_batch_linear` (packed=False: weight-left for
    few rows, nn.Linear's kernel otherwise; for A/B runs). Returns how many layers were changed."""
    if plain_linear_requested():
        return 0
    changed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.packed_weight = pack_weight(module.weight) if packed else None
            module.forward = types.MethodType(small_batch_linear, module)
            changed += 1
    return changed


# --- weight-only quantised linears (built by quant.py) -------------------------------------------
# torch's CPU kernels for packed int4 / int8 weights are fast only with bf16 activations: the input is
# cast to bf16 and the output back to the caller's dtype, so everything around a linear stays fp32.
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
