"""The hardware cost model: what a forward costs on *this* machine, measured, not assumed.

Used by the app (lab heatmap, "when does it pay?"), the bench report and the theory overlays.
c = c_q / c_p is a drafter's step cost over a 1-token target forward; verify_ratio(k) is the cost
of verifying k+1 tokens over a 1-token forward (about 1 on a big GPU at batch 1, more on a CPU).

Costs are data: the caller that builds a cost-aware drafter measures `draft_costs` first (once per
process) and hands them over; a drafter to time comes in as a factory, so this module never needs to
know which drafters exist.
"""
from __future__ import annotations

import json
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import torch

from . import llama
from .drafting import Drafter
from .guard import ratio_flags, raw_ratios
from .kernels import kernel_table
from .models import LoadedModel
from .sampling import SamplingParams
from .target import Target, synchronize
from .trees import AUTO_NODES


@dataclass
class CostModel:
    model: str
    device: str
    dtype: str
    threads: int
    context_len: int
    forward_s: list[dict] = field(default_factory=list)  # {"tokens", "batch", "seconds"} medians
    draft_step_s: dict[str, float] = field(default_factory=dict)  # drafter -> seconds per drafted token
    bandwidth_gb_s: float = 0.0
    weight_bytes: int = 0
    kernel_table: dict | None = None  # the table the linears followed (kernels.KernelTable.summary)
    flags: list[str] = field(default_factory=list)  # the guard's, on the raw medians (guard.py)

    def raw_ratios(self, batch: int = 1) -> dict[int, float]:
        """k -> r(k) = t(k+1) / t(1) at the measured sizes: the raw medians, not interpolated or made monotone."""
        return raw_ratios(self.forward_s, batch)

    def seconds(self, tokens: int, batch: int = 1) -> float:
        """Forward time for `tokens` new tokens per sequence at `batch`, interpolated in tokens."""
        rows = sorted((r["tokens"], r["seconds"]) for r in self.forward_s if r["batch"] == batch)
        if not rows:
            raise KeyError(f"no measurement at batch {batch}")
        for (t0, s0), (t1, s1) in zip(rows, rows[1:]):
            if t0 <= tokens <= t1:
                return s0 + (s1 - s0) * (tokens - t0) / (t1 - t0)
        return rows[0][1] if tokens < rows[0][0] else rows[-1][1] * tokens / rows[-1][0]

    def verify_ratio(self, k: int, batch: int = 1) -> float:
        """Cost of verifying k drafts (k+1 tokens) relative to one plain decode step."""
        return self.seconds(k + 1, batch) / self.seconds(1, batch)

    def c(self, drafter: str) -> float:
        """c = c_q / c_p: one draft step over one 1-token target forward."""
        return self.draft_step_s.get(drafter, 0.0) / self.seconds(1)

    def roofline_tokens_per_s(self, kv_bytes_per_token: int = 0) -> float:
        """Upper bound for AR at batch 1: each token must stream all weights (+ KV) from memory."""
        return self.bandwidth_gb_s * 1e9 / (self.weight_bytes + kv_bytes_per_token) if self.bandwidth_gb_s else 0.0

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def load(cls, path: Path) -> "CostModel":
        """A cost model `profile --out` wrote (measured once, on the machine it names)."""
        return cls(**json.loads(Path(path).read_text()))


def _prefilled_cache(target: Target, batch: int, context_len: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(100, 10000, (batch, context_len), generator=generator).to(target.lm.device)
    cache = target.new_cache()
    with torch.inference_mode():
        llama.forward(target.model, cache, ids, last_only=True)
    return cache


def measure_forward_times(lm: LoadedModel, tokens=(1, 2, 4, 8), batch_sizes=(1,), repeats: int = 5,
                          context_len: int = 64, progress=None) -> list[dict]:
    """Median time of one forward of `tokens` new tokens on a cached context, per batch size.

    Configurations are interleaved within each repeat so machine noise hits them all alike.
    """
    target = Target(lm)
    caches = {b: _prefilled_cache(target, b, context_len) for b in batch_sizes}
    samples: dict[tuple[int, int], list[float]] = {(t, b): [] for b in batch_sizes for t in tokens}
    generator = torch.Generator().manual_seed(1)
    for _ in range(repeats + 1):  # the first round warms up kernels and is discarded
        for (t, b), times in samples.items():
            ids = torch.randint(100, 10000, (b, t), generator=generator).to(lm.device)
            synchronize(lm.device)
            start = time.perf_counter()
            with torch.inference_mode():
                llama.forward(lm.model, caches[b], ids)
            synchronize(lm.device)
            times.append(time.perf_counter() - start)
            caches[b].crop(-t)
            if progress:
                progress()
    return [{"tokens": t, "batch": b, "seconds": statistics.median(v[1:])} for (t, b), v in samples.items()]


def measure_draft_step(lm: LoadedModel, build: Callable[[], Drafter], repeats: int = 5) -> float:
    """Seconds per drafted token for a drafter, proposing k=4 on a real prompt; `build` makes a fresh
    one for every repeat (greedy, k = 4, 8 new tokens: `drafter_factory` in generation.py)."""
    params = SamplingParams()
    context = lm.encode("Write a short note about the sea and the sky. The sea is blue and the sky is blue.")
    times = []
    prompt_hidden = None
    for _ in range(repeats + 1):
        drafter = build()
        drafter.reset(context)
        if drafter.hidden_layers:  # feature drafters start from the prompt's forward, as in decode.prefill
            if prompt_hidden is None:
                target = Target(lm)
                prompt_hidden = target.forward(target.new_cache(), context, drafter.hidden_layers, last_only=True).hidden
            drafter.prefill(prompt_hidden)
        else:
            drafter.propose(context, 1, params, torch.Generator())  # warm its state (e.g. its KV cache)
        synchronize(lm.device)
        start = time.perf_counter()
        draft = drafter.propose(context + [context[-1]], 4, params, torch.Generator())
        synchronize(lm.device)
        elapsed = time.perf_counter() - start - draft.overhead_s
        times.append(elapsed / max(1, len(draft.tokens)))
    return statistics.median(times[1:])


def measure_bandwidth_gb_s(device: torch.device, megabytes: int = 256, repeats: int = 5) -> float:
    """Memory bandwidth by a copy benchmark: each copy reads and writes `megabytes`."""
    src = torch.empty(megabytes * 2**20 // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    times = []
    for _ in range(repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        dst.copy_(src)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return 2 * src.numel() * 4 / statistics.median(times[1:]) / 1e9


_VERIFY_RATIOS: dict[tuple, dict[int, float]] = {}
_RAW_RATIOS: dict[tuple, dict[int, float]] = {}  # the same measurement's raw medians, before the fit (the guard's)
_ONE_TOKEN_S: dict[tuple, float] = {}  # the 1-token forward those ratios are relative to
_VERIFY_RATIOS_LOCK = threading.Lock()  # app sessions share a process: measure once, not once per session


def verify_ratios(lm: LoadedModel, k_max: int = AUTO_NODES) -> dict[int, float]:
    """d -> cost of verifying d drafts (d+1 tokens) over a plain 1-token step, d = 0..k_max, on this
    machine. Measured once per process and model (~2 s), fitted non-decreasing (isotonic: a longer forward
    never costs less; dips are noise) and interpolated between measured sizes."""
    key = _ratios_key(lm)
    with _VERIFY_RATIOS_LOCK:
        if key not in _VERIFY_RATIOS:
            _VERIFY_RATIOS[key], _RAW_RATIOS[key], _ONE_TOKEN_S[key] = _measure_verify_ratios(lm)
    return {d: r for d, r in _VERIFY_RATIOS[key].items() if d <= k_max}


def measured_verify_ratios(lm: LoadedModel) -> dict[int, float] | None:
    """The ratios this process measured for `lm` (what the cost-aware drafters used), or None."""
    return _VERIFY_RATIOS.get(_ratios_key(lm))


def measured_raw_ratios(lm: LoadedModel) -> dict[int, float] | None:
    """The same measurement's raw medians, r(d) = t(d+1) / t(1) at the measured sizes, or None: what the
    guard checks (the fit above pools an r < 1 into its neighbours)."""
    return _RAW_RATIOS.get(_ratios_key(lm))


_DRAFT_COSTS: dict[tuple, float] = {}


@dataclass(frozen=True)
class DraftCosts:
    """What a cost-aware drafter weighs its proposals by, measured on this machine and handed to it when
    it is built: verify_ratios[d] = verifying d drafts (d+1 tokens) over a plain 1-token step, d = 0..32
    (a chain drafts at most 16, a tree sized by these ratios keeps at most trees.AUTO_NODES = 32 nodes);
    draft_c[name] = one draft step of drafter `name` over that same step."""

    verify_ratios: dict[int, float]
    draft_c: dict[str, float] = field(default_factory=dict)


def draft_costs(lm: LoadedModel, drafters: Mapping[str, Callable[[], Drafter]] | None = None) -> DraftCosts:
    """This machine's verify ratios for `lm` and the draft-step cost c of each drafter in `drafters`
    (name -> factory), each measured once per process, model and drafter (~2 s, ~1 s a drafter) and then
    reused. The 1-token forward of the ratios is c's yardstick too."""
    ratios = verify_ratios(lm)
    c = {}
    for name, build in (drafters or {}).items():
        key = (*_ratios_key(lm), name)
        with _VERIFY_RATIOS_LOCK:
            if key not in _DRAFT_COSTS:
                _DRAFT_COSTS[key] = measure_draft_step(lm, build) / _ONE_TOKEN_S[_ratios_key(lm)]
        c[name] = _DRAFT_COSTS[key]
    return DraftCosts(ratios, c)


def _ratios_key(lm: LoadedModel) -> tuple:
    table = kernel_table(lm.model)
    return (lm.name, lm.weights, str(lm.device), str(lm.dtype), torch.get_num_threads(), table.name if table else None)


def _measure_verify_ratios(lm: LoadedModel) -> tuple[dict[int, float], dict[int, float], float]:
    sizes = (1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17, 25, AUTO_NODES + 1)
    cm = CostModel(lm.name, str(lm.device), str(lm.dtype), torch.get_num_threads(), 64,
                   forward_s=measure_forward_times(lm, sizes, repeats=3))
    return _fitted_ratios(cm), raw_ratios(cm.forward_s), cm.seconds(1)


def isotonic(values: list[float]) -> list[float]:
    """The non-decreasing sequence closest to `values` in least squares (pool adjacent violators): a run
    that dips is replaced by its mean. Unlike a running maximum, one slow outlier does not lift every later
    value, and a fast one does not pull earlier values down."""
    blocks: list[list[float]] = []  # [mean, count]
    for value in values:
        blocks.append([value, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, n1), (m2, n2) = blocks.pop(-2), blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return [mean for mean, count in blocks for _ in range(int(count))]


def _fitted_ratios(cm: CostModel) -> dict[int, float]:
    """verify_ratio(d) for d = 0..AUTO_NODES: an isotonic fit of the raw medians (a longer forward never
    costs less, so a dip is noise), clipped below at r(0) = 1 (clipping an isotonic fit is the best fit
    under that bound), interpolated between the measured sizes. A raw r(k) below 1 is the guard's business
    (it flags it); the fit plans with 1 there."""
    raw = cm.raw_ratios()
    sizes = [0, *sorted(raw)]
    fitted = dict(zip(sizes, [1.0, *(max(1.0, r) for r in isotonic([raw[d] for d in sizes[1:]]))]))  # clipped at r(0)
    ratios = {}
    for d in range(0, AUTO_NODES + 1):
        below, above = max(x for x in sizes if x <= d), min((x for x in sizes if x >= d), default=None)
        if above is None:  # past the last measured size: cost grows with the tokens, as `seconds` extrapolates
            ratios[d] = fitted[below] * (d + 1) / (below + 1)
        elif above == below:
            ratios[d] = fitted[d]
        else:
            ratios[d] = fitted[below] + (fitted[above] - fitted[below]) * (d - below) / (above - below)
    return ratios


def profile_costs(cm: CostModel) -> DraftCosts:
    """The costs a profile recorded (`profile --out`), as drafters weigh them: for a run whose drafts must
    not depend on this moment's timing noise (a lesson's counts), where `draft_costs` measures now."""
    return DraftCosts(_fitted_ratios(cm), {name: cm.c(name) for name in cm.draft_step_s})


def model_bytes(model: torch.nn.Module) -> int:
    """Bytes one decode step streams: every parameter and buffer once (a quantised copy's packed codes are
    buffers; tied weights count once), less the embedding table when it is not also the output head (a
    lookup reads one row of it per token)."""
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    embedding = model.model.embed_tokens.weight
    if getattr(model.lm_head, "weight", None) is not embedding:
        tensors.pop(id(embedding), None)
    return sum(t.numel() * t.element_size() for t in tensors.values())


def measure_cost_model(lm: LoadedModel, tokens=(1, 2, 3, 4, 6, 8, 12, 16), batch_sizes=(1,), repeats: int = 5,
                       drafters: Mapping[str, Callable[[], Drafter]] | None = None, progress=None) -> CostModel:
    """Forward times, each drafter's step (name -> factory) and the copy bandwidth, for `profile` and the app."""
    weight_bytes = model_bytes(lm.model)
    table = kernel_table(lm.model)
    forward_s = measure_forward_times(lm, tokens, batch_sizes, repeats, progress=progress)
    return CostModel(
        model=lm.name if lm.weights == "fp32" else f"{lm.name}@{lm.weights}", device=str(lm.device), dtype=str(lm.dtype).replace("torch.", ""),
        threads=torch.get_num_threads(), context_len=64, forward_s=forward_s,
        draft_step_s={name: measure_draft_step(lm, build) for name, build in (drafters or {}).items()},
        bandwidth_gb_s=measure_bandwidth_gb_s(lm.device, repeats=9), weight_bytes=weight_bytes,
        kernel_table=table.summary() if table else None,
        flags=ratio_flags(raw_ratios(forward_s), table.label() if table else None))
