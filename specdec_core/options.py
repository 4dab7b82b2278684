"""The command line's shared options, and the typed configs they become.

Each subsystem declares its commands beside the code they run (`commands.py`, `bench/commands.py`,
`training/commands.py`, `bridge/commands.py`), as vLLM's `CLISubcommand`: a name, a function that adds
the command's options and a handler. The options several commands share are declared here once, and
here the namespace turns into a `GenerationConfig`: below the handlers, nothing reads argparse.

Light on purpose: `python -m specdec_core --help` builds every parser without importing torch.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from .errors import SpecDecError

if TYPE_CHECKING:
    from .decode import GenerationConfig


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage + message; we print one line and exit 2 like every other error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SpecDecError(message)


@dataclass(frozen=True)
class Command:
    """One subcommand: its name and one-line help, the function that declares its options on its parser,
    and the handler that runs it on the parsed namespace."""

    name: str
    help: str
    add_options: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], object]


def csv_list(kind: type) -> Callable[[str], list]:
    """An argparse type: a comma-separated list of `kind` ("1,2,4" -> [1, 2, 4])."""
    def parse(text: str) -> list:
        try:
            return [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return parse


def add_model_options(p: argparse.ArgumentParser, *, model_help: str | None = None, device: bool = True,
                      dtype: bool = True, explained: bool = False) -> None:
    """--model, --device (unless the command runs no model: export-eagle3) and --dtype (unless the command
    always runs float32: training); `explained` spells out the device and dtype choices (generate, bench)."""
    p.add_argument("--model", default="smollm2-135m", help=model_help)
    if device:
        p.add_argument("--device", default="auto", help="auto, cpu or cuda" if explained else None)
    if dtype:
        p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16 or float64" if explained else None)


def add_kernels_option(p: argparse.ArgumentParser, show: bool = False) -> None:
    """--kernels: the kernel table the model's linears follow on CPU (kernels/; SPECDEC_KERNELS pins one)."""
    help_text = ("the kernel table: measured (this machine's, measured once and cached; the default), legacy (the "
                 "fixed dispatch tuned on one AMD CPU), torch (nn.Linear's kernels) or onednn (packed oneDNN for every "
                 "row count)")
    if show:
        p.add_argument("--kernels", nargs="?", const="show", default="auto", metavar="TABLE",
                       help=help_text + "; alone: print this machine's measured table and its timings, then exit")
        p.add_argument("--remeasure-kernels", action="store_true", help="with --kernels alone: measure the table again")
    else:
        p.add_argument("--kernels", default="auto", metavar="TABLE", help=help_text)


def add_weights_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--weights", default="fp32", help="the target's linear weights: fp32 (the reference), int8 or int4 "
                   "(faster, text may differ; bench: write ar@weights=int4)")


def add_generation_options(p: argparse.ArgumentParser, sweep: bool = False) -> None:
    """Options shared by generate and bench (bench accepts comma lists for --k and --temperature)."""
    p.add_argument("--drafter", default="ngram", help="spec drafter: ngram (cost-aware), ngram-fixed, sim, early-exit, quant (the target quantised), the trained draft, heads, eagle, block, block-parallel, or mix")
    p.add_argument("--k", type=csv_list(int) if sweep else int, default=[4] if sweep else 4,
                   help="max drafted tokens per step, 1..16" + (" (comma list to sweep)" if sweep else ""))
    p.add_argument("--dynamic-k", type=float, default=None, metavar="T",
                   help="stop drafting when the draft's top probability falls below T")
    p.add_argument("--tree", default="chain",
                   help="spec: verify the drafts as a chain (default), a static tree (heads: Medusa's shape) or a dynamic "
                        "tree of the drafter's best guesses (heads, eagle, draft, early-exit, quant, block, block-parallel, "
                        "suffix)")
    p.add_argument("--tree-nodes", type=int, default=0, metavar="N",
                   help="a tree's size, drafts per verify forward (default 0: each step, the size that pays on this machine's measured costs)")
    p.add_argument("--window", type=int, default=16, help="nar/jacobi window (default 16)")
    p.add_argument("--hit-rate", type=float, default=0.7, help="sim drafter: chance each draft is right")
    p.add_argument("--ngram-min", type=int, default=1)
    p.add_argument("--ngram-max", type=int, default=3)
    p.add_argument("--mix-suffix", action="store_true",
                   help="mix: weigh the recipe book (suffix, with its --suffix-* options) as one more source")
    p.add_argument("--early-exit-layers", type=int, default=4)
    p.add_argument("--quant-bits", type=int, default=4, help="quant drafter: 4 (int4, default) or 8 (int8)")
    p.add_argument("--quant-layers", type=int, default=None, metavar="L",
                   help="quant drafter: only the first L layers (a quantised early exit; default all)")
    p.add_argument("--suffix-depth", type=int, default=24, metavar="D",
                   help="suffix drafter: the longest match looked for in its suffix trees (default 24)")
    p.add_argument("--suffix-factor", type=float, default=1.0,
                   help="suffix drafter: a match of m tokens may draft m * factor + offset tokens (default 1.0)")
    p.add_argument("--suffix-offset", type=float, default=0.0, help="suffix drafter: see --suffix-factor (default 0)")
    p.add_argument("--suffix-min-prob", type=float, default=0.1,
                   help="suffix drafter: stop a draft where its path probability falls below this (default 0.1)")
    p.add_argument("--suffix-history", type=int, default=200_000, metavar="TOKENS",
                   help="suffix drafter: tokens of earlier answers it keeps, oldest evicted first (default 200000)")
    p.add_argument("--suffix-in-flight", action="store_true",
                   help="suffix drafter: an answer joins the history as it grows (arctic-inference's way), not when done")
    p.add_argument("--suffix-cut", action="store_true",
                   help="suffix drafter: verify only the prefix of a proposal its record says pays on this machine's "
                        "measured verify costs (default: the whole proposal, arctic-inference's way)")
    p.add_argument("--suffix-impl", choices=("lab", "arctic"), default="lab",
                   help="suffix drafter: the lab's proposer or arctic-inference's (built by `make arctic`)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=csv_list(float) if sweep else float, default=[0.0] if sweep else 0.0,
                   help="0 = greedy" + (" (comma list to sweep)" if sweep else ""))
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--raw", action="store_true", help="do not apply the chat template")
    add_model_options(p, model_help="smollm2-135m (default) or tiny", explained=True)
    add_kernels_option(p)


def generation_config(args: argparse.Namespace, mode: str = "ar", k: int | None = None,
                      temperature: float | None = None) -> GenerationConfig:
    """The config `add_generation_options` asks for (a sweep's k and temperature given apart): every drafter's
    knobs ride along in drafter_options, and the drafter a mode names reads its own."""
    from .decode import GenerationConfig
    from .drafters import OPTION_NAMES

    return GenerationConfig(
        mode=mode, drafter=args.drafter, k=args.k if k is None else k, dynamic_k=args.dynamic_k,
        tree=args.tree, tree_nodes=args.tree_nodes, window=args.window, max_new_tokens=args.max_new_tokens,
        temperature=args.temperature if temperature is None else temperature, top_k=args.top_k, top_p=args.top_p,
        repetition_penalty=args.repetition_penalty, seed=args.seed, stop=tuple(args.stop),
        drafter_options={name: getattr(args, name) for name in OPTION_NAMES})
