"""The bench mode grammar, `MODE[@key=value]...`, which `bench --modes` and `generate --mode` share: one
parser, so both commands accept the same labels and refuse the same mistakes with the same line."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ..decode import MODES, GenerationConfig
from ..drafters import DRAFTERS, OPTIONS
from ..errors import SpecDecError
from ..kernels import NAMED
from ..quant import WEIGHTS
from ..trees import TREES
from . import llamacpp

HF_MODES = ("hf:ar", "hf:pld", "hf:assisted", "hf:assisted-default")
HF_KERNELS = ("torch", "engine")  # a peer on a stock model object, or on the engine's own (its kernel table)
PEER_MODES = HF_MODES + llamacpp.MODES


@dataclass(frozen=True)
class Mode:
    """One bench mode, `MODE[@key=value]...`: `ar`, `spec:ngram`, `hf:pld`, `ar@weights=int4`,
    `spec:quant@bits=8@layers=15`, `spec:heads@tree=dynamic@nodes=12`, `spec:eagle@k=1`, `ar@kernels=legacy`,
    `hf:ar@kernels=engine`. `kernels` picks the kernel table of our own modes (kernels.TABLES; default the run's)
    and, for transformers' peers, `torch` (default: a stock model object, nn.Linear's kernels, as a user runs
    transformers) or `engine` (the engine's own model object, its linears routed by its table). `weights` sets
    the target's precision (quant.WEIGHTS); `tree` and `nodes` a spec mode's draft tree (trees.TREES, its
    size; plain `spec:DRAFTER` verifies the run's --tree, the chain by default); `k` a spec mode's own draft length (each drafter at the k
    it was chosen for, in one interleaved run; the run's --k otherwise); any other key is an option of the spec mode's drafter, by its full name
    (`quant_bits`) or without the drafter's prefix (`bits`). `weights` is for ar, nar and jacobi: spec always verifies with the fp32 target (its
    cheap reader is the drafter `quant`). Every variant runs interleaved with plain fp32 `ar`, so each
    ratio is one run's. Bare `spec` is `spec:` the run's --drafter (generate's `--mode spec --drafter X`)."""

    label: str  # as written: the results' name for it
    base: str  # ar, nar, jacobi, spec, or an hf:... peer
    drafter: str | None = None
    weights: str = "fp32"
    options: tuple[tuple[str, object], ...] = ()  # drafter options, as (name, value) pairs
    tree: str | None = None  # None: the run's --tree
    tree_nodes: int | None = None  # None: the run's --tree-nodes
    k: int | None = None  # None: the run's --k
    kernels: str | None = None  # None: the run's kernel table (our modes), a stock model (hf: peers)

    @property
    def peer(self) -> bool:
        return self.base in PEER_MODES


def parse_mode(text: str) -> Mode:
    """One mode of the grammar above; anything else is a one-line error that names the mode."""
    head, *settings = text.split("@")
    base, _, drafter = head.partition(":")
    ok = head in PEER_MODES or (base in MODES and not drafter and ":" not in head) or (base == "spec" and drafter in DRAFTERS)
    if not ok:
        raise SpecDecError(f"unknown mode {text!r}: use ar, nar, jacobi, spec, spec:DRAFTER ({', '.join(DRAFTERS)}) or "
                           f"{', '.join(PEER_MODES)}, each optionally followed by @key=value")
    weights, options, tree, tree_nodes, k, kernels = "fp32", {}, None, None, None, None
    own = base in MODES
    known = [f.name for f in fields(OPTIONS[drafter])] if drafter in OPTIONS else []
    prefix = (drafter or "").replace("-", "_") + "_"
    for setting in settings:
        key, eq, value = setting.partition("=")
        if not eq or not key or not value:
            raise SpecDecError(f"mode {text!r}: write each setting as @key=value (got {setting!r})")
        if key == "kernels" and (own or head in HF_MODES):
            allowed_tables = tuple(NAMED) if own else HF_KERNELS
            if value not in allowed_tables:
                raise SpecDecError(f"mode {text!r}: kernels must be one of {', '.join(allowed_tables)} (got {value!r})")
            kernels = value
        elif key == "weights" and base in ("ar", "nar", "jacobi"):
            if value not in WEIGHTS:
                raise SpecDecError(f"mode {text!r}: weights must be one of {', '.join(WEIGHTS)} (got {value!r})")
            weights = value
        elif key == "tree" and base == "spec":
            if value not in TREES:
                raise SpecDecError(f"mode {text!r}: tree must be one of {', '.join(TREES)} (got {value!r})")
            tree = value
        elif key == "nodes" and base == "spec":
            if not value.isdigit():
                raise SpecDecError(f"mode {text!r}: nodes must be a whole number (got {value!r})")
            tree_nodes = int(value)
        elif key == "k" and base == "spec":
            if not value.isdigit() or int(value) < 1:
                raise SpecDecError(f"mode {text!r}: k must be a whole number >= 1 (got {value!r})")
            k = int(value)
        elif key in known or prefix + key in known:
            options[key if key in known else prefix + key] = _number(value)
        else:
            allowed = ["kernels"] * (own or head in HF_MODES) + ["weights"] * (base in ("ar", "nar", "jacobi")) + \
                ["tree", "nodes", "k"] * (base == "spec") + [k.removeprefix(prefix) for k in known]
            raise SpecDecError(f"mode {text!r}: unknown setting {key!r}" +
                               (f" (choose {', '.join(allowed)})" if allowed else " (this mode takes none)"))
    return Mode(text, head if head in PEER_MODES else base, drafter or None, weights, tuple(options.items()), tree,
                tree_nodes, k, kernels)


def mode_config(config: GenerationConfig, mode: Mode) -> GenerationConfig:
    """`config` (the run's settings) as this mode decodes it: its loop, its drafter and the drafter's options."""
    return replace(config, mode=mode.base, drafter=mode.drafter or config.drafter,
                   drafter_options={**config.drafter_options, **dict(mode.options)},
                   tree=(mode.tree or config.tree) if mode.base == "spec" else "chain", tree_nodes=mode.tree_nodes or config.tree_nodes,
                   k=mode.k or config.k)


def _number(value: str) -> object:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def parse_modes(text: str) -> list[Mode]:
    modes = [parse_mode(m) for m in dict.fromkeys(m.strip() for m in text.split(",") if m.strip())]
    if "ar" not in [m.label for m in modes]:
        modes.insert(0, parse_mode("ar"))  # every speedup and identity check is relative to our own fp32 AR
    return modes
