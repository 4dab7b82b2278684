"""The training subsystem's commands: `make-data`, `train-draft`, `train-curve`, `eval-draft` and
`tree-shape` (each a Command: its options, declared here, and its handler)."""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..options import Command, add_model_options

if TYPE_CHECKING:
    from ..models import LoadedModel
    from .batches import Sequence
    from .data import DataConfig
    from .prefetch import TrainSplit
    from .train import TrainConfig, TrainRun


def make_data_options(md: argparse.ArgumentParser) -> None:
    add_model_options(md, model_help="smollm2-135m (default) or tiny")
    md.add_argument("--shards", type=int, help="append N shards (default 1, or until --until-tokens)")
    md.add_argument("--until-tokens", type=int, help="append shards until the corpus holds N response tokens")
    md.add_argument("--max-new-tokens", type=int, default=128)
    md.add_argument("--concurrency", type=int, default=16, help="requests in flight (default 16)")
    md.add_argument("--workers", type=int, default=1,
                    help="processes answering shards side by side, one thread each, while this one gathers the next "
                         "shard's prompts (default 1: one process, its threads from OMP_NUM_THREADS); the shards are "
                         "the same bytes as one one-thread process writes")
    md.add_argument("--seed", type=int, default=0)
    md.add_argument("--shard-size", type=int, default=64, help="sequences per shard (default 64)")
    md.add_argument("--heldout", type=float, default=0.05, help="share of sequences held out, by a hash of the prompt (default 0.05)")
    md.add_argument("--sources", help="comma-separated prompt sources (default: all of templates, self-instruct, "
                                      "passages, code, multi-turn)")
    md.add_argument("--out", type=Path, help="the corpus folder (default: data/MODEL in the repository; tiny: the cache)")
    md.add_argument("--resume", action="store_true", help="grow the existing corpus of --out (its shards are verified first)")
    md.add_argument("--smoke", action="store_true", help="tiny, shards of 8 sequences of 16 tokens, into --out or the cache")


def train_draft_options(td: argparse.ArgumentParser) -> None:
    td.add_argument("--kind", required=True, help="the drafter to train: draft, heads, eagle, block or block-parallel; several "
                                                  "comma-separated train together, sharing each batch's target forward")
    add_model_options(td, dtype=False)
    td.add_argument("--data", type=Path, help="the corpus folder (default: the committed data/MODEL)")
    td.add_argument("--data-tokens", type=int, help="train on the corpus's first shards up to N response tokens (default: all)")
    td.add_argument("--data-shards", type=int, help="train on the corpus's first N shards (default: all; pins a resumed run)")
    td.add_argument("--features", choices=("cache", "online"), default="cache",
                    help="the target's states: computed once into SPECDEC_CACHE/features (default) or in every step")
    td.add_argument("--feature-workers", type=int, default=0,
                    help="with --features online: N processes (one thread each) build the coming batches' target "
                         "states while this one, on one thread too, trains (default 0: built here, between steps); "
                         "the same weights, bit for bit, as one one-thread process")
    td.add_argument("--curve-point", type=Path, metavar="CURVE.json",
                    help="also train the whole-corpus point of this scaling curve (train-curve's settings, from scratch) "
                         "on these batches, from where this run stands; scored into the file when it finishes")
    td.add_argument("--smoke", action="store_true", help="a few steps on tiny, end to end (data made if missing)")
    td.add_argument("--init", help="warm start: 'shipped' (the repository's weights of this kind) or a weights folder; "
                                   "the optimizer state follows from the cache when this machine exported them")
    td.add_argument("--steps", type=int, help="optimizer steps (default 1200; 6 with --smoke)")
    td.add_argument("--batch-size", type=int, default=8, help="sequences per step (default 8)")
    td.add_argument("--lr", type=float, help="learning rate (default: a warm start's own, else 1e-3)")
    td.add_argument("--warmup", type=int, default=50)
    td.add_argument("--depth", type=int, default=4, help="heads: number of heads; eagle: unrolled training-time-test steps; draft: unused")
    td.add_argument("--intermediate", type=int, default=0, help="eagle and draft: MLP width (default: eagle the target's, draft 480)")
    td.add_argument("--vocab", type=int, default=0, help="reduced vocabulary size N (default: measured)")
    td.add_argument("--seed", type=int, default=0)
    td.add_argument("--checkpoint-every", type=int, default=100)
    td.add_argument("--stop-after", type=int, help="stop this sitting after N steps (checkpointed; continue with --resume)")
    td.add_argument("--resume", action="store_true", help="continue the run with these settings from its checkpoint")
    td.add_argument("--out", type=Path, help="the run folder (default: SPECDEC_CACHE/training-runs/MODEL/KIND-HASH; "
                                           "several kinds: OUT/KIND)")


def train_curve_options(tc: argparse.ArgumentParser) -> None:
    tc.add_argument("--kind", default="heads", help="the drafter kind (default heads: the cheapest)")
    tc.add_argument("--sizes", default="25000,50000,100000,200000", help="response tokens per point, comma-separated "
                                                                      "(empty with --templates-size: that point alone)")
    tc.add_argument("--templates-size", type=int, help="one point on the templates alone, this many tokens (default: the smallest size)")
    tc.add_argument("--steps", type=int, default=600, help="steps per point, the same for every point (default 600)")
    tc.add_argument("--batch-size", type=int, default=8)
    tc.add_argument("--lr", type=float, default=1e-3)
    tc.add_argument("--vocab", type=int, default=8192, help="reduced vocabulary size, the same at every point (default "
                                                          "8192, as the shipped drafters: a measured N would grow with the data's variety)")
    tc.add_argument("--prompts", type=Path, default=Path("specdec_core/prompts/suite.jsonl"), metavar="FILE")
    tc.add_argument("--categories", default="chat,qa,story")
    tc.add_argument("--k", type=int, default=4)
    tc.add_argument("--max-new-tokens", type=int, default=64)
    tc.add_argument("--data", type=Path, help="the corpus folder (default: the committed data/MODEL)")
    add_model_options(tc, dtype=False)
    tc.add_argument("--out", type=Path, required=True, help="the curve's JSON (points already in it are kept)")
    tc.add_argument("--ship", help="points whose weights to write beside the JSON (OUT without .json/POINT/), "
                                   "comma-separated names such as all-100000,templates-100000")


def eval_draft_options(ed: argparse.ArgumentParser) -> None:
    ed.add_argument("--kind", required=True, help="the trained drafter to evaluate: draft, heads, eagle, block or block-parallel")
    add_model_options(ed, dtype=False)
    ed.add_argument("--data", type=Path, help="the corpus folder (default: the committed data/MODEL)")
    ed.add_argument("--weights", type=Path, help="a weights folder other than the shipped one (holding MODEL/KIND.safetensors)")
    ed.add_argument("--checkpoint", type=Path, metavar="RUN",
                    help="a train-draft run folder (SPECDEC_CACHE/training-runs/MODEL/KIND-...): evaluate its latest "
                         "checkpoint, a run's progress before it finishes")
    ed.add_argument("--smoke", action="store_true", help="evaluate on the smoke data run (tiny)")
    ed.add_argument("--k", type=int, default=8, help="draft positions to evaluate (default 8)")
    ed.add_argument("--limit", type=int, help="at most N held-out sequences (with --prompts: N prompts)")
    ed.add_argument("--prompts", type=Path, metavar="FILE",
                    help="instead of held-out data: the target's greedy answers to the prompts of FILE (JSONL, e.g. "
                         "the suite), scored offline and, with the shipped weights, in the decode loop, per category")
    ed.add_argument("--categories", help="with --prompts: only these categories (comma-separated)")
    ed.add_argument("--max-new-tokens", type=int, default=64, help="with --prompts: answer length (default 64)")
    ed.add_argument("--json", action="store_true")
    ed.add_argument("--costs", type=Path, metavar="FILE",
                    help="a cost model from `profile --drafters KIND --out FILE`: also choose k on the held-out split, "
                         "the k whose walked tau(k) buys the most speed at this machine's verify and draft costs")
    ed.add_argument("--calibration", type=Path, metavar="OUT",
                    help="drafters with a confidence head: also write the calibration report (ECE per position, "
                         "reliability tables, AUC; the shipped temperatures on the held-out test half) to OUT as JSON")


def tree_shape_options(ts: argparse.ArgumentParser) -> None:
    add_model_options(ts, dtype=False)
    ts.add_argument("--data", type=Path, help="the corpus folder (default: the committed data/MODEL)")
    ts.add_argument("--ranks", type=int, default=8, help="guesses per depth to measure (default 8)")
    ts.add_argument("--limit", type=int, default=0, help="at most N held-out sequences (default all)")


def data_config(args: argparse.Namespace) -> DataConfig:
    """make-data's settings (--smoke: SMOKE)."""
    from .data import SMOKE, DataConfig
    from .sources import MIX

    sources = tuple(s.strip() for s in args.sources.split(",") if s.strip()) if args.sources else tuple(MIX)
    if args.smoke:
        return DataConfig(**{**SMOKE.__dict__, "seed": args.seed, "sources": sources})
    return DataConfig(model=args.model, max_new_tokens=args.max_new_tokens, concurrency=args.concurrency,
                      seed=args.seed, shard_size=args.shard_size, heldout=args.heldout, sources=sources)


def run_make_data_command(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from ..errors import SpecDecError
    from ..models import load_model

    from .data import grow, open_corpus

    config = data_config(args)
    config.validate()  # bad settings fail before the model loads
    for name in ("shards", "until_tokens", "workers"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise SpecDecError(f"{name.replace('_', '-')} must be >= 1 (got {getattr(args, name)})")
    shards = args.shards if args.shards is not None or args.until_tokens is not None else 1
    lm = load_model(config.model, args.device, args.dtype)
    folder, manifest = open_corpus(lm, config, args.out, args.resume)  # a refused corpus before the progress bar
    before = manifest.get("totals", {}).get("response_tokens", 0)
    goal = args.until_tokens - before if args.until_tokens else (shards or 0) * config.shard_size * config.max_new_tokens
    with tqdm(total=max(goal, 0), desc="make-data", unit="tok") as bar:
        manifest = grow(lm, config, folder, manifest, shards, args.until_tokens, bar, args.workers)
    t = manifest["totals"]
    print(f"{folder}: {t['shards']} shards, {t['sequences']} sequences, {t['response_tokens']} response tokens "
          f"(+{t['response_tokens'] - before}), {t['bytes'] / 1e6:.2f} MB; sources "
          + ", ".join(f"{k} {v}" for k, v in t["sources"].items()))


def data_folder(args: argparse.Namespace, lm: LoadedModel) -> Path:
    """--data, or the smoke corpus, or the model's committed corpus (data/MODEL)."""
    from .corpus import corpus_dir
    from .data import smoke_corpus

    if args.data:
        return args.data
    if getattr(args, "smoke", False):
        return smoke_corpus(lm)
    return corpus_dir(lm.name)


def train_kinds(spec: str) -> tuple[str, ...]:
    """--kind: one drafter kind, or several comma-separated (trained together on one stream of batches)."""
    from ..errors import SpecDecError
    from .kinds import KINDS

    kinds = tuple(dict.fromkeys(k.strip() for k in spec.split(",") if k.strip()))
    unknown = [k for k in kinds if k not in KINDS]
    if not kinds or unknown:
        raise SpecDecError(f"unknown drafter kind {(unknown or [spec])[0]!r}: choose from {', '.join(KINDS)} (comma-separated for several)")
    return kinds


def train_configs(args: argparse.Namespace, kinds: tuple[str, ...]) -> list[TrainConfig]:
    """train-draft's TrainConfig per kind (--smoke: tiny, a few steps), each checked before the model loads."""
    from ..errors import SpecDecError
    from .train import TrainConfig

    if args.feature_workers and args.features != "online":
        raise SpecDecError("--feature-workers builds online features: add --features online (the cache has them already)")
    if args.feature_workers < 0:
        raise SpecDecError(f"--feature-workers must be >= 0 (got {args.feature_workers})")
    model = "tiny" if args.smoke else args.model
    steps = args.steps if args.steps is not None else (6 if args.smoke else 1200)
    configs = [TrainConfig(kind=kind, model=model, steps=steps, batch_size=args.batch_size, lr=args.lr if args.lr is not None else 1e-3,
                           warmup=min(args.warmup, steps), depth=args.depth, intermediate=args.intermediate,
                           vocab=args.vocab or (512 if args.smoke else 0), seed=args.seed,
                           checkpoint_every=3 if args.smoke else args.checkpoint_every, init=str(args.init or ""))
               for kind in kinds]
    for config in configs:
        config.validate()
    return configs


def curve_rider(args: argparse.Namespace, lm: LoadedModel, folder: Path, whole_corpus: bool, kinds: tuple[str, ...],
                train: list[Sequence], heldout: list[Sequence], first: TrainRun) -> TrainRun | None:
    """--curve-point: the curve's whole-corpus point, trained on this run's batches from where `first` (this
    run's first kind) stands; None when the curve has it already."""
    from ..errors import SpecDecError
    from .curve import riding_run
    from .kinds import layers_needed
    from .train import feature_layers

    if not whole_corpus:
        raise SpecDecError("--curve-point rides on a run over the whole corpus: drop --data-shards / --data-tokens")
    rider = riding_run(lm, folder, args.curve_point, train, heldout, first.config.data_offset + first.step)
    if rider is not None and not set(layers_needed(rider.config.kind, lm)) <= set(feature_layers(lm, kinds)):
        raise SpecDecError(f"the curve's {rider.config.kind} reads target layers these kinds' batches lack: "
                           f"add {rider.config.kind} to --kind")
    if rider is None:
        print(f"{args.curve_point.name} has its whole-corpus point already: nothing rides along")
    elif rider.finished:
        print(f"{args.curve_point.name}: its whole-corpus point finished training, scored after this sitting")
    else:
        print(f"{args.curve_point.name}: its whole-corpus point rides along")
    return rider


def train_sitting(args: argparse.Namespace, lm: LoadedModel, trained: list[TrainRun], train: list[Sequence],
                  split: TrainSplit) -> None:
    """This sitting's steps of every run (up to --stop-after), batches built here or by --feature-workers."""
    import os

    import torch
    from tqdm import tqdm

    from .prefetch import Prefetcher
    from .train import data_steps, train_steps

    with tqdm(total=sum(r.config.steps for r in trained), initial=sum(r.step for r in trained),
              desc=f"train-draft {','.join(train_kinds(args.kind))}", unit="step") as bar:
        if not args.feature_workers:
            train_steps(lm, trained, train, args.stop_after, bar)
            return
        torch.set_num_threads(1)  # one thread here too: the same numbers as one one-thread process
        first = trained[0].config
        with Prefetcher(lm, split, data_steps(trained, args.stop_after), first.batch_size, first.seed,
                        args.feature_workers) as prefetched:
            train_steps(lm, trained, train, args.stop_after, bar, prefetched.batch)
        # The workers have stopped: evaluation and export take every core this process may use (whatever
        # OMP_NUM_THREADS said for the steps; the card keeps the steps' thread count).
        torch.set_num_threads(len(os.sched_getaffinity(0)))


def finish_runs(lm: LoadedModel, runs: list[TrainRun], heldout: list[Sequence], manifest: dict) -> None:
    """Every finished run evaluated (and calibrated) on the held-out split and exported; the others told
    how to continue."""
    from .train import KINDS, evaluate, export, weights_root

    # Several finished kinds are each evaluated (and calibrated): compute the held-out states once for all,
    # and only now, so that a sitting which stops before the end never pays for them.
    if sum(run.finished for run in runs) > 1:
        heldout = [replace(s, hidden=s.features()) for s in heldout]
    for run in runs:
        if not run.finished:
            print(f"{run.config.kind}: stopped at step {run.step} of {run.config.steps} (checkpointed in {run.folder}): continue with --resume")
            continue
        calibration = None
        if KINDS[run.config.kind].calibrate is not None:
            print(f"{run.config.kind}: calibrating the confidence head on the held-out split ...")
            calibration = KINDS[run.config.kind].calibrate(run.module, run.vocab, lm.model, heldout)
        offline = evaluate(lm, run.config.kind, run.module, run.vocab, heldout)
        path = export(lm, run, manifest, offline, weights_root(lm, run), calibration)
        g = offline["greedy"]
        print(f"{run.config.kind}: wrote {path} ({path.stat().st_size / 1e6:.2f} MB); held-out greedy survival "
              + " ".join(f"{s:.2f}" for s in g["survival"]) + "; tau(k), walked: " + " ".join(f"{t:.2f}" for t in g["tau_walked"].values()))


def run_train_draft_command(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from ..drafters.weights import entry
    from ..models import load_model
    from .corpus import prefix, read_manifest
    from .curve import record_riding_point
    from .prefetch import TrainSplit
    from .train import TrainConfig, feature_layers, init_root, load_data, open_training, steps_taken

    kinds = train_kinds(args.kind)
    configs = train_configs(args, kinds)
    lm = load_model(configs[0].model, args.device, "float32")
    folder = data_folder(args, lm)
    tokens = args.data_tokens or 0
    manifest = read_manifest(folder)
    shards = args.data_shards or len(prefix(manifest, tokens))
    size = sum(e["response_tokens"] for e in manifest["shards"][:shards])

    def placed(config: TrainConfig) -> TrainConfig:
        """The data it trains on; a warm start also keeps its own learning rate (unless --lr) and goes on
        in the data order where its earlier sittings on this very data stopped."""
        config = replace(config, data=str(folder), data_shards=shards, data_tokens=tokens)
        if not config.init:
            return config
        card = entry(lm.name, config.kind, init_root(config))["card"]
        return replace(config, lr=card["train_config"]["lr"] if args.lr is None else args.lr, data_offset=steps_taken(
            card.get("history", []), folder.name, size, config.batch_size, config.seed))

    configs = [placed(c) for c in configs]
    with tqdm(desc=f"features ({args.features})", unit="seq") as bar:
        train, heldout, manifest = load_data(lm, folder, kinds, args.features, shards, tokens=tokens, on_sequence=bar.update)
    runs = [open_training(lm, c, train, heldout, args.resume, args.out / c.kind if args.out and len(kinds) > 1 else args.out)
            for c in configs]
    rider = None
    if args.curve_point:
        whole_corpus = shards == len(read_manifest(folder)["shards"]) and not tokens
        rider = curve_rider(args, lm, folder, whole_corpus, kinds, train, heldout, runs[0])
    for run in runs:
        print(f"{run.config.kind}: {len(train)} training sequences ({manifest['totals']['response_tokens']} response tokens, "
              f"{shards} shards of {folder}; batches from {run.config.data_offset + run.step}), reduced vocabulary "
              f"N = {len(run.vocab)}; run folder {run.folder}")
    trained = runs + ([rider] if rider is not None and not rider.finished else [])
    train_sitting(args, lm, trained, train, TrainSplit(str(folder), shards, tokens, feature_layers(lm, kinds)))
    if rider is not None and rider.finished:
        point = record_riding_point(lm, folder, args.curve_point, rider, train)
        print(f"{args.curve_point.name}: point {point['sources']}-{point['tokens']} " + "  ".join(
            f"{c} s1 {row['s1']:.3f}" for c, row in point["categories"].items()))
    finish_runs(lm, runs, heldout, manifest)


def run_eval_draft_command(args: argparse.Namespace) -> None:
    import json

    from tqdm import tqdm

    from ..drafters import module_vocab
    from ..drafters.weights import drafter_module, load_module
    from ..models import load_model
    from ..errors import SpecDecError
    from .train import KINDS, evaluate, load_checkpoint, load_data

    if args.kind not in KINDS:
        raise SpecDecError(f"unknown drafter kind {args.kind!r}: choose one of {', '.join(KINDS)}")
    if args.weights and args.checkpoint:
        raise SpecDecError("--weights and --checkpoint both name the weights to evaluate: pass one")
    cases = prompt_cases(args) if args.prompts else None  # bad prompts or settings fail before the model loads
    costs = cost_model(args) if args.costs else None
    lm = load_model(args.model, args.device, "float32")
    cls = KINDS[args.kind].cls
    checkpoint = None
    if args.checkpoint:
        module, checkpoint = load_checkpoint(lm, args.checkpoint, args.kind)
        if not args.json:
            print(f"{args.kind}: the checkpoint of {checkpoint['folder']}, step {checkpoint['step']} of {checkpoint['steps']}")
    else:
        module = load_module(lm.name, args.kind, cls, args.weights) if args.weights else drafter_module(lm, args.kind, cls)
    if cases is not None:
        eval_on_prompts(args, lm, module, cases, checkpoint)
        return
    folder = data_folder(args, lm)
    # The held-out split only: its states computed here, once each ("online"), never the training split's
    # (the feature cache would first fill with every shard of the corpus: hours on one core).
    _, heldout, _ = load_data(lm, folder, args.kind, features="online")
    heldout = [replace(s, hidden=s.features()) for s in tqdm(heldout[:args.limit or None], desc="held-out states",
                                                               unit="seq")]
    vocab = module_vocab(module, lm.model.lm_head.weight)
    if args.calibration:
        if KINDS[args.kind].calibrate is None:
            raise SpecDecError(f"{args.kind} has no confidence head to calibrate (block and block-parallel have)")
        report = KINDS[args.kind].calibrate(module, vocab, lm.model, heldout, False)
        args.calibration.write_text(json.dumps({"kind": args.kind, "model": lm.name, "data": folder.name, **report}, indent=1) + "\n")
        greedy = report["greedy"]["positions"]
        print(f"calibration ({report['test_sequences']} test sequences, {report['greedy']['blocks']} blocks) -> {args.calibration}: "
              "greedy ECE after scaling " + " ".join(f"{p['ece_after']:.1%}" for p in greedy))
    result = evaluate(lm, args.kind, module, vocab, heldout, args.k)
    if checkpoint is not None:
        result["checkpoint"] = checkpoint
    if costs is not None:  # the greedy split: the suite's targets are greedy
        result["choose_k"] = choose_k(result["greedy"]["tau_walked"], costs, args.kind)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    for split in ("greedy", "all"):
        s = result[split]
        print(f"{args.kind} on {result['sequences']} held-out sequences ({split}: {s['anchors']} anchors)")
        print("  i   survival  conditional")
        for i, (surv, cond) in enumerate(zip(s["survival"], s["conditional"]), 1):
            print(f"  {i:<3} {surv:8.3f}  {cond:11.3f}")
        print("  tau(k): " + "  ".join(f"k={k} {t:.2f}" for k, t in s["tau"].items()))
        print("  tau(k) along the loop's own anchors: " + "  ".join(f"k={k} {t:.2f}" for k, t in s["tau_walked"].items()))
    if costs is not None:
        chosen = result["choose_k"]
        print(f"k chosen on the held-out split (greedy, walked tau(k); costs from {args.costs}: {chosen['machine']}, "
              f"c = {chosen['c']:.3f}): k = {chosen['k']}")
        print("  predicted speedup: " + "  ".join(f"k={k} {x:.2f}x" for k, x in chosen["speedup"].items()))


def cost_model(args: argparse.Namespace):
    """The cost model `eval-draft --costs` reads, checked before the model loads: it must be this model's
    and must have timed this drafter's draft step."""
    from ..costmodel import CostModel
    from ..errors import SpecDecError

    if args.prompts:
        raise SpecDecError("--costs chooses k on the held-out split: leave out --prompts")
    try:
        costs = CostModel.load(args.costs)
    except (OSError, ValueError, TypeError) as e:
        raise SpecDecError(f"--costs {args.costs}: not a cost model written by `profile --out` ({e})") from None
    if costs.model != args.model:
        raise SpecDecError(f"--costs {args.costs} was measured on {costs.model}, not {args.model}")
    if args.kind not in costs.draft_step_s:
        raise SpecDecError(f"--costs {args.costs} has no draft step for {args.kind}: measure it with "
                           f"`python -m specdec_core profile --drafters {args.kind} --out {args.costs}`")
    return costs


def choose_k(tau_walked: dict[int, float], costs, kind: str) -> dict:
    """The k to bench a drafter at, chosen once on held-out data: the one whose walked tau(k) (which tracks
    the decode loop) buys the most speed at the measured verify ratios r(k) and draft cost c."""
    from ..theory import best_measured_k, speedup_by_k

    ratios, c = {k: costs.verify_ratio(k) for k in tau_walked}, costs.c(kind)
    return {"k": best_measured_k(tau_walked, ratios, c), "c": c, "verify_ratios": ratios,
            "speedup": speedup_by_k(tau_walked, ratios, c), "machine": f"{costs.device}, {costs.threads} threads"}


def prompt_cases(args: argparse.Namespace) -> list:
    """The prompts `eval-draft --prompts` scores: FILE's cases, only --categories, at most --limit."""
    from ..errors import SpecDecError
    from ..suite import load_prompts, only_categories

    if args.max_new_tokens < 1:
        raise SpecDecError(f"max-new-tokens must be >= 1 (got {args.max_new_tokens})")
    cases = only_categories(load_prompts(args.prompts), args.categories, args.prompts)
    return cases[:args.limit] if args.limit else cases


def eval_on_prompts(args: argparse.Namespace, lm, module, cases: list, checkpoint: dict | None = None) -> None:
    """`eval-draft --prompts FILE`: offline acceptance and the decode loop's on the same answers."""
    import json

    from tqdm import tqdm

    from ..drafters import module_vocab
    from .on_prompts import compare_on_prompts

    loop = args.weights is None and args.checkpoint is None  # the decode loop runs the shipped weights
    vocab = module_vocab(module, lm.model.lm_head.weight)
    with tqdm(total=len(cases), desc=f"eval-draft {args.kind} on {args.prompts.name}", unit="prompt") as bar:
        result = compare_on_prompts(lm, args.kind, module, vocab, cases, args.k, args.max_new_tokens, loop, bar.update)
    result["prompts"] = args.prompts.name
    if checkpoint is not None:
        result["checkpoint"] = checkpoint
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{args.kind} on the target's greedy answers to {args.prompts.name} (k = {result['k']}, "
          f"{result['max_new_tokens']} new tokens); s1 = first-draft acceptance, tau = tokens per verify step")
    print(f"  {'category':<14} {'answers':>7} {'tokens':>6} {'in vocab':>8}  {'offline s1':>10} {'walked s1':>9} "
          f"{'walked tau':>10}" + (f"  {'loop s1':>7} {'loop tau':>8}" if loop else ""))
    for name, row in result["categories"].items():
        off = row["offline"]
        line = (f"  {name:<14} {row['answers']:>7} {row['answer_tokens']:>6} {row['vocab_coverage']:>8.1%}  "
                f"{off['survival'][0]:>10.3f} {off['walked_survival'][0]:>9.3f} {off['tau_walked']:>10.2f}")
        if loop:
            line += f"  {row['loop']['survival'][0]:>7.3f} {row['loop']['tau']:>8.2f}"
        print(line)
    if not loop:
        print("  (the decode loop runs the shipped weights: no loop columns for --weights or --checkpoint)")


def run_train_curve_command(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from ..errors import SpecDecError
    from ..models import load_model
    from .curve import Point, run_curve
    from .train import TrainConfig

    try:
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        raise SpecDecError(f"sizes must be comma-separated integers (got {args.sizes!r})")
    if (not sizes and not args.templates_size) or min(sizes, default=1) < 1 or (args.templates_size or 1) < 1:
        raise SpecDecError(f"sizes must be >= 1, and --sizes may be empty only with --templates-size (got {args.sizes!r})")
    points = [Point(n, "all") for n in sizes] + [Point(args.templates_size or min(sizes), "templates")]
    config = TrainConfig(kind=args.kind, model=args.model, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                         warmup=min(50, args.steps), vocab=512 if args.model == "tiny" else args.vocab,
                         checkpoint_every=min(100, args.steps))
    config.validate()
    args.limit = None
    cases = prompt_cases(args)
    lm = load_model(args.model, args.device, "float32")
    folder = data_folder(args, lm)
    with tqdm(total=args.steps * len(points), desc=f"train-curve {args.kind}", unit="step") as bar:
        result = run_curve(lm, folder, args.out, points, config, cases, args.k, args.max_new_tokens, bar,
                           tuple(n.strip() for n in (args.ship or "").split(",") if n.strip()))
    for name, point in result["points"].items():
        print(f"  {name:<18} {point['response_tokens']:>8} tokens  " + "  ".join(
            f"{c} s1 {row['s1']:.3f} tau {row['tau']:.2f}" for c, row in point["categories"].items()))


def run_tree_shape_command(args: argparse.Namespace) -> None:
    from ..errors import SpecDecError
    from ..models import load_model
    from .corpus import load_corpus
    from .tree_shape import measure_and_record

    if not 2 <= args.ranks <= 64 or args.limit < 0:
        raise SpecDecError(f"--ranks must be 2..64 and --limit >= 0 (got {args.ranks}, {args.limit})")
    lm = load_model(args.model, args.device, "float32")
    if lm.name == "tiny":
        raise SpecDecError("tiny's heads are random weights with no data: its static tree uses a stand-in table")
    folder = data_folder(args, lm)
    table = measure_and_record(lm, load_corpus(folder), args.ranks, args.limit)
    print(f"heads' rank accuracy on {table['sequences']} held-out sequences of {folder} (shipped as heads.tree.json):")
    for depth, (row, anchors) in enumerate(zip(table["rank_accuracy"], table["anchors"]), 1):
        print(f"  depth {depth} ({anchors} anchors): " + " ".join(f"{a:.3f}" for a in row))


COMMANDS = (
    Command("make-data", "grow the training corpus: the target's answers (token ids) to prompts from every source",
            make_data_options, run_make_data_command),
    Command("train-draft", "train a drafter on a make-data run (checkpoints, --resume)", train_draft_options,
            run_train_draft_command),
    Command("train-curve", "the scaling curve: a drafter trained at several data sizes (and on the templates alone), "
                           "scored on the target's answers to real prompts", train_curve_options, run_train_curve_command),
    Command("eval-draft", "offline per-position acceptance of a trained drafter on held-out data", eval_draft_options,
            run_eval_draft_command),
    Command("tree-shape", "measure the heads' rank accuracies on held-out data: the shape of their static (Medusa) tree, "
                          "shipped beside the weights as heads.tree.json", tree_shape_options, run_tree_shape_command),
)
