"""Who decides how many drafts each request verifies this step: the scheduler, not the drafter.

A drafter proposes as far as it can, with a confidence per position (`Draft.confidence`: the chance
that draft i survives given drafts < i did). The product of the confidences up to i is the prefix's
estimated survival S_i, and S_1 + ... + S_L is the number of drafts a request expects to gain by
verifying L of them. The schedulers:

- `fixed`: verify up to k drafts, whatever the load (the one-request loop's behaviour).
- `confidence`: verify while S_i stays above a threshold.
- `hardware`: verify what maximises the step's expected tokens per second under the measured cost
  table: each extra verified draft adds its S_i to the numerator and one token row to the batched
  forward's cost. At low load a token row is nearly free (the weights are read anyway) and long drafts
  pay; at saturation every row costs its own compute and only near-certain drafts pay, down to none
  at all: plain one-token steps.
- `budget`: the production paper's deployed variant. The step's total of verified drafts is fixed
  before the step's drafts are seen, from the previous step (what `hardware` chose there, per request),
  and handed to the drafts with the highest S_i now.

Losslessness. Whether draft i is verified must not depend on draft i itself (nor on anything drawn
after it): with sampling, verifying x_i only for some values of x_i changes the distribution of the
token emitted at that position. Confidences that are known before x_i is drawn (`Draft.confidence`'s
contract) make S_i depend on x_{<i} only, and `hardware` grows the verified prefixes one draft at a
time, always taking the best next draft and stopping at the first that does not improve the
objective (the production paper's Algorithm 1). The decision on x_i then uses S_1 .. S_i only. Choosing
the length by a look-ahead argmax over all lengths would use S_{i+1}, which depends on x_i, and is
biased: `tests/test_serving.py` shows it on a small synthetic case. `budget` keeps the rule too: its
budget comes from earlier steps, and whether S_i makes the top of the ranking depends on the values
ranked above it, which never include S_{i+1} (never larger, and later positions lose ties). Its budget
taken from the current step's own look-ahead optimum would be biased again (tested).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from ..drafters import Draft
from ..errors import SpecDecError
from .costs import CostTable

SCHEDULERS = ("fixed", "confidence", "hardware", "budget")


@dataclass
class Candidate:
    """One request's proposal as a scheduler sees it."""

    draft: Draft
    limit: int  # the most drafts this request may verify (its k, its tokens left)
    drafter: str = ""


def prefix_survival(draft: Draft, limit: int) -> list[float]:
    """S_i for i = 1 .. min(len(draft), limit): the estimated chance that drafts 1..i all survive.
    A draft without confidences counts as certain (a scheduler then verifies it all)."""
    n = min(len(draft.tokens), limit)
    confidence = draft.confidence if draft.confidence is not None else [1.0] * n
    survival, product = [], 1.0
    for c in confidence[:n]:
        product *= min(1.0, max(0.0, c))
        survival.append(product)
    return survival


class Scheduler(ABC):
    name = "scheduler"

    @abstractmethod
    def verify_lengths(self, candidates: list[Candidate], costs: CostTable | None, draft_s: float) -> list[int]:
        """How many drafts each request verifies this step (0 = a plain one-token step)."""


class FixedScheduler(Scheduler):
    name = "fixed"

    def verify_lengths(self, candidates: list[Candidate], costs: CostTable | None, draft_s: float) -> list[int]:
        return [min(len(c.draft.tokens), c.limit) for c in candidates]


class ConfidenceScheduler(Scheduler):
    name = "confidence"

    def __init__(self, threshold: float = 0.5) -> None:
        self.threshold = threshold

    def verify_lengths(self, candidates: list[Candidate], costs: CostTable | None, draft_s: float) -> list[int]:
        # S_i never grows with i (a product of factors <= 1), so counting the S_i above the threshold is
        # the stopping rule "verify until S_i falls below it": the decision on draft i reads S_1 .. S_i only.
        return [sum(s >= self.threshold for s in prefix_survival(c.draft, c.limit)) for c in candidates]


class HardwareScheduler(Scheduler):
    """Maximise expected tokens per second of the whole step, greedily, one draft at a time."""

    name = "hardware"

    def verify_lengths(self, candidates: list[Candidate], costs: CostTable | None, draft_s: float) -> list[int]:
        if costs is None:
            raise SpecDecError("the hardware scheduler needs a measured cost table")
        rows = len(candidates)
        survival = [prefix_survival(c.draft, c.limit) for c in candidates]
        lengths = [0] * rows
        expected = float(rows)  # every request gets its next token from a plain step at least
        seconds = costs.verify_s(rows, rows) + draft_s
        while True:
            # The best next draft of any request: the highest S at each request's next position.
            best = max((r for r in range(rows) if lengths[r] < len(survival[r])),
                       key=lambda r: survival[r][lengths[r]], default=None)
            if best is None:
                break
            gain = survival[best][lengths[best]]
            new_seconds = costs.verify_s(rows, rows + sum(lengths) + 1) + draft_s
            if (expected + gain) / new_seconds <= expected / seconds:
                break  # the first draft that does not pay ends the step's plan (no look-ahead)
            lengths[best] += 1
            expected += gain
            seconds = new_seconds
        return lengths


def allocate(survival: list[list[float]], budget: int) -> list[int]:
    """Give `budget` verified drafts to the prefixes with the highest S (ties: the earlier position
    first, so every request gets a prefix of its drafts)."""
    ranked = sorted((-s, i, r) for r, row in enumerate(survival) for i, s in enumerate(row))[:max(0, budget)]
    lengths = [0] * len(survival)
    for _, _, r in ranked:
        lengths[r] += 1
    return lengths


class BudgetScheduler(Scheduler):
    """Variant (b): a budget fixed from the previous step, allocated by the current confidences."""

    name = "budget"

    def __init__(self) -> None:
        self.per_request: float | None = None  # verified drafts per request that `hardware` chose last step

    def verify_lengths(self, candidates: list[Candidate], costs: CostTable | None, draft_s: float) -> list[int]:
        planned = HardwareScheduler().verify_lengths(candidates, costs, draft_s)
        if self.per_request is None:  # nothing earlier to fix a budget from: this step is rule (a) itself
            lengths = planned
        else:
            survival = [prefix_survival(c.draft, c.limit) for c in candidates]
            lengths = allocate(survival, round(self.per_request * len(candidates)))
        self.per_request = sum(planned) / len(candidates)  # the next step's budget, from this step
        return lengths


def make_scheduler(name: str, threshold: float = 0.5) -> Scheduler:
    if name == "fixed":
        return FixedScheduler()
    if name == "confidence":
        return ConfidenceScheduler(threshold)
    if name == "hardware":
        return HardwareScheduler()
    if name == "budget":
        return BudgetScheduler()
    raise SpecDecError(f"unknown scheduler {name!r}: choose one of {', '.join(SCHEDULERS)}")
