"""`load-test --replay`: the schedulers on a load test's recorded drafts, against another cost table (e.g. a
GPU's), in simulated time.

Greedy drafts and how many of them match the target depend on the text, not on the load, so a run's
recorded requests (per step: proposal length, confidences, drafts matching the target) can be walked
again at any concurrency, under any scheduler and cost table. Nothing is decoded: each step costs what
the table says a forward of its shape costs.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..drafters import Draft
from ..serving.costs import CostTable
from ..serving.schedulers import Candidate, make_scheduler
from .loadtest import speed_metrics


@dataclass
class _Replayed:
    """One recorded request walking through its greedy output. Recorded step s starts at output
    position starts[s] and, verified in full, emits 1 + matched[s] tokens, which tile the output."""

    id: int
    prompt_tokens: int
    steps: list  # [drafted, matched, confidences]
    starts: list[int]
    position: int = 1  # tokens emitted so far (the prefill gave the first)

    def draft_here(self) -> tuple[Draft, int]:
        """The proposal at the current position and how many of its drafts match the target: the rest
        of the recorded proposal when a scheduler verified less of it than the record did."""
        s = max(i for i, start in enumerate(self.starts) if start <= self.position)
        drafted, matched, confidence = self.steps[s]
        offset = self.position - self.starts[s]
        return Draft([0] * max(0, drafted - offset), None, confidence=confidence[offset:drafted]), max(0, matched - offset)

    @property
    def end(self) -> int:
        return self.starts[-1] + 1 + self.steps[-1][1]


def replay(recorded: dict, costs: CostTable, schemes=("ar", "spec-fixed", "spec-hardware"), threshold: float = 0.5,
           max_new_tokens: int = 64, concurrency: tuple[int, ...] | None = None, requests_per_level: int = 4) -> list[dict]:
    """Re-run schemes on a run's recorded greedy drafts against `costs`, closed loop, in simulated time.

    Greedy drafts and their matches depend on the text, not on the load, so the recorded requests of
    every level form one pool, and any concurrency can be replayed (requests_per_level × C of them,
    cycling through the pool; by default the recorded levels). Every figure it returns is simulated
    (and labelled so): nothing is decoded, each step costs what the table says a forward of its
    shape costs, and each request gains 1 + min(verified, matched) tokens.
    """
    pool = [r for level in recorded["levels"].values() for r in level if r["steps"]]
    levels = concurrency or tuple(int(c) for c in recorded["levels"])
    out = []
    for concurrency in levels:
        requests = [pool[i % len(pool)] for i in range(requests_per_level * concurrency)]
        for scheme in schemes:
            scheduler = make_scheduler(scheme.split("-", 1)[1], threshold) if scheme != "ar" else None
            queue = []
            for i, r in enumerate(requests):
                starts = [1]
                for drafted, matched, _ in r["steps"][:-1]:
                    starts.append(starts[-1] + 1 + min(drafted, matched))
                queue.append(_Replayed(i, r["prompt_tokens"], r["steps"], starts))
            now, active, finished = 0.0, [], []
            arrivals: dict[int, float] = {}
            deliveries: dict[int, list[tuple[float, int]]] = {}
            while queue or active:
                while queue and len(active) < concurrency:
                    r = queue.pop(0)
                    arrivals[r.id] = now
                    now += costs.verify_s(1, r.prompt_tokens)  # its prefill, before the next decode step
                    deliveries[r.id] = [(now, 1)]
                    active.append(r)
                proposals = [r.draft_here() for r in active]
                limits = [min(recorded["k"], max_new_tokens - r.position - 1) for r in active]
                if scheduler is None:
                    lengths = [0] * len(active)
                else:
                    lengths = scheduler.verify_lengths([Candidate(d, limit) for (d, _), limit in zip(proposals, limits)],
                                                       costs, costs.draft_s(recorded.get("drafter", "ngram"), len(active)))
                now += costs.verify_s(len(active), len(active) + sum(lengths))
                for r, (_, matched), n in zip(list(active), proposals, lengths):
                    gained = min(1 + min(n, matched), max_new_tokens - r.position)
                    r.position += gained
                    deliveries[r.id].append((now, gained))
                    if r.position >= min(max_new_tokens, r.end):
                        active.remove(r)
                        finished.append(_SimRequest(r.id, arrivals[r.id], now, deliveries[r.id]))
            out.append({"scheme": scheme, "concurrency": concurrency, "simulated": True,
                        **speed_metrics(finished, concurrency)})
    return out


@dataclass
class _SimRequest:
    id: int
    arrival_s: float
    finish_s: float
    deliveries: list
    label: str = ""
