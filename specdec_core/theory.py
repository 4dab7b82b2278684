"""Closed-form expectations for speculative decoding under i.i.d. acceptance.

alpha: probability that each drafted token is accepted (independently).
k: number of drafted tokens per step.  c: cost of one draft step / cost of one target forward.
"""
from __future__ import annotations

from collections.abc import Mapping


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """E[tokens per target forward] = 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha).

    Step i (1-based) is reached only if the i-1 drafts before it were accepted; the correction or
    bonus token always adds 1.
    """
    if alpha >= 1.0:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def approx_tokens_per_step(alpha: float, k: int) -> float:
    """The source article's k*alpha + (1 - alpha).

    Exact for all-or-nothing blocks without a bonus token: with probability alpha the whole block of
    k drafts is right (k tokens), otherwise one token. Against the i.i.d. expectation
    (`expected_tokens_per_step`) it is too low for k = 1 (1 vs 1 + alpha) and k = 2 (1 + alpha vs
    1 + alpha + alpha^2) at every 0 < alpha < 1; for k >= 3 it is too high below a crossing point
    (about 0.62 for k = 3, 0.81 for k = 4) and too low above it.
    """
    return k * alpha + (1 - alpha)


def walltime_speedup(alpha: float, k: int, c: float) -> float:
    """Leviathan et al.'s walltime improvement: (1 - alpha^(k+1)) / ((1 - alpha)(k*c + 1)).

    Assumes verifying k+1 tokens costs the same as one target forward.
    """
    return expected_tokens_per_step(alpha, k) / (k * c + 1)


def walltime_speedup_with_verify_cost(alpha: float, k: int, c: float, verify_ratio: float) -> float:
    """As walltime_speedup, but verifying k+1 tokens costs `verify_ratio` times a 1-token forward
    (measured by the cost model; ~1.2-2 on a CPU, ~1 on a big GPU at batch 1)."""
    return expected_tokens_per_step(alpha, k) / (k * c + verify_ratio)


def best_k(alpha: float, c: float, k_max: int = 16, verify_ratios: dict[int, float] | None = None,
           k_min: int = 1) -> int:
    """The k in k_min..k_max with the highest expected walltime speedup (verify cost per k if given).
    k = 0 (allowed with k_min=0) is a plain AR step, speedup 1; ties go to the smaller k."""
    def speedup(k: int) -> float:
        ratio = verify_ratios.get(k, 1.0) if verify_ratios else 1.0
        return walltime_speedup_with_verify_cost(alpha, k, c, ratio)
    return max(range(k_min, k_max + 1), key=speedup)


def expected_rate(conditional: list[float], c: float, verify_ratios: Mapping[int, float]) -> float:
    """Tokens per unit of target-forward time of verifying drafts with these conditional survivals a_1 .. a_d
    (draft cost c per drafted token): (1 + a_1 + a_1·a_2 + …) / (R(d) + d·c), against 1 for a plain step."""
    survival, tokens = 1.0, 1.0
    for a in conditional:
        survival *= a
        tokens += survival
    d = len(conditional)
    return tokens / (verify_ratios.get(d, verify_ratios[max(verify_ratios)]) + d * c)


def best_length(conditional: list[float], c: float, verify_ratios: Mapping[int, float]) -> tuple[float, int]:
    """(expected rate, d) of the most paying draft length d = 1 .. len(conditional)."""
    return max((expected_rate(conditional[:d], c, verify_ratios), d) for d in range(1, len(conditional) + 1))


def speedup_by_k(tau: Mapping[int, float], verify_ratios: Mapping[int, float], c: float) -> dict[int, float]:
    """k -> the walltime speedup of drafting k tokens a step, from *measured* tokens per step tau[k] (e.g.
    walked offline on held-out data, which tracks the decode loop) instead of an i.i.d. alpha:
    tau[k] / (k*c + verify_ratios[k]), where verify_ratios[k] prices verifying k drafts (k+1 tokens)."""
    return {k: t / (k * c + verify_ratios[k]) for k, t in sorted(tau.items())}


def best_measured_k(tau: Mapping[int, float], verify_ratios: Mapping[int, float], c: float) -> int:
    """The k with the highest `speedup_by_k`; ties go to the smaller k (a shorter draft wastes less)."""
    speeds = speedup_by_k(tau, verify_ratios, c)
    return max(speeds, key=lambda k: (speeds[k], -k))


def rule_of_thumb_profitable(alpha: float, k: int, c: float) -> bool:
    """The source article's rule of thumb: profitable when k*alpha > 1 + k*c_q/c_p.

    It disagrees with the exact walltime formula: e.g. at c -> 0 the exact speedup is > 1 for any
    alpha > 0, while the rule demands k*alpha > 1.
    """
    return k * alpha > 1 + k * c


def break_even_alpha(k: int, c: float, verify_ratio: float = 1.0, tol: float = 1e-9) -> float:
    """The alpha at which walltime_speedup_with_verify_cost = 1 (bisection; 1.0 if never profitable)."""
    if walltime_speedup_with_verify_cost(1.0, k, c, verify_ratio) < 1:
        return 1.0
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if walltime_speedup_with_verify_cost(mid, k, c, verify_ratio) >= 1:
            hi = mid
        else:
            lo = mid
    return hi


def prob_all_accepted(alpha: float, i: int) -> float:
    """P(the first i drafts of a step are all accepted) = alpha^i: the expected per-position
    acceptance curve under i.i.d. acceptance."""
    return alpha ** i if i > 0 else 1.0


def accepted_length_pmf(alpha: float, k: int) -> list[float]:
    """P(exactly j of k drafts accepted), j = 0..k: alpha^j (1 - alpha) for j < k, alpha^k for j = k."""
    return [alpha ** j * (1 - alpha) for j in range(k)] + [alpha ** k]


# A (k+1)-token forward reads the same weights as a 1-token step and does more of everything else, so
# r(k) = t(k+1) / t(1) >= 1 on any hardware. Below R_FLOOR (5 % of noise allowed) the 1-token step is the
# slow one — a kernel choice, not physics — and every speedup measured against it is inflated. The one
# threshold used by the guard (guard.py), the targets and the quiz.
R_FLOOR = 0.95
# A chain that drafts k tokens commits at most k + 1 per verify forward, so it cannot beat plain decoding
# by more than k + 1 (with a free drafter and r = 1); CEILING_SLACK allows for timing noise.
CEILING_SLACK = 1.05
