"""From logits to tokens, and the accept/reject rule that keeps speculative sampling lossless.

Notation as in Leviathan et al. (2023) and transformers: **p is the target model's distribution,
q is the drafter's**. (gpt-fast's comments swap the two; this codebase never does.)

The ladder: `process_logits` -> `logits_to_probs` -> `sample` for plain decoding;
`acceptance_probability` + `residual_distribution` -> `verify_sampled` for speculative decoding.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from .errors import SpecDecError


@dataclass(frozen=True)
class SamplingParams:
    """How logits become a token. temperature 0 means greedy (argmax)."""

    temperature: float = 0.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    repetition_penalty: float = 1.0  # 1.0: off; depends on history, so applied position by position
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self) -> None:
        if not self.temperature >= 0:
            raise SpecDecError(f"temperature must be >= 0 (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise SpecDecError(f"top-p must be in (0, 1] (got {self.top_p})")
        if self.top_k < 0:
            raise SpecDecError(f"top-k must be >= 0 (got {self.top_k})")
        if not self.repetition_penalty > 0:
            raise SpecDecError(f"repetition penalty must be > 0 (got {self.repetition_penalty})")


def penalise_repeats(logits: torch.Tensor, history: list[int], penalty: float) -> torch.Tensor:
    """CTRL-style repetition penalty on one row (V,): seen tokens get less likely."""
    if penalty == 1.0 or not history:
        return logits
    seen = torch.tensor(sorted(set(history)), device=logits.device)
    scores = logits[seen]
    logits = logits.clone()
    logits[seen] = torch.where(scores < 0, scores * penalty, scores / penalty)
    return logits


def process_logits(logits: torch.Tensor, history: list[int], continuation: list[int], params: SamplingParams) -> torch.Tensor:
    """Apply history-dependent processing to logits (n, V) where row i continues `history + continuation[:i]`.

    Row by row on the growing prefix: this is what makes a repetition penalty exact in verification.
    """
    if params.repetition_penalty == 1.0:
        return logits
    rows = [penalise_repeats(logits[i], history + continuation[:i], params.repetition_penalty) for i in range(logits.shape[0])]
    return torch.stack(rows)


def logits_to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature, then top-k, then top-p, on logits (..., V) -> probabilities (..., V) in float32.

    Greedy (temperature 0) returns the plain softmax: used for display (p, q of each token).
    """
    logits = logits.float()
    if params.greedy:
        return torch.softmax(logits, dim=-1)
    logits = logits / params.temperature
    if params.top_k > 0:
        kth = torch.topk(logits, min(params.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        # Drop a token when the tokens strictly more likely already cover top_p.
        drop = (sorted_probs.cumsum(-1) - sorted_probs) >= params.top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One token from a distribution (V,), drawn on the CPU with the request's CPU generator, so a seed
    gives the same draws whatever device computed `probs` (a CPU generator cannot drive CUDA kernels)."""
    return int(torch.multinomial(probs.cpu(), 1, generator=generator).item())


def choose(logits_row: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> int:
    """The token a plain decoder picks from one processed logits row (V,)."""
    if params.greedy:
        return int(torch.argmax(logits_row).item())
    return sample(logits_to_probs(logits_row, params), generator)


# --- verification -------------------------------------------------------------------------------


def verify_greedy(draft: list[int], choices: list[int]) -> tuple[int, int]:
    """Greedy verification: accept drafts while each equals the target's argmax, then append the
    target's own argmax at the first disagreement (correction) or after the last draft (bonus).

    choices: the target's argmax of each of the k+1 verified rows, row i conditioned on the context
    plus draft[:i]. Returns (accepted, next_token).
    """
    accepted = 0
    while accepted < len(draft) and draft[accepted] == choices[accepted]:
        accepted += 1
    return accepted, choices[accepted]


# Speculative sampling (Leviathan et al., Algorithm 1).


def acceptance_probability(p: torch.Tensor, q: torch.Tensor | None, token: int) -> float:
    """min(1, p(x)/q(x)) for a drafted token x. q=None is a deterministic (one-hot) proposal: q(x)=1."""
    q_x = 1.0 if q is None else float(q[token])
    return min(1.0, float(p[token]) / q_x) if q_x > 0 else 1.0


def residual_distribution(p: torch.Tensor, q: torch.Tensor | None, token: int) -> torch.Tensor:
    """norm(max(0, p - q)): where to sample after rejecting x. Covers exactly the mass q under-proposed."""
    q_full = torch.zeros_like(p)
    if q is None:
        q_full[token] = 1.0
    else:
        q_full = q.to(p.dtype)
    residual = torch.clamp(p - q_full, min=0.0)
    total = residual.sum()
    # total == 0 only when p == q, in which case rejection has probability 0; fall back to p.
    return residual / total if total > 0 else p


@dataclass
class SampledVerdict:
    accepted: int  # how many drafted tokens were accepted
    next_token: int  # correction (after a rejection) or bonus (after accepting all)
    accept_probs: list[float]  # min(1, p/q) for every drafted position examined
    residual: torch.Tensor | None  # norm(max(0, p-q)) at the rejected position, None if all accepted


def verify_sampled(draft: list[int], q: torch.Tensor | None, p: torch.Tensor, generator: torch.Generator) -> SampledVerdict:
    """Lossless rejection sampling over a block of drafted tokens.

    draft: k token ids; q: (k, V) draft distributions or None (one-hot); p: (k+1, V) target
    distributions, row i conditioned on the context plus draft[:i].
    """
    accept_probs: list[float] = []
    for i, token in enumerate(draft):
        q_i = None if q is None else q[i]
        a = acceptance_probability(p[i], q_i, token)
        accept_probs.append(a)
        if torch.rand((), generator=generator).item() >= a:
            residual = residual_distribution(p[i], q_i, token)
            return SampledVerdict(i, sample(residual, generator), accept_probs, residual)
    return SampledVerdict(len(draft), sample(p[len(draft)], generator), accept_probs, None)


# --- checking a verify rule ---------------------------------------------------------------------
# The tests, the lessons and the capstone's learners all judge a rule the same way: draw a draft
# x ~ q, verify it, and compare the distribution of the first emitted token with p.

VerifyFn = Callable[[list[int], "torch.Tensor | None", torch.Tensor, torch.Generator], object]

# Small (p, q) pairs that break wrong rules in different ways; the last two are one-hot q (n-gram).
CHECK_CASES: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...] = (
    ((0.5, 0.3, 0.1, 0.1, 0.0), (0.1, 0.2, 0.3, 0.2, 0.2)),
    ((0.05, 0.05, 0.8, 0.1), (0.7, 0.1, 0.1, 0.1)),
    ((0.25, 0.25, 0.25, 0.25), (0.25, 0.25, 0.25, 0.25)),  # p == q
    ((1.0, 0.0, 0.0), (0.0, 0.5, 0.5)),  # disjoint supports
    ((0.6, 0.3, 0.1), (0.0, 1.0, 0.0)),  # one-hot q on a likely token
    ((0.6, 0.3, 0.1), (0.0, 0.0, 1.0)),  # one-hot q on an unlikely token
)


def chi2_threshold(df: int, z: float = 4.75) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile (z = 4.75 ~ p = 1e-6)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi2_rejects(counts: dict[int, int], expected: torch.Tensor, n: int) -> bool:
    """Goodness of fit of `counts` (n draws) against `expected` (V,); cells with tiny expectation are pooled."""
    big = [t for t in range(len(expected)) if expected[t] * n >= 5]
    stat, pooled_obs, pooled_exp = 0.0, n, n * 1.0
    for t in big:
        e = float(expected[t]) * n
        stat += (counts.get(t, 0) - e) ** 2 / e
        pooled_obs -= counts.get(t, 0)
        pooled_exp -= e
    if pooled_exp >= 5:
        stat += (pooled_obs - pooled_exp) ** 2 / pooled_exp
    df = len(big) - (0 if pooled_exp >= 5 else 1)
    return stat > chi2_threshold(max(df, 1))


def first_token_counts(verify_fn: VerifyFn, p: torch.Tensor, q: torch.Tensor, trials: int,
                       generator: torch.Generator) -> tuple[dict[int, int], int]:
    """Run `trials` one-draft verify steps (x ~ q, then verify_fn); count the first emitted token
    and how many drafts were accepted. Returns (counts, accepted).

    verify_fn has `verify_sampled`'s signature (draft, q (k, V), p (k+1, V), generator) and returns
    either a verdict with `.accepted` and `.next_token` or a tuple (accepted, next_token).
    """
    p_rows = torch.stack([p, p])  # row 1 (the bonus position) never decides the first token
    counts: dict[int, int] = {}
    accepted_drafts = 0
    for _ in range(trials):
        x = sample(q, generator)
        verdict = verify_fn([x], q[None], p_rows, generator)
        accepted, next_token = ((verdict.accepted, verdict.next_token) if hasattr(verdict, "accepted")
                                else verdict)
        first = x if accepted >= 1 else int(next_token)
        counts[first] = counts.get(first, 0) + 1
        accepted_drafts += accepted >= 1
    return counts, accepted_drafts


@dataclass
class LosslessCase:
    p: list[float]
    q: list[float]
    observed: list[float]  # the first emitted token's empirical distribution
    total_variation: float  # 0.5 * sum |observed - p|
    rejected: bool  # the chi-square test says observed is not p


@dataclass
class LosslessCheck:
    passed: bool
    trials: int
    cases: list[LosslessCase]


def check_lossless(verify_fn: VerifyFn = verify_sampled, trials: int = 4000, seed: int = 0,
                   cases=CHECK_CASES) -> LosslessCheck:
    """Does `verify_fn` leave the target's distribution p unchanged? A statistical check, case by case.

    For each small (p, q) it runs `trials` draft-then-verify steps and tests the first emitted token
    against p (chi-square at p-value ~1e-6, so a right rule essentially never fails and a rule that
    is off by a few percent does). Passing means every case passes.
    """
    generator = torch.Generator().manual_seed(seed)
    results = []
    for p_values, q_values in cases:
        p, q = torch.tensor(p_values, dtype=torch.float64), torch.tensor(q_values, dtype=torch.float64)
        counts, _ = first_token_counts(verify_fn, p, q, trials, generator)
        observed = torch.tensor([counts.get(t, 0) / trials for t in range(len(p))], dtype=torch.float64)
        results.append(LosslessCase(list(p_values), list(q_values), observed.tolist(),
                                    0.5 * float((observed - p).abs().sum()), chi2_rejects(counts, p, trials)))
    return LosslessCheck(not any(c.rejected for c in results), trials, results)
