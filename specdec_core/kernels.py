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
