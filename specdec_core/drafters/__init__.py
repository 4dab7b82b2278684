"""Drafters: one file each, one registry. Adding a drafter touches no decode loop.

Each drafter is built from its own small options (`GenerationConfig.drafter_options`, read through
`drafter_options`) and, if it weighs proposals against this machine's costs, from `DraftCosts` the
caller measured beforehand (`costs_needed` says which): building a drafter never runs a forward pass.
"""
from __future__ import annotations

from dataclasses import fields, replace
from typing import Mapping

from ..costmodel import DraftCosts
from ..drafting import Draft, Drafter
from ..errors import SpecDecError
from ..models import LoadedModel
from ..trees import TreeSize, static_shape
from .block import BlockDrafter, BlockNet, ParallelBlockNet
from .draft import DraftNet, serving_lm
from .eagle import EagleDrafter, EagleNet
from .heads import HeadsDrafter, MedusaHeads
from .mix import MixDrafter, MixOptions
from .ngram import NgramDrafter, NgramOptions
from .quant import QuantOptions, quant_drafter
from .sim import SimOptions, SimulatedDrafter
from .small_model import DraftModelDrafter, EarlyExitOptions, early_exit_model
from .suffix import SuffixDrafter, SuffixHistory, SuffixOptions
from .vocab import ReducedVocab, module_vocab
from .weights import drafter_module, rank_accuracy

DRAFTERS = ("ngram", "ngram-fixed", "suffix", "sim", "early-exit", "quant", "draft", "heads", "eagle", "block", "block-parallel",
            "mix")
TRAINED = ("draft", "heads", "eagle", "block", "block-parallel")  # drafters with trained weights (`train-draft --kind`)
# The model drafters `mix` weighs against n-gram lookup. The quantised target: with the trained heads in the
# list too, mix chose heads on ~90% of free-text steps and ran at 0.8-1.0x ar, because a per-token c
# undercounts heads at short drafts (every head runs whatever d is asked); quant alone: 1.3-2.5x.
MIX_MODELS = ("quant",)
# Each drafter's own knobs; drafters not listed have none (the model drafters share the config's dynamic_k).
# The drafters that can draft each kind of tree (`--tree`); every drafter drafts a chain.
TREE_DRAFTERS: dict[str, tuple[str, ...]] = {"static": ("heads",),
                                             "dynamic": ("heads", "draft", "eagle", "early-exit", "quant", "block",
                                                         "block-parallel", "suffix")}
OPTIONS: dict[str, type] = {"ngram": NgramOptions, "ngram-fixed": NgramOptions, "mix": MixOptions,
                            "sim": SimOptions, "early-exit": EarlyExitOptions, "quant": QuantOptions,
                            "suffix": SuffixOptions}
OPTION_NAMES = tuple(sorted({f.name for cls in set(OPTIONS.values()) for f in fields(cls)}))


def drafter_options(name: str, values: Mapping[str, object]):
    """`name`'s options from a config's drafter_options (None for a drafter without any). Options of
    other drafters are ignored, so one command line or one bench run can carry every drafter's knobs;
    a name no drafter knows is refused (a typo would otherwise be silently ignored)."""
    unknown = sorted(set(values) - set(OPTION_NAMES))
    if unknown:
        raise SpecDecError(f"unknown drafter option {unknown[0]!r}: choose from {', '.join(OPTION_NAMES)}")
    cls = OPTIONS.get(name)
    if cls is None:
        return None
    own = {f.name for f in fields(cls)}
    return cls(**{key: value for key, value in values.items() if key in own})


def check_drafter(name: str, values: Mapping[str, object], lm: LoadedModel, tree: str = "chain") -> None:
    """Raise SpecDecError with a one-line message for an unknown drafter, a bad option of it, or a tree it
    cannot draft."""
    if name not in DRAFTERS:
        raise SpecDecError(f"unknown drafter {name!r}: choose one of {', '.join(DRAFTERS)}")
    if tree != "chain" and name not in TREE_DRAFTERS.get(tree, ()):
        raise SpecDecError(f"drafter {name!r} cannot draft a {tree} tree: use {', '.join(TREE_DRAFTERS.get(tree, ()))} "
                           f"or --tree chain")
    options = drafter_options(name, values)
    if options is not None:
        options.validate(lm.model.config.num_hidden_layers)
    if name == "mix" and options.mix_suffix and drafter_options("suffix", values).suffix_impl == "arctic":
        raise SpecDecError("mix weighs the lab's recipe book (its cut and record): drop --suffix-impl arctic "
                           "or --mix-suffix")
    if name == "suffix" and options.suffix_impl == "arctic":
        from .suffix_arctic import arctic_cache_class

        arctic_cache_class()  # built? (a one-line error naming `make arctic` if not)


def new_history(options: SuffixOptions):
    """An empty history for suffix drafters built with `options` (arctic's cache for `impl=arctic`)."""
    if options.suffix_impl == "arctic":
        from .suffix_arctic import ArcticHistory

        return ArcticHistory(options)
    return SuffixHistory(options.suffix_history)


def costs_needed(name: str, sized_tree: bool = False, options: Mapping[str, object] | None = None) -> tuple[str, ...] | None:
    """What must be measured before `name` can be built: None nothing; () this machine's verify ratios;
    a tuple of drafter names: the ratios and each of those drafters' draft-step cost. sized_tree: it
    drafts trees sized by the cost table (`--tree-nodes 0`), which weigh the verify ratios; options: the
    config's drafter_options (the suffix drafter weighs the ratios only with its cut)."""
    if name == "suffix" and drafter_options(name, options or {}).suffix_cut and not sized_tree:
        return ()
    # mix: its model drafters' step costs (and the ratios the book's cut weighs, a free proposal like n-gram's)
    return {"ngram": (), "mix": MIX_MODELS}.get(name, () if sized_tree else None)


def uses_history(config) -> bool:
    """Whether `config`'s drafter recalls earlier requests' outputs (a `SuffixHistory` worth keeping)."""
    if config.mode != "spec":
        return False
    return config.drafter == "suffix" or (config.drafter == "mix" and
                                          bool(drafter_options("mix", config.drafter_options).mix_suffix))


def _tree_size(config, costs: DraftCosts | None) -> TreeSize | None:
    """The trees `config` asks for: None for a chain; a fixed size; or sized by this machine's verify costs."""
    if config.tree == "chain":
        return None
    if config.tree_nodes:
        return TreeSize(config.tree_nodes)
    if costs is None:  # a caller's mistake, not a user's: see costs_needed
        raise ValueError("a tree sized by the cost table needs this machine's measured verify ratios")
    return TreeSize(0, costs.verify_ratios)


def make_drafter(name: str, lm: LoadedModel, config, costs: DraftCosts | None = None,
                 history: SuffixHistory | None = None) -> Drafter:
    """A fresh drafter (with its own state) for one request under `config` (a GenerationConfig), with the
    measured `costs` the drafters of `costs_needed` weigh their proposals by. `history`: the earlier
    requests' outputs a suffix drafter recalls from and adds to (None: an empty one of its own)."""
    options = drafter_options(name, config.drafter_options)
    if name == "suffix":
        # Its trees are its own (best first by recalled frequency, sized by its match), not a TreeSize.
        if options.suffix_impl == "arctic":
            from .suffix_arctic import ArcticSuffixDrafter

            return ArcticSuffixDrafter(options, history, tree=config.tree != "chain")
        ratios = _verify_ratios(costs, name, config.k) if options.suffix_cut and config.tree == "chain" else None
        return SuffixDrafter(options, history, tree=config.tree != "chain", verify_ratios=ratios)
    tree = _tree_size(config, costs)
    if name in ("ngram", "ngram-fixed"):
        ratios = _verify_ratios(costs, name, config.k) if name == "ngram" else None
        return NgramDrafter(options.ngram_min, options.ngram_max, ratios)
    if name == "sim":
        # Greedy output never leaves the oracle's path, so compute it once; sampling recomputes per step.
        horizon = config.max_new_tokens + config.k if config.temperature == 0 else config.k
        return SimulatedDrafter(lm, options.hit_rate, horizon, seed=config.seed or 0)
    if name == "early-exit":
        model = early_exit_model(lm, options.early_exit_layers)
        return DraftModelDrafter(model, lm.device, name="early-exit", dynamic_k=config.dynamic_k, tree=tree)
    if name == "quant":
        return quant_drafter(lm, options, config.dynamic_k, tree)
    if name == "draft":
        net = drafter_module(lm, "draft", DraftNet)
        model, vocab = serving_lm(net, lm.model)
        return DraftModelDrafter(model, lm.device, name="draft", dynamic_k=config.dynamic_k, vocab=vocab, owned=net,
                                 tree=tree)
    if name == "heads":
        heads = drafter_module(lm, "heads", MedusaHeads)
        shape = static_shape(rank_accuracy(lm, "heads"), tree) if config.tree == "static" else None
        return HeadsDrafter(heads, module_vocab(heads, lm.model.lm_head.weight), lm.model.config.num_hidden_layers,
                            config.dynamic_k, tree, shape)
    if name == "eagle":
        net = drafter_module(lm, "eagle", EagleNet)
        return EagleDrafter(net, module_vocab(net, lm.model.lm_head.weight), lm.model, config.dynamic_k, tree)
    if name in ("block", "block-parallel"):
        net = drafter_module(lm, name, BlockNet if name == "block" else ParallelBlockNet)
        return BlockDrafter(net, module_vocab(net, lm.model.lm_head.weight), lm.model, name, config.dynamic_k, tree)
    if name == "mix":
        ngram = NgramDrafter(options.ngram_min, options.ngram_max, _verify_ratios(costs, name, config.k))
        missing = [model for model in MIX_MODELS if model not in costs.draft_c]
        if missing:
            raise ValueError(f"mix needs the measured draft cost of {', '.join(missing)} in its costs")
        models = [(make_drafter(model, lm, config), costs.draft_c[model]) for model in MIX_MODELS]
        suffix = None
        if options.mix_suffix:  # the book with its cut (the config's suffix options, if any)
            book = replace(config, tree="chain", drafter_options={**config.drafter_options, "suffix_cut": True})
            suffix = make_drafter("suffix", lm, book, costs, history)
        return MixDrafter(ngram, models, costs.verify_ratios, suffix)
    raise SpecDecError(f"unknown drafter {name!r}: choose one of {', '.join(DRAFTERS)}")


def _verify_ratios(costs: DraftCosts | None, name: str, k: int) -> dict[int, float]:
    """The ratios a cost-aware n-gram lookup weighs, up to k drafts (it never drafts more)."""
    if costs is None:  # a caller's mistake, not a user's: see costs_needed
        raise ValueError(f"{name} weighs drafts by this machine's measured costs: build it with costs")
    return {d: r for d, r in costs.verify_ratios.items() if d <= k}


__all__ = ["DRAFTERS", "MIX_MODELS", "OPTIONS", "OPTION_NAMES", "TRAINED", "TREE_DRAFTERS", "BlockDrafter", "BlockNet", "Draft",
           "DraftModelDrafter", "DraftNet", "Drafter", "EagleDrafter", "EagleNet", "HeadsDrafter", "MedusaHeads",
           "MixDrafter", "MixOptions", "NgramDrafter", "ParallelBlockNet", "ReducedVocab", "SimulatedDrafter", "SuffixDrafter",
           "SuffixHistory", "SuffixOptions", "check_drafter", "costs_needed", "drafter_options", "early_exit_model",
           "make_drafter", "module_vocab", "new_history", "uses_history"]
