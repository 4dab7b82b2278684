"""The engine's own commands: `generate` (one prompt through the front door, generation.py) and `prepare`
(the model converted and this machine's kernel table measured, once)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import SpecDecError, ensure_writable
from .options import Command, add_generation_options, add_weights_option, generation_config


def generate_options(g: argparse.ArgumentParser) -> None:
    g.add_argument("--prompt", required=True)
    g.add_argument("--mode", default="ar", help="ar, nar, jacobi or spec (its drafter: --drafter), or a bench mode such "
                   "as spec:eagle@tree=dynamic or ar@weights=int4")
    add_generation_options(g)
    g.add_argument("--json", action="store_true", help="print {text, token_ids, metrics} as JSON")
    g.add_argument("--trace", type=Path, help="save the step-by-step trace as JSON")
    add_weights_option(g)


def run_generate_command(args: argparse.Namespace) -> None:
    """--mode reads bench's mode grammar (bench/modes.py: `spec:eagle@tree=dynamic`, `ar@weights=int4`);
    bare `spec` drafts with --drafter, and a mode's own settings win over the options."""
    from tqdm import tqdm

    from .bench.modes import mode_config, parse_mode
    from .decode import run
    from .generation import generate, prepare
    from .metrics import positional_matches
    from .models import load_model
    from .quant import with_weights

    if not args.prompt.strip():
        raise SpecDecError("the prompt is empty")
    if args.trace:
        ensure_writable(args.trace)
    mode = parse_mode(args.mode)
    if mode.peer:
        raise SpecDecError(f"generate runs the engine's own modes: {args.mode} is a peer that bench compares with")
    config = mode_config(generation_config(args), mode)
    weights = args.weights if mode.weights == "fp32" else mode.weights
    lm = with_weights(load_model(args.model, args.device, args.dtype, mode.kernels or args.kernels), weights)
    state = prepare(lm, args.prompt, config, raw=args.raw)  # every setting checked before the progress bar
    with tqdm(total=config.max_new_tokens, unit="tok", disable=args.json or not sys.stderr.isatty(), leave=False) as bar:
        result = run(lm, args.prompt, state, config, progress=lambda n: bar.update(n - bar.n))
    extra = {}
    if config.mode == "nar":  # NAR's point: how much of AR's text did one-shot prediction get right?
        ar = generate(lm, args.prompt, generation_config(args, "ar"), raw=args.raw)
        extra = {"matches_ar": positional_matches(result.token_ids, ar.token_ids), "ar_tokens": len(ar.token_ids)}
    if args.trace:
        result.trace.save(args.trace)
    if args.json:
        print(json.dumps({"text": result.text, "token_ids": result.token_ids, "metrics": result.metrics, **extra}, ensure_ascii=False))
        return
    print(result.text)
    m = result.metrics
    summary = (f"[{config.label}] {m['new_tokens']} tokens, {m['target_forwards']} target forwards, "
               f"tau={m['mean_acceptance_length']:.2f}, {m['tokens_per_s']:.1f} tok/s")
    if config.mode == "spec":
        summary += f", alpha={m['draft_acceptance_rate']:.2f}"
    if extra:
        summary += f", {extra['matches_ar']}/{extra['ar_tokens']} tokens match AR"
    print(summary, file=sys.stderr)


def run_prepare_command(args: argparse.Namespace) -> None:
    """Convert the model once, and measure this machine's kernel table once (both cached)."""
    import torch

    from .kernels import table_key
    from .kernels.table import table_path
    from .models import cache_dir, converted_model_dir, load_model
    print(converted_model_dir())
    path = table_path(cache_dir(), table_key("smollm2-135m", torch.float32))
    if not path.is_file():
        load_model("smollm2-135m", "cpu", "float32", "measured")
    print(path)


COMMANDS = (
    Command("generate", "decode one prompt and print the text (or JSON)", generate_options, run_generate_command),
    Command("prepare", "convert the model once into the local cache and measure this machine's kernel table",
            lambda parser: None, run_prepare_command),  # prepare takes no options
)
