"""The guard against impossible numbers: flags for figures the hardware cannot produce.

Two checks, both consequences of one forward reading all the weights once:
- r(k) = t(k+1) / t(1) below theory.R_FLOOR: a multi-token forward came out cheaper than a plain step.
- a chain's speedup above k + 1 (theory.CEILING_SLACK allowed): more than every drafted token accepted.
Either means the baseline's one-token step is slow, and the first suspect is the kernel table (which
kernel the linears call for one row). The flags are written next to the figures, in the printed output
and in the result file; the course refuses to render a flagged figure without its caveat.
"""
from __future__ import annotations

from collections.abc import Mapping

from .theory import CEILING_SLACK, R_FLOOR


def raw_ratios(forward_s: list[dict], batch: int = 1) -> dict[int, float]:
    """k -> r(k) = t(k+1) / t(1) from a profile's measured forwards at `batch` (no interpolation, no
    running maximum: the raw medians, which is what the guard must see)."""
    times = {r["tokens"]: r["seconds"] for r in forward_s if r["batch"] == batch}
    if 1 not in times:
        return {}
    return {t - 1: s / times[1] for t, s in sorted(times.items()) if t > 1}


def ratio_flags(ratios: Mapping[int, float], table: str | None = None) -> list[str]:
    """One line per r(k) below R_FLOOR, naming the kernel table as the first suspect."""
    suspect = f" (kernel table: {table})" if table else ""
    return [f"r({k}) = {r:.3f} < {R_FLOOR}: a {k + 1}-token forward is cheaper than the 1-token step, so the plain "
            f"step is slow, not the hardware fast; suspect the kernel table first{suspect}"
            for k, r in sorted(ratios.items()) if r < R_FLOOR]


def ceiling(draft_k: int) -> float:
    """The highest speedup a chain (or a tree of that depth) drafting `draft_k` tokens can show."""
    return (draft_k + 1) * CEILING_SLACK


def speedup_flags(label: str, draft_k: int | None, per_prompt: Mapping[str, float], overall: float) -> list[str]:
    """One line for a mode whose speedup (overall, or any prompt's median over repeats) is above k + 1."""
    if not draft_k:
        return []
    over = {p: s for p, s in per_prompt.items() if s > ceiling(draft_k)}
    if not over and overall <= ceiling(draft_k):
        return []
    worst = max(over.items(), key=lambda kv: kv[1]) if over else None
    detail = f"; {len(over)} prompt(s) above it, worst {worst[0]} at {worst[1]:.2f}x" if worst else ""
    return [f"{label}: speedup {overall:.2f}x with k = {draft_k} (ceiling k + 1 = {draft_k + 1}){detail}: the plain "
            f"step is slower than a verify; suspect the kernel table first"]
