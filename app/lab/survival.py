"""Per-position survival from the engine's decode metrics, pooled over runs (the lab's survival plot).

s_i = P(the first i drafts of a step are all accepted), the glossary's per-position survival. Measured
as: of the drafting steps that offered at least i drafts, the share whose accepted length is at least i
(`offered_per_pos_count` and `accepted_per_pos_count` of `specdec_core.metrics.compute_metrics`).
Pooling sums those counts over prompts and k values, never the per-run ratios, so a prompt with three
steps weighs three steps: `specdec_core.metrics.pooled_per_position`, the benchmarks' pooling too.

Beside it the i.i.d. curve α^i. The α fitted to the same steps is the per-token conditional acceptance
(the glossary's α): accepted drafts over examined drafts, where a step examines its accepted drafts and,
if it has one, the draft it rejected (`rollback_rate` × `num_drafts` steps have one). Under i.i.d.
acceptance this is the maximum-likelihood α, and s_i = α^i. The run's acceptance rate ᾱ = accepted /
drafted (`draft_acceptance_rate`) is smaller whenever drafts after a rejection go unexamined, so ᾱ^i
lies below the survival even of a drafter that does accept independently.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from specdec_core.metrics import pooled_counts, pooled_per_position


@dataclass
class Survival:
    """Pooled survival counts; offered[i-1] and survived[i-1] belong to draft position i."""

    offered: list[int] = field(default_factory=list)  # drafting steps that offered >= i drafts
    survived: list[int] = field(default_factory=list)  # ... of which accepted >= i drafts
    drafted: int = 0  # drafted tokens
    accepted: int = 0  # accepted drafted tokens
    rejected_steps: int = 0  # drafting steps that rejected a draft (examined one draft beyond the accepted)
    steps: int = 0  # drafting steps

    @classmethod
    def from_metrics(cls, m: dict) -> "Survival":
        steps = int(m["num_drafts"])
        return cls(offered=list(m["offered_per_pos_count"]), survived=list(m["accepted_per_pos_count"]),
                   drafted=int(m["num_draft_tokens"]), accepted=int(m["num_accepted_tokens"]),
                   rejected_steps=round(m["rollback_rate"] * steps), steps=steps)

    def __add__(self, other: "Survival") -> "Survival":
        return Survival(pooled_counts([self.offered, other.offered]), pooled_counts([self.survived, other.survived]),
                        self.drafted + other.drafted, self.accepted + other.accepted,
                        self.rejected_steps + other.rejected_steps, self.steps + other.steps)

    @property
    def positions(self) -> list[int]:
        """The draft positions i = 1, 2, … that at least one step offered."""
        return [i + 1 for i, n in enumerate(self.offered) if n > 0]

    @property
    def s(self) -> list[float]:
        """Measured s_i at each of `positions`."""
        return [s for s in pooled_per_position([self.offered], [self.survived]) if s is not None]

    @property
    def alpha(self) -> float:
        """α fitted to these steps: accepted / examined drafts (the i.i.d. model's maximum-likelihood α)."""
        examined = self.accepted + self.rejected_steps
        return self.accepted / examined if examined else 0.0

    @property
    def acceptance_rate(self) -> float:
        """ᾱ = accepted / drafted."""
        return self.accepted / self.drafted if self.drafted else 0.0


def pooled(metrics: list[dict]) -> Survival:
    """The survival counts of several decode runs' metrics, summed."""
    total = Survival()
    for m in metrics:
        total = total + Survival.from_metrics(m)
    return total
