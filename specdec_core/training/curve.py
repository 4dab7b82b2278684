"""The scaling curve (`train-curve`): first-draft acceptance on real prompts against training data.

One drafter kind (heads by default: the cheapest to train) is trained from scratch at several data
sizes — prefixes of the committed corpus, so every point's data contains the smaller points' — and
on one size from the templates alone, all with the same steps, batch and learning rate. Each point is
scored the way `eval-draft --prompts` scores a drafter: teacher-forced on the target's own greedy
answers to the suite's chat, qa and story prompts, walked the way the decode loop walks (BENCHMARKS
§10 showed that this number and the loop's agree within 0.01). The answers are decoded once and
shared by every point. Points are written to the JSON as they finish, and a rerun skips those done,
so the curve grows across sittings like the corpus does. `--ship` writes chosen points' weights beside
the JSON (`<out stem>/<point>/`), so a lesson can load two points and measure them again.

The whole-corpus point can also ride on a `train-draft` run over the same corpus (`--curve-point`):
that run's batches are exactly the point's, so the point pays only its own steps, not a target forward
per batch; it starts where the run stands in the data order (recorded as its `data_offset`).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

from ..drafters import ReducedVocab
from ..errors import SpecDecError
from ..models import LoadedModel, cache_dir
from ..suite import PROMPTS_DIR, PromptCase, load_prompts
from ..target import Target
from .batches import Sequence, decoded_sequence
from .corpus import read_manifest
from .kinds import layers_needed
from .on_prompts import answer, coverage
from .train import TrainConfig, TrainRun, evaluate, export, load_data, open_training, train_steps


@dataclass(frozen=True)
class Point:
    tokens: int  # response tokens of training data (whole sequences: the last one may overshoot)
    sources: str  # "all" or one source's name (e.g. "templates")

    @property
    def name(self) -> str:
        return f"{self.sources}-{self.tokens}"


def answers(lm: LoadedModel, kind: str, cases: list[PromptCase], max_new_tokens: int,
            progress: Callable[[int], None] = lambda n: None) -> dict[str, list]:
    """{category: [(turn, Sequence)]}: the target's greedy answers, with the states `kind` reads."""
    target, layers, out = Target(lm), layers_needed(kind, lm), {}
    for case in cases:
        for turn in answer(lm, kind, case, 1, max_new_tokens, loop=False):
            out.setdefault(case.category, []).append(
                (turn, decoded_sequence(target, turn["prompt_ids"], turn["output_ids"], layers)))
        progress(1)
    return out


def score(lm: LoadedModel, kind: str, module, vocab: ReducedVocab, scored: dict[str, list], k: int) -> dict:
    """Per category: walked first-draft acceptance s_1, walked tau(k), the vocabulary's coverage."""
    rows = {}
    for category, pairs in scored.items():
        result = evaluate(lm, kind, module, vocab, [s for _, s in pairs], k)
        kk = result["k"]
        rows[category] = {"s1": result["all"]["walked_survival"][kk][0], "tau": result["all"]["tau_walked"][kk],
                          "coverage": coverage(vocab, [t for t, _ in pairs])[1], "answers": len(pairs)}
    return rows


def points_folder(out: Path) -> Path:
    """Where shipped points' weights live: beside the curve's JSON, <out stem>/<point name>/<model>/<kind>."""
    return out.with_suffix("")


def _point_run(lm: LoadedModel, folder: Path, point: Point, config: TrainConfig) -> tuple[TrainRun, list, list, dict]:
    """A point's training run (resumed from its checkpoint when this machine has one) and its data."""
    train, heldout, used = load_data(lm, folder, config.kind, sources=None if point.sources == "all" else (point.sources,),
                                     tokens=point.tokens)
    run_config = TrainConfig(**{**asdict(config), "data": str(folder), "data_shards": len(used["shards"]),
                                "data_tokens": point.tokens, "data_sources": "" if point.sources == "all" else point.sources})
    return open_training(lm, run_config, train, heldout, resume=True), train, heldout, used  # its own folder: resumable


def ship(lm: LoadedModel, run: TrainRun, heldout: list, used: dict, out: Path, name: str) -> Path:
    """Export a finished point's weights and card under points_folder(out)/name."""
    return export(lm, run, used, evaluate(lm, run.config.kind, run.module, run.vocab, heldout), points_folder(out) / name)


def run_curve(lm: LoadedModel, folder: Path, out: Path, points: list[Point], config: TrainConfig, cases: list[PromptCase],
              k: int, max_new_tokens: int, bar=None, shipped: tuple[str, ...] = ()) -> dict:
    """Train and score every point not yet in `out` (JSON, rewritten after each point); write the weights
    of the points named in `shipped` (a finished point is re-opened from its checkpoint on this machine)."""
    manifest = read_manifest(folder)
    available = manifest["totals"]["response_tokens"]
    too_big = [p for p in points if p.tokens > available]
    if too_big:
        raise SpecDecError(f"the corpus holds {available} response tokens, fewer than the point {too_big[0].name} needs: "
                           "grow it with make-data --resume")
    unknown = sorted(set(shipped) - {p.name for p in points})
    if unknown:
        raise SpecDecError(f"--ship names {unknown[0]!r}, not a point of this run ({', '.join(p.name for p in points)})")
    result = json.loads(out.read_text()) if out.exists() else {}
    setting = {"kind": config.kind, "steps": config.steps, "batch_size": config.batch_size, "lr": config.lr, "vocab": config.vocab,
               "k": k, "max_new_tokens": max_new_tokens, "prompts": sorted({c.id for c in cases})}
    if result and result.get("setting") != setting:
        raise SpecDecError(f"{out} holds a curve with other settings ({result.get('setting')}): write elsewhere (--out)")
    result = {"setting": setting, "corpus": folder.name, "points": result.get("points", {})}
    todo = [p for p in points if p.name not in result["points"]]
    scored = answers(lm, config.kind, cases, max_new_tokens) if todo else {}
    for point in todo:
        run, train, heldout, used = _point_run(lm, folder, point, config)
        train_steps(lm, run, train, bar=bar)
        result["points"][point.name] = {
            **asdict(point), "sequences": len(train), "response_tokens": sum(s.rows - 1 for s in train),
            "categories": score(lm, config.kind, run.module, run.vocab, scored, k),
            "train_wall_s": round(run.wall_s, 1)}  # the steps' time, summed over every resume of the run
        out.write_text(json.dumps(result, indent=1) + "\n")
        if point.name in shipped:
            ship(lm, run, heldout, used, out, point.name)
    for point in (p for p in points if p.name in shipped and p not in todo):
        run, _, heldout, used = _point_run(lm, folder, point, config)
        if not run.finished:
            raise SpecDecError(f"the run of point {point.name} is not on this machine (or unfinished): "
                               f"retrain it with the same settings into another --out, then ship it")
        ship(lm, run, heldout, used, out, point.name)
    return result


def whole_corpus_point(folder: Path) -> Point:
    return Point(read_manifest(folder)["totals"]["response_tokens"], "all")


def riding_run(lm: LoadedModel, folder: Path, out: Path, train: list[Sequence], heldout: list[Sequence],
               data_step: int) -> TrainRun | None:
    """The whole-corpus point of the curve in `out` (its settings, from scratch) as a run that trains on
    another run's batches from `data_step` on, resumed from its own folder when an earlier sitting began
    it (finished already when a sitting stopped before scoring it); None when `out` has the point already.
    `train` must be the whole corpus of `folder`."""
    if not out.exists():
        raise SpecDecError(f"{out} holds no scaling curve yet: start it with train-curve, then let its whole-corpus point ride")
    result = json.loads(out.read_text())
    point = whole_corpus_point(folder)
    if point.name in result["points"]:
        return None
    setting = result["setting"]
    run_folder = cache_dir() / "training-runs" / lm.name / f"curve-{out.stem}-{point.name}"
    checkpoint = run_folder / "checkpoint.pt"
    if checkpoint.exists():
        config = TrainConfig(**torch.load(checkpoint, weights_only=False, map_location="cpu")["config"])
    else:
        config = TrainConfig(kind=setting["kind"], model=lm.name, steps=setting["steps"], batch_size=setting["batch_size"],
                             lr=setting["lr"], warmup=min(50, setting["steps"]), vocab=setting["vocab"],
                             checkpoint_every=min(100, setting["steps"]), data=str(folder),
                             data_shards=len(read_manifest(folder)["shards"]), data_tokens=point.tokens,
                             data_offset=data_step)
    run = open_training(lm, config, train, heldout, resume=True, out=run_folder)
    if not run.finished and config.data_offset + run.step != data_step:  # a finished point only waits to be scored
        raise SpecDecError(f"the riding point stopped at batch {config.data_offset + run.step} of the data order and this run "
                           f"stands at {data_step}: resume the run it rode on from the same place")
    return run


def record_riding_point(lm: LoadedModel, folder: Path, out: Path, run: TrainRun, train: list[Sequence]) -> dict:
    """Score a finished riding run like every other point (the suite's answers decoded now) and add it to `out`."""
    result = json.loads(out.read_text())
    setting, point = result["setting"], whole_corpus_point(folder)
    cases = {c.id: c for c in load_prompts(PROMPTS_DIR / "suite.jsonl")}
    missing = sorted(set(setting["prompts"]) - set(cases))
    if missing:
        raise SpecDecError(f"{out} was scored on prompts the suite no longer has ({missing[0]}): score it with train-curve")
    scored = answers(lm, run.config.kind, [cases[i] for i in setting["prompts"]], setting["max_new_tokens"])
    result["points"][point.name] = {
        **asdict(point), "sequences": len(train), "response_tokens": sum(s.rows - 1 for s in train),
        "categories": score(lm, run.config.kind, run.module, run.vocab, scored, setting["k"]),
        "train_wall_s": round(run.wall_s, 1), "data_offset": run.config.data_offset}
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result["points"][point.name]
