"""The `make-data` command (argparse namespace in, a data run folder out)."""
from __future__ import annotations

from .data import DataConfig, fill_run, open_run


def run_make_data_command(args) -> None:
    from tqdm import tqdm

    from ..models import load_model

    config = DataConfig(model=args.model, prompts=args.prompts, max_new_tokens=args.max_new_tokens,
                        concurrency=args.concurrency, seed=args.seed, heldout=args.heldout, shard_size=args.shard_size)
    config.validate()  # bad settings fail before the model loads
    lm = load_model(args.model, args.device, args.dtype)
    run = open_run(lm, config, args.out, args.resume)  # and a refused run before the progress bar
    with tqdm(total=config.prompts, desc="make-data", unit="seq") as bar:
        manifest = fill_run(lm, run, bar)
    totals, report = manifest["totals"], manifest["contamination"]
    print(f"{run.folder}: {totals['sequences']} sequences, {totals['response_tokens']} response tokens, "
          f"{totals['bytes'] / 1e6:.1f} MB ({totals['bytes_per_response_token']:.0f} bytes/token), "
          f"{len(manifest['shards'])} shards, layers {manifest['capture_layers']}")
    print(f"contamination check: {report['training_prompts']} prompts x {report['eval_turns']} eval turns, "
          f"max 3-gram overlap {report['max_overlap']:.0%} (limit {report['threshold']:.0%})")
