"""The `make-data` command (argparse namespace in, a data run folder out)."""
from __future__ import annotations

from dataclasses import replace

from .data import DataConfig, grow, open_corpus
from .sources import MIX


# The smoke corpus: tiny, shards of 8 sequences of 16 tokens, a quarter held out.
SMOKE = DataConfig(model="tiny", max_new_tokens=16, concurrency=4, shard_size=8, heldout=0.25)


def data_config(args) -> DataConfig:
    """make-data's settings (--smoke: SMOKE)."""
    sources = tuple(s.strip() for s in args.sources.split(",") if s.strip()) if args.sources else tuple(MIX)
    if args.smoke:
        return DataConfig(**{**SMOKE.__dict__, "seed": args.seed, "sources": sources})
    return DataConfig(model=args.model, max_new_tokens=args.max_new_tokens, concurrency=args.concurrency,
                      seed=args.seed, shard_size=args.shard_size, heldout=args.heldout, sources=sources)


def run_make_data_command(args) -> None:
    from tqdm import tqdm

    from ..errors import SpecDecError
    from ..models import load_model

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


def smoke_corpus(lm) -> "Path":
    """A tiny corpus for `--smoke` training (made once, then reused from the cache): 2 shards of 8."""
    from .data import default_folder

    folder, manifest = open_corpus(lm, SMOKE, default_folder("tiny") / "smoke", resume=True)
    if len(manifest["shards"]) < 2:
        grow(lm, SMOKE, folder, manifest, 2 - len(manifest["shards"]))
    return folder


def data_folder(args, lm) -> "Path":
    """--data, or the smoke corpus, or the model's committed corpus (data/MODEL)."""
    from .corpus import corpus_dir

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


def run_train_draft_command(args) -> None:
    import os

    from tqdm import tqdm

    from ..drafters.weights import entry
    from ..models import load_model
    from .corpus import prefix, read_manifest
    import torch

    from ..errors import SpecDecError
    from .curve import record_riding_point, riding_run
    from .kinds import layers_needed
    from .prefetch import Prefetcher, TrainSplit
    from .train import (KINDS, TrainConfig, data_steps, evaluate, export, feature_layers, init_root, load_data,
                        open_training, steps_taken, train_steps, weights_root)

    kinds = train_kinds(args.kind)
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
    lm = load_model(model, args.device, "float32")
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
        if shards != len(read_manifest(folder)["shards"]) or tokens:
            raise SpecDecError("--curve-point rides on a run over the whole corpus: drop --data-shards / --data-tokens")
        rider = riding_run(lm, folder, args.curve_point, train, heldout, runs[0].config.data_offset + runs[0].step)
        if rider is not None and not set(layers_needed(rider.config.kind, lm)) <= set(feature_layers(lm, kinds)):
            raise SpecDecError(f"the curve's {rider.config.kind} reads target layers these kinds' batches lack: "
                               f"add {rider.config.kind} to --kind")
        if rider is None:
            print(f"{args.curve_point.name} has its whole-corpus point already: nothing rides along")
        elif rider.finished:
            print(f"{args.curve_point.name}: its whole-corpus point finished training, scored after this sitting")
        else:
            print(f"{args.curve_point.name}: its whole-corpus point rides along")
    for run in runs:
        print(f"{run.config.kind}: {len(train)} training sequences ({manifest['totals']['response_tokens']} response tokens, "
              f"{shards} shards of {folder}; batches from {run.config.data_offset + run.step}), reduced vocabulary "
              f"N = {len(run.vocab)}; run folder {run.folder}")
    trained = runs + ([rider] if rider is not None and not rider.finished else [])
    with tqdm(total=sum(r.config.steps for r in trained), initial=sum(r.step for r in trained),
              desc=f"train-draft {','.join(kinds)}", unit="step") as bar:
        if not args.feature_workers:
            train_steps(lm, trained, train, args.stop_after, bar)
        else:
            torch.set_num_threads(1)  # one thread here too: the same numbers as one one-thread process
            split = TrainSplit(str(folder), shards, tokens, feature_layers(lm, kinds))
            first = runs[0].config
            with Prefetcher(lm, split, data_steps(trained, args.stop_after), first.batch_size, first.seed,
                            args.feature_workers) as prefetched:
                train_steps(lm, trained, train, args.stop_after, bar, prefetched.batch)
            # The workers have stopped: evaluation and export take every core this process may use (whatever
            # OMP_NUM_THREADS said for the steps; the card keeps the steps' thread count).
            torch.set_num_threads(len(os.sched_getaffinity(0)))
    if rider is not None and rider.finished:
        point = record_riding_point(lm, folder, args.curve_point, rider, train)
        print(f"{args.curve_point.name}: point {point['sources']}-{point['tokens']} " + "  ".join(
            f"{c} s1 {row['s1']:.3f}" for c, row in point["categories"].items()))
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


def run_eval_draft_command(args) -> None:
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


def cost_model(args):
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


def prompt_cases(args) -> list:
    """The prompts `eval-draft --prompts` scores: FILE's cases, only --categories, at most --limit."""
    from ..errors import SpecDecError
    from ..suite import load_prompts, only_categories

    if args.max_new_tokens < 1:
        raise SpecDecError(f"max-new-tokens must be >= 1 (got {args.max_new_tokens})")
    cases = only_categories(load_prompts(args.prompts), args.categories, args.prompts)
    return cases[:args.limit] if args.limit else cases


def eval_on_prompts(args, lm, module, cases: list, checkpoint: dict | None = None) -> None:
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


def run_train_curve_command(args) -> None:
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


def run_tree_shape_command(args) -> None:
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
