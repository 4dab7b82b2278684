"""The serving cost table: what one batched forward costs on this machine, by the tokens it carries.

Measured once when a serving run starts (the time counts in the run) and handed to the scheduler,
which never measures anything itself. Packed forwards (`batch.py`) cost what their total token rows
cost, plus a little attention per row, so the table is keyed by (requests in the batch, total tokens).
`load` / `save` let a table measured elsewhere (e.g. a GPU, `scripts/gpu_bench.sh`) drive the replay.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..drafting import Drafter
from ..models import LoadedModel
from ..sampling import SamplingParams
from ..target import synchronize
from ..batch import RaggedCache, batch_forward

ROWS = (1, 2, 4, 8, 16, 32)
TOKENS_PER_ROW = (1, 2, 3, 5, 9)  # 1 = a plain step; 9 = verifying 8 drafts


@dataclass
class CostTable:
    machine: str
    grid: list[dict] = field(default_factory=list)  # {"rows", "tokens", "seconds"}: tokens = total over rows
    draft_s_per_request: dict[str, float] = field(default_factory=dict)  # drafter -> seconds per proposal
    context_len: int = 64

    def verify_s(self, rows: int, tokens: int) -> float:
        """Seconds of one forward carrying `tokens` token rows for `rows` requests (tokens >= rows):
        linear in tokens within the nearest measured row counts, linear between those row counts, and
        past the largest row count as several forwards of that size."""
        counts = sorted({g["rows"] for g in self.grid})
        lower = max([c for c in counts if c <= rows], default=counts[0])
        upper = min([c for c in counts if c >= rows], default=counts[-1])
        if rows > upper:  # past the grid: as if the batch ran as rows/upper forwards of the largest size
            scale = rows / upper
            return scale * self._along_tokens(upper, tokens / scale)
        at_lower, at_upper = self._along_tokens(lower, tokens), self._along_tokens(upper, tokens)
        if upper == lower:
            return at_lower
        return at_lower + (at_upper - at_lower) * (rows - lower) / (upper - lower)

    def _along_tokens(self, rows: int, tokens: int) -> float:
        points = sorted((g["tokens"], g["seconds"]) for g in self.grid if g["rows"] == rows)
        for (t0, s0), (t1, s1) in zip(points, points[1:]):
            if t0 <= tokens <= t1:
                return s0 + (s1 - s0) * (tokens - t0) / (t1 - t0)
        # Off the grid (fewer tokens than this row count can carry when interpolating between row counts,
        # or more than measured): extend the nearest segment's slope.
        (t0, s0), (t1, s1) = points[:2] if tokens < points[0][0] else points[-2:]
        return max(0.0, s1 + (s1 - s0) * (tokens - t1) / (t1 - t0))

    def draft_s(self, drafter: str, requests: int) -> float:
        """Seconds to draft for `requests` requests in one step (proposals run one after another)."""
        return self.draft_s_per_request.get(drafter, 0.0) * requests

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> "CostTable":
        return cls(**json.loads(path.read_text()))

    @classmethod
    def from_dict(cls, data: dict) -> "CostTable":
        return cls(**data)


def measure_cost_table(lm: LoadedModel, rows=ROWS, tokens_per_row=TOKENS_PER_ROW, repeats: int = 3,
                       context_len: int = 64, drafters: dict[str, Drafter] | None = None, progress=None) -> CostTable:
    """Median time of packed forwards over `rows` requests × `tokens_per_row` new tokens on a cached
    context of `context_len` each; configurations interleaved within each repeat, the first round a warm-up.
    `drafters`: name -> a drafter as serving builds it (`engine.serving_drafter`), whose proposal is timed."""
    cache = RaggedCache(lm.model, slots=max(rows), capacity=context_len + max(tokens_per_row) + 1)
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for slot in range(max(rows)):
            batch_forward(lm.model, cache, slot, [torch.randint(100, 10000, (context_len,), generator=generator).tolist()],
                          last_only=True)
    samples: dict[tuple[int, int], list[float]] = {(b, t): [] for b in rows for t in tokens_per_row}
    for _ in range(repeats + 1):
        for (b, t), times in samples.items():
            new = [torch.randint(100, 10000, (t,), generator=generator).tolist() for _ in range(b)]
            synchronize(lm.device)
            start = time.perf_counter()
            with torch.inference_mode():
                batch_forward(lm.model, cache, 0, new)
            synchronize(lm.device)
            times.append(time.perf_counter() - start)
            for slot in range(b):
                cache.lengths[slot] -= t
            if progress:
                progress()
    grid = []
    for b in rows:
        medians = monotone([statistics.median(samples[b, t][1:]) for t in tokens_per_row])
        grid += [{"rows": b, "tokens": b * t, "seconds": m} for t, m in zip(tokens_per_row, medians)]
    return CostTable(machine=_machine(lm), grid=grid, context_len=context_len,
                     draft_s_per_request={name: _draft_seconds(lm, d) for name, d in (drafters or {}).items()})


def monotone(values: list[float]) -> list[float]:
    """The closest non-decreasing sequence (pool adjacent violators): a forward with more tokens never
    costs less, so a dip is noise, and averaging it with its neighbour is the least-squares fix."""
    blocks: list[list[float]] = []  # [sum, count] of pooled runs
    for v in values:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    return [total / count for total, count in blocks for _ in range(count)]


def _machine(lm: LoadedModel) -> str:
    return f"{lm.name} on {lm.device} ({str(lm.dtype).replace('torch.', '')}, {torch.get_num_threads()} threads)"


def _draft_seconds(lm: LoadedModel, drafter: Drafter, repeats: int = 20) -> float:
    """Median seconds of one proposal of up to 8 tokens on a real prompt (what a serving step pays per request)."""
    context = lm.encode("Repeat the list: apples, pears, plums, apples, pears, plums, apples, pears.")
    drafter.reset(context)
    times = []
    for _ in range(repeats + 1):
        synchronize(lm.device)
        start = time.perf_counter()
        drafter.propose(context, 8, SamplingParams(seed=0), torch.Generator())
        synchronize(lm.device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])
