"""Matmul kernel choice for small decode forwards on CPU.

A decode forward multiplies a handful of token rows x (n, d_in) by every weight matrix W (d_out, d_in).
`nn.Linear` computes x @ W.T. On this project's CPU (AMD EPYC, MKL, 2 threads) that call picks poor
kernels for small n: n = 1 goes through a matrix-vector routine that reaches about half the memory
bandwidth, n = 2–3 cost 2–3× the n = 1 time (each row re-reads W), and from n = 4 MKL switches to a
GEMM that costs ~1.9× a single token — the "4+ tokens cost double" effect in PLATFORM_NOTES.md.
Writing the same product as (W @ x.T).T streams W once for all n rows at close to copy bandwidth, and
padding a lone row to two keeps it on that path. Measured on SmolLM2-135M (ms per forward, median):
n = 1: 70 → 36, n = 2: 116 → 59, n = 4: 101 → 63, n = 8: 110 → 85 (see BENCHMARKS.md, `python -m specdec_core profile`).

The results are the same products up to float rounding (a different summation order), like any change
of kernel. Set SPECDEC_PLAIN_LINEAR=1 to keep nn.Linear's own kernel (for an A/B comparison).
"""
from __future__ import annotations

import os
import types

import torch
import torch.nn.functional as F

# Above this many rows (prefill, wide Jacobi windows) the library's own GEMM is as good or better.
MAX_ROWS = 8


def weight_left_linear(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """nn.Linear.forward computed as (W @ x.T).T for a few rows: same result, a faster kernel here."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()  # (n, d_in); a strided input would be copied inside mm
    n = rows.shape[0]
    if n > MAX_ROWS:
        return F.linear(x, self.weight, self.bias)
    if n == 1:  # a lone row would take the slow matrix-vector path: pad it to two
        rows = torch.cat([rows, torch.zeros_like(rows)])
    y = (self.weight @ rows.T).T[:n]  # (n, d_out)
    if self.bias is not None:
        y = y + self.bias
    return y.reshape(*x.shape[:-1], -1)


def plain_linear_requested() -> bool:
    return os.environ.get("SPECDEC_PLAIN_LINEAR", "") not in ("", "0")


def use_fast_small_matmuls(model: torch.nn.Module) -> int:
    """Route every nn.Linear of a CPU model through `weight_left_linear`; returns how many were changed."""
    if plain_linear_requested():
        return 0
    changed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.forward = types.MethodType(weight_left_linear, module)
            changed += 1
    return changed
