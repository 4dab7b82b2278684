"""Which matmul kernel each nn.Linear of a CPU model calls, by how many token rows it multiplies.

A decode forward multiplies a handful of token rows x (n, d_in) by every weight matrix W (d_out, d_in).
`nn.Linear` computes x @ W.T through whatever BLAS routine torch picks for that n, and those picks are
poor and *differ between CPUs*: on an AMD EPYC one row ran at half the copy bandwidth (MKL's
matrix-vector routine), on an Intel Xeon the same code path made a 1-token step slower than a 3-token
forward. Speculative decoding's whole premise is that verifying a few tokens costs about as much as one,
and every speedup the lab prints divides by the 1-token step — so the kernel behind each row count is
chosen per machine by timing whole forwards (`table.py`), and this module only carries the choice out.

The kernels (`KERNELS`), each computing the same product up to float rounding (summation order):
- `linear`: F.linear, i.e. nn.Linear's own choice.
- `weight-left`: (W @ xᵀ)ᵀ — the same GEMM with the operands swapped, which MKL runs differently.
- `onednn`: oneDNN's linear on a copy of W reordered once ("packed") for a batch-size hint.
- `mkl`: MKL's packed SGEMM (cblas_sgemm_pack/compute) on a copy packed for exactly M rows; torch falls
  back to F.linear for any other row count, so a table sends only M rows (or fewer, padded) there.
A route may pad n rows with zero rows up to a cheaper count (a row's output never depends on another's
values). A table holds at most one packed copy (`pack`): each doubles the weights' bytes.

The weights must not change after packing: this is an inference-only engine.
"""
from __future__ import annotations

import contextlib
import types
from dataclasses import dataclass, field
from typing import Iterator

import torch
import torch.nn.functional as F

KERNELS = ("linear", "weight-left", "onednn", "mkl")
MAX_ROWS = 16  # a table has a route for 1..MAX_ROWS rows; more rows take the last route's kernel unpadded


@dataclass(frozen=True)
class Route:
    """How n rows are multiplied: by `kernel`, on `rows` >= n rows (zero rows padded in)."""

    kernel: str
    rows: int


@dataclass(frozen=True)
class KernelTable:
    """The route for every row count 1..MAX_ROWS (`routes[n - 1]`), and the one packed weight copy they
    read: "onednn:HINT", "mkl:M" or None. `name` says where it came from: "measured" (timed on this
    machine, `table.py`), "legacy" (the fixed dispatch tuned on one AMD CPU before tables existed),
    "torch" (nn.Linear everywhere) or "onednn" (the packed oneDNN kernel for every row count).
    `key` names the machine, torch and thread count of a measured table; `ms` holds the whole-forward
    times it was chosen from (each the fastest of its repeats) (candidate -> ms for 1..MAX_ROWS rows, None where not timed)."""

    name: str
    routes: tuple[Route, ...]
    pack: str | None = None
    key: dict = field(default_factory=dict)
    ms: dict[str, list[float | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        family = (self.pack or "").partition(":")[0]
        wrong = [r for r in self.routes if r.kernel not in KERNELS or (r.kernel in ("onednn", "mkl") and r.kernel != family)]
        if wrong:
            raise ValueError(f"kernel table {self.name!r}: route {wrong[0]} needs a pack of its own kind (pack {self.pack!r})")

    def route(self, n: int) -> Route:
        if n <= len(self.routes):
            return self.routes[n - 1]
        last = self.routes[-1].kernel
        return Route(last if last != "mkl" else "linear", n)  # an MKL pack computes its own M rows only

    def time_ms(self, n: int) -> float | None:
        """The whole-forward time its measurement recorded for the route of n rows (None: not measured)."""
        route = self.routes[n - 1]
        timings = self.ms.get(self.pack if route.kernel in ("onednn", "mkl") else route.kernel)
        return timings[route.rows - 1] if timings else None

    def label(self) -> str:
        """One line: the name, the pack and each run of row counts that share a route, e.g.
        `legacy (onednn:8): 1 weight-left→2, 2 weight-left, 3-16 onednn` (→m: padded to m rows)."""
        runs: list[list] = []  # [first n, last n, kernel, padded-to or None]
        for n, r in enumerate(self.routes, start=1):
            pad = r.rows if r.rows > n else None
            if runs and runs[-1][2:] == [r.kernel, pad]:
                runs[-1][1] = n
            else:
                runs.append([n, n, r.kernel, pad])
        parts = [(f"{lo}" if lo == hi else f"{lo}-{hi}") + f" {kernel}" + (f"→{pad}" if pad else "")
                 for lo, hi, kernel, pad in runs]
        return f"{self.name} ({self.pack or 'no pack'}): " + ", ".join(parts)

    def summary(self) -> dict:
        """What a result file records: the name, pack, key and the route of every row count."""
        return {"name": self.name, "pack": self.pack, "key": self.key, "label": self.label(),
                "routes": [[r.kernel, r.rows] for r in self.routes]}

    def to_json(self) -> dict:
        return {**self.summary(), "ms": self.ms}

    @classmethod
    def from_json(cls, data: dict) -> "KernelTable":
        return cls(data["name"], tuple(Route(k, r) for k, r in data["routes"]), data["pack"], data.get("key", {}),
                   data.get("ms", {}))


def uniform_table(name: str, kernel: str, pack: str | None = None) -> KernelTable:
    """One kernel for every row count, unpadded."""
    return KernelTable(name, tuple(Route(kernel, n) for n in range(1, MAX_ROWS + 1)), pack)


# The dispatch this engine used before kernel tables, tuned on one AMD EPYC: the weight-left product for
# one row (padded to two) and two, packed oneDNN (hint 8) from three. Kept selectable (`--kernels legacy`)
# so the course can show what a mis-tuned baseline does to every speedup.
LEGACY = KernelTable("legacy", (Route("weight-left", 2), Route("weight-left", 2),
                                *(Route("onednn", n) for n in range(3, MAX_ROWS + 1))), "onednn:8")
TORCH = uniform_table("torch", "linear")
ONEDNN = uniform_table("onednn", "onednn", "onednn:8")
NAMED = {"legacy": LEGACY, "torch": TORCH, "onednn": ONEDNN}


def make_pack(weight: torch.Tensor, pack: str) -> torch.Tensor | None:
    """The packed copy of a float32 weight for `pack` ("onednn:HINT" or "mkl:M"), or None where this build
    or CPU cannot make or run it (the routes that need it then fall back to F.linear)."""
    family, _, size = pack.partition(":")
    if weight.dtype != torch.float32 or weight.device.type != "cpu":
        return None
    w = weight.detach().contiguous()
    try:
        with torch.no_grad():
            if family == "onednn" and torch.backends.mkldnn.is_available():
                packed = torch.ops.mkldnn._reorder_linear_weight(w, int(size))
                torch.ops.mkldnn._linear_pointwise(torch.zeros(3, w.shape[1]), packed, None, "none", [], "")
                return packed
            if family == "mkl" and torch.backends.mkl.is_available():
                packed = torch.ops.mkl._mkl_reorder_linear_weight(w, int(size))
                torch.ops.mkl._mkl_linear(torch.zeros(int(size), w.shape[1]), packed, w, None, int(size))
                return packed
    except (RuntimeError, AttributeError):
        pass
    return None


class Dispatch:
    """The table a model's linears follow right now, shared by all of them (so `using` swaps it at once)."""

    def __init__(self, table: KernelTable) -> None:
        self.table = table


def routed_linear(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """nn.Linear.forward through the route its table gives this many rows: the same result up to rounding.
    Called 211 times a SmolLM2 step, so the unpadded routes (every route of most tables) take the shortest
    path to their kernel: each Python-level op here costs about a microsecond, ×211."""
    n = x.numel() // x.shape[-1]
    table = self.dispatch.table
    route = table.route(n)
    packed = None
    if table.pack:
        packed = self.packs.get(table.pack)
        if packed is None and table.pack not in self.packs:  # packed on first use: a linear never called costs no copy
            packed = self.packs[table.pack] = make_pack(self.weight, table.pack)
    kernel = route.kernel if route.kernel in ("linear", "weight-left") or packed is not None else "linear"
    if route.rows == n:
        if kernel == "linear":
            return F.linear(x, self.weight, self.bias)
        if kernel == "onednn":
            y = torch.ops.mkldnn._linear_pointwise(x.reshape(n, x.shape[-1]), packed, self.bias, "none", [], "")
            return y.view(*x.shape[:-1], y.shape[-1])
    return _padded_route(self, x, n, route.rows, kernel, packed)


def _padded_route(self: torch.nn.Linear, x: torch.Tensor, n: int, rows: int, kernel: str,
                  packed: torch.Tensor | None) -> torch.Tensor:
    """The other routes: n rows padded with zero rows to `rows`, the weight-left product, or an MKL pack."""
    m = x.reshape(n, x.shape[-1]).contiguous()  # (n, d_in); a strided input would be copied inside mm
    if rows > n:
        m = F.pad(m, (0, 0, 0, rows - n))  # zero rows: computed and dropped
    if kernel == "linear":
        y = F.linear(m, self.weight, self.bias)
    elif kernel == "weight-left":
        y = (self.weight @ m.T).T
        if self.bias is not None:
            y = y + self.bias
    elif kernel == "onednn":
        y = torch.ops.mkldnn._linear_pointwise(m, packed, self.bias, "none", [], "")
    else:  # mkl: exactly the pack's M rows
        y = torch.ops.mkl._mkl_linear(m, packed, self.weight, self.bias, rows)
    return y[:n].reshape(*x.shape[:-1], -1)  # (…, d_out)


def _linears(model: torch.nn.Module) -> list[torch.nn.Linear]:
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear)]


def apply_kernels(model: torch.nn.Module, table: KernelTable) -> int:
    """Route every nn.Linear of a CPU model by `table` (each weight is packed on its first call). Returns
    how many layers were changed. Call again with another table to switch (packs already made are kept)."""
    dispatch = getattr(model, "kernel_dispatch", None) or Dispatch(table)
    dispatch.table = table
    model.kernel_dispatch = dispatch
    linears = _linears(model)
    for module in linears:
        if not hasattr(module, "packs"):
            module.packs = {}
        module.dispatch = dispatch
        module.forward = types.MethodType(routed_linear, module)
    return len(linears)


def drop_packs(model: torch.nn.Module, keep: str | None) -> None:
    """Free every packed copy but `keep` (after a measurement tried several)."""
    for module in _linears(model):
        module.packs = {k: v for k, v in getattr(module, "packs", {}).items() if k == keep}


def kernel_table(model: torch.nn.Module) -> KernelTable | None:
    """The table a model's linears follow now, or None for a model that was never routed (a GPU model)."""
    dispatch = getattr(model, "kernel_dispatch", None)
    return dispatch.table if dispatch else None


@contextlib.contextmanager
def using(model: torch.nn.Module, table: KernelTable | None) -> Iterator[None]:
    """Run a block with the model's linears on another table (e.g. `ar@kernels=legacy` beside `ar` in
    one interleaved bench), then restore the table it had. None leaves the model as it is."""
    before = kernel_table(model)
    if table is None or before is None:
        yield
        return
    model.kernel_dispatch.table = table
    try:
        yield
    finally:
        model.kernel_dispatch.table = before
