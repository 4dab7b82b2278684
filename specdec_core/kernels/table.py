"""The kernel table: this machine's fastest route for every row count, measured once and cached.

Why whole forwards: a single linear timed in a loop keeps its weight in the L3 cache and lies about a
decode step, which streams every weight of the model from memory once. So each candidate is timed as
the model's real forward of n new tokens on a 64-token cache (the shape of an AR step or a verify),
interleaved round by round so that machine noise hits every candidate alike.

Candidates: `linear` and `weight-left` for n = 1..16, packed oneDNN with batch-size hints 1, 4 and 8
for n = 1..16, and MKL packed at M = 1 (it only computes M rows). Then, for each choice of the *one*
packed copy a table may hold (or none), each n takes the fastest route measured for any m >= n rows
(zero rows padded in): by construction a table's cost never falls as n grows, so r(k) >= 1 unless the
machine is noisier than the tolerance. A candidate within `NOISE` of the fastest is preferred when it
keeps one kernel family for every n (one family means rows are summed the same way at every n: see the
row-invariance harness, invariance.py) and when it pads less.

The table is keyed by CPU model, torch version, thread count and model, stored as JSON under
SPECDEC_CACHE/kernels/ behind a file lock (the first process measures, ~10-25 s on 2 cores; every later
process and notebook reads it), and recorded in every result file's `environment`.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import time
from pathlib import Path
from typing import Callable

import torch

from .. import llama
from ..kvcache import KVCache
from ..errors import SpecDecError
from ..provenance import cpu_name
from .routes import MAX_ROWS, NAMED, KernelTable, Route, apply_kernels, drop_packs, make_pack, uniform_table

TABLE_FORMAT = 1  # bump when the candidates or the choice change: cached tables are measured again
PACKS = ("onednn:1", "onednn:4", "onednn:8", "mkl:1")  # the packed copies a table may choose one of
NOISE = 1.08  # routes within 8 % of the fastest count as equally fast (these VMs drift more than that)
# How much each row count weighs when the tables of different packs are compared: the 1-row step is the
# baseline every speedup divides by, 2..9 rows are the verifies of chains and small trees.
WEIGHTS = {1: 8.0, **{n: 1.0 for n in range(2, 10)}, **{n: 0.25 for n in range(10, MAX_ROWS + 1)}}
TABLE_ENV = "SPECDEC_KERNELS"  # pins a table for a whole process: measured (default), legacy, torch or onednn
TABLES = ("measured", *NAMED)


def table_key(model_name: str, dtype: torch.dtype) -> dict:
    return {"cpu": cpu_name(), "torch": torch.__version__, "threads": torch.get_num_threads(), "model": model_name,
            "dtype": str(dtype).replace("torch.", ""), "format": TABLE_FORMAT}


def table_path(cache: Path, key: dict) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", f"{key['cpu']}-torch{key['torch']}-{key['threads']}t-{key['model']}-{key['dtype']}".lower())
    return cache / "kernels" / f"{slug.strip('-')}.json"


def candidates() -> dict[str, tuple[str | None, list[int]]]:
    """name -> (the pack it reads, the row counts it is timed at)."""
    out: dict[str, tuple[str | None, list[int]]] = {"linear": (None, list(range(1, MAX_ROWS + 1))),
                                                    "weight-left": (None, list(range(1, MAX_ROWS + 1)))}
    for pack in PACKS:
        family, _, size = pack.partition(":")
        out[pack] = (pack, list(range(1, MAX_ROWS + 1)) if family == "onednn" else [int(size)])
    return out


def _candidate_table(name: str, pack: str | None) -> KernelTable:
    kernel = pack.partition(":")[0] if pack else name
    return uniform_table(name, kernel, pack)


def time_candidates(model: torch.nn.Module, repeats: int = 3, context_len: int = 64,
                    progress: Callable[[], None] | None = None) -> dict[str, list[float | None]]:
    """The fastest of `repeats` ms of a whole forward of n new tokens on a `context_len` cache, per candidate and n (None
    where a candidate was not timed or its pack cannot be made here). The model's linears are routed
    through each candidate in turn; the caller restores its table."""
    cands = candidates()
    tables = {name: _candidate_table(name, pack) for name, (pack, _) in cands.items()}
    apply_kernels(model, tables["linear"])
    probe = torch.randn(8, 8)
    usable = {name for name, (pack, _) in cands.items() if pack is None or make_pack(probe, pack) is not None}
    generator = torch.Generator().manual_seed(0)
    cache = KVCache()
    with torch.inference_mode():
        llama.forward(model, cache, torch.randint(100, 10000, (1, context_len), generator=generator), last_only=True)
    runs = [(name, n) for name, (_, ns) in cands.items() if name in usable for n in ns]
    warm_up = [(name, ns[-1]) for name, (_, ns) in cands.items() if name in usable]  # touches every pack once
    samples: dict[tuple[str, int], list[float]] = {run: [] for run in runs}
    for round_ in range(repeats + 1):  # round 0 warms every kernel up and is dropped
        shift = round_ * 7 % len(runs)
        for name, n in (runs[shift:] + runs[:shift] if round_ else warm_up):  # a rotating order
            model.kernel_dispatch.table = tables[name]
            ids = torch.randint(100, 10000, (1, n), generator=generator)
            start = time.perf_counter()
            with torch.inference_mode():
                llama.forward(model, cache, ids)
            elapsed = time.perf_counter() - start
            cache.crop(-n)
            if round_:
                samples[(name, n)].append(elapsed)
            if progress:
                progress()
    ms: dict[str, list[float | None]] = {name: [None] * MAX_ROWS for name in cands}
    for (name, n), times in samples.items():
        ms[name][n - 1] = 1000 * min(times)  # noise only ever adds time: the minimum is the kernel's own cost
    return ms


def _options(ms: dict[str, list[float | None]], pack: str | None, n: int) -> list[tuple[float, str, int]]:
    """(ms, candidate, rows) for every way to multiply n rows with `pack` (or none) as the one pack."""
    names = ["linear", "weight-left"] + ([pack] if pack else [])
    return [(ms[name][m - 1], name, m) for name in names for m in range(n, MAX_ROWS + 1) if ms[name][m - 1] is not None]


def _kernel(name: str) -> str:
    return name.partition(":")[0] if ":" in name else name


def choose(ms: dict[str, list[float | None]], key: dict) -> KernelTable:
    """The table of the pack (or none) whose routes cost least, weighted by WEIGHTS, from the timings."""
    best_any = [min(t for p in (None, *PACKS) for t, _, _ in _options(ms, p, n)) for n in range(1, MAX_ROWS + 1)]
    plans = []
    for pack in (None, *PACKS):
        if not all(_options(ms, pack, n) for n in range(1, MAX_ROWS + 1)):
            continue
        routes = _plan(ms, pack)
        cost = sum(WEIGHTS[n] * ms[name][r.rows - 1] / best_any[n - 1] for n, (name, r) in enumerate(routes, start=1))
        used = {name for name, _ in routes}
        plans.append((cost, pack if any(":" in name for name in used) else None, routes))
    cost, pack, routes = min(plans, key=lambda p: p[0])
    # a plan without a pack (or with fewer) wins ties: memory is the tiebreak
    for other_cost, other_pack, other_routes in plans:
        if other_pack is None and other_cost <= cost * (1 + (NOISE - 1) / 2):
            pack, routes = None, other_routes
            break
    return KernelTable("measured", tuple(r for _, r in routes), pack, key, ms)


def _plan(ms: dict[str, list[float | None]], pack: str | None) -> list[tuple[str, Route]]:
    """Each n's route under one pack. Per n, the fastest option, or within NOISE of it the one that pads
    least. Then one kernel family for every n instead, where that family's plan costs within NOISE of the
    per-n plan (weighted by WEIGHTS) and its 1-row step is within NOISE of the fastest."""
    names = ["linear", "weight-left"] + ([pack] if pack else [])

    def pick(n: int, allowed: list[str]) -> tuple[float, str, int] | None:
        options = [o for o in _options(ms, pack, n) if o[1] in allowed]
        if not options:
            return None
        fastest = min(t for t, _, _ in options)
        return min((o for o in options if o[0] <= fastest * NOISE), key=lambda o: (o[2] - n, o[0]))

    def cost(picks: list[tuple[float, str, int]]) -> float:
        return sum(WEIGHTS[n] * t for n, (t, _, _) in enumerate(picks, start=1))

    rows = range(1, MAX_ROWS + 1)
    best = [pick(n, names) for n in rows]
    singles = [picks for picks in ([pick(n, [name]) for n in rows] for name in names) if None not in picks]
    near = [p for p in singles if cost(p) <= NOISE * cost(best) and p[0][0] <= NOISE * best[0][0]]
    picks = min(near, key=cost) if near else best
    return [(name, Route(_kernel(name), m)) for _, name, m in picks]


def measure_table(model: torch.nn.Module, key: dict, repeats: int = 3,
                  progress: Callable[[], None] | None = None) -> KernelTable:
    """Time every candidate on `model` and choose its table (the model is left routed by it)."""
    ms = time_candidates(model, repeats, progress=progress)
    table = choose(ms, key)
    apply_kernels(model, table)
    drop_packs(model, table.pack)
    return table


def load_or_measure(model: torch.nn.Module, key: dict, cache: Path, remeasure: bool = False,
                    progress: Callable[[], None] | None = None) -> KernelTable:
    """This machine's table for `key`: read from the cache, or measured once under a file lock (so
    parallel processes measure it once) and written there. The model is left routed by it."""
    path = table_path(cache, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file() and not remeasure:
            try:
                table = KernelTable.from_json(json.loads(path.read_text()))
                if table.key == key:
                    apply_kernels(model, table)
                    return table
            except (ValueError, KeyError, TypeError):
                pass  # a damaged file is measured again
        table = measure_table(model, key, progress=progress)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table.to_json(), indent=1))
        os.replace(tmp, path)
    return table


def resolve_table(name: str) -> str:
    """The table a process uses: `name`, or with "auto" the SPECDEC_KERNELS pin, else "measured"."""
    chosen = (os.environ.get(TABLE_ENV) or "measured") if name == "auto" else name
    if chosen not in TABLES:
        raise SpecDecError(f"unknown kernel table {chosen!r}: choose {', '.join(TABLES)}")
    return chosen

