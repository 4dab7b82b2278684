"""Training a drafter (`train-draft`) and evaluating it offline (`eval-draft`).

A run lives in its own folder under SPECDEC_CACHE (training-runs/<model>/<kind>-<settings hash>):
`checkpoint.pt` holds the module, the optimizer, the step and the loss log, written every
`checkpoint_every` steps and at the end. Batches are a function of (seed, step) alone
(`batches.batch_at`) and the learning rate of the step alone, so a run stopped anywhere and resumed
ends with the same weights as one that never stopped. The finished module is exported in fp16 with
its manifest entry and model card (`drafters/weights.py`): into the repository for the real model,
into the run folder for `tiny`.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

from ..drafters import ReducedVocab
from ..drafters.weights import WEIGHTS_DIR, entry, load_module, save_state, seeded_vocab
from ..errors import SpecDecError
from ..models import LoadedModel, cache_dir
from .batches import Batch, Sequence, batch_at, load_splits, make_batch
from .corpus import load_corpus
from .kinds import KINDS, layers_needed
from .objectives import acceptance, survival_summary, walked_survival, walked_tau
from .vocab import choose_vocab


@dataclass(frozen=True)
class TrainConfig:
    kind: str
    model: str = "smollm2-135m"
    data: str = ""  # the corpus folder
    data_shards: int = 0  # its first N shards (fixed when the run starts: the corpus may grow meanwhile)
    data_tokens: int = 0  # of those, the sequences up to N response tokens (0: all)
    data_sources: str = ""  # only these prompt sources, comma-separated ("": all)
    steps: int = 1200
    batch_size: int = 8  # sequences (each up to 129 rows)
    lr: float = 1e-3
    warmup: int = 50
    depth: int = 4  # heads: how many heads; eagle: training-time-test unroll steps; draft, block: unused (a block is 8 wide)
    intermediate: int = 0  # the MLP width of eagle, draft and block (0: eagle the target's, draft 480, block 512)
    vocab: int = 0  # reduced vocabulary size N (0: measured, training/vocab.py)
    seed: int = 0
    checkpoint_every: int = 100
    init: str = ""  # warm start: "" from scratch, "shipped" from the repository's weights, or a weights folder
    # Batches of this data the warm start already took in earlier sittings (`steps_taken`): the data order
    # continues there, so passes add up across sittings instead of replaying the first batches each time.
    data_offset: int = 0

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise SpecDecError(f"unknown drafter kind {self.kind!r}: choose one of {', '.join(KINDS)}")
        for name in ("steps", "batch_size", "depth", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise SpecDecError(f"{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        if self.data_offset < 0:
            raise SpecDecError(f"data-offset must be >= 0 (got {self.data_offset})")
        if not 0 < self.lr < 1:
            raise SpecDecError(f"lr must be in (0, 1) (got {self.lr})")
        if self.depth > 16:
            raise SpecDecError(f"depth must be <= 16 (got {self.depth})")

    def settings(self) -> dict:
        """The settings that name a run; data_offset only where set, so runs begun before it existed
        keep their folders and checkpoints."""
        out = asdict(self)
        if not out["data_offset"]:
            del out["data_offset"]
        return out

    def run_key(self) -> str:
        digest = hashlib.sha256(json.dumps(self.settings(), sort_keys=True).encode()).hexdigest()[:10]
        return f"{self.kind}-{digest}"


def learning_rate(config: TrainConfig, step: int) -> float:
    """Linear warm-up, then cosine decay to a tenth."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(config.steps - config.warmup, 1)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def build_module(config: TrainConfig, lm: LoadedModel, vocab_ids: torch.Tensor) -> torch.nn.Module:
    """A fresh module from the seed (heads start at zero, as Medusa's do; draft from the target's first layers)."""
    torch.manual_seed(config.seed)
    module = KINDS[config.kind].build(lm, len(vocab_ids), config.depth, config.intermediate)
    module.vocab_ids.copy_(vocab_ids)
    return module


def measure_vocab(config: TrainConfig, lm: LoadedModel, train: list[Sequence], heldout: list[Sequence]
                  ) -> tuple[torch.Tensor, dict]:
    vocab_size = lm.model.config.vocab_size
    responses = lambda seqs: [s.next_tokens[:-1] for s in seqs]  # noqa: E731
    if config.vocab:
        if lm.name == "tiny":  # the tiny target's text is random: a seeded subset, as its drafters use
            return seeded_vocab(vocab_size, config.vocab, config.seed), {"rule": "seeded random (tiny)", "N": config.vocab}
        ids, report = choose_vocab(responses(train), responses(heldout), vocab_size, candidates=(config.vocab,))
        return ids, {**report, "rule": f"fixed N = {config.vocab} (most frequent on train)"}
    return choose_vocab(responses(train), responses(heldout), vocab_size)


@dataclass
class TrainRun:
    config: TrainConfig
    folder: Path
    module: torch.nn.Module
    vocab: ReducedVocab
    optimizer: torch.optim.Optimizer
    step: int
    log: list[dict]
    vocab_report: dict
    wall_s: float
    history: list[dict]  # the sittings of the weights this run started from (warm start), oldest first
    threads: int = 0  # torch threads its steps ran on (the card's hardware: evaluation may use more)

    @property
    def finished(self) -> bool:
        """Every step of its schedule taken: what is left is scoring or export."""
        return self.step >= self.config.steps


def init_root(config: TrainConfig) -> Path | None:
    return None if config.init == "shipped" else Path(config.init)


def warm_start(config: TrainConfig, lm: LoadedModel) -> tuple[torch.nn.Module, dict]:
    """The weights `config.init` names (float32, trainable) and their manifest entry: the next
    sitting of a drafter continues from what ships instead of starting over."""
    module = load_module(lm.name, config.kind, KINDS[config.kind].cls, init_root(config)).float()
    return module, entry(lm.name, config.kind, init_root(config))


def optimizer_file(model: str, kind: str, weights_sha256: str) -> Path:
    """Where the optimizer state of exported weights waits for the next warm start (never in the repo)."""
    return cache_dir() / "optimizer-state" / model / f"{kind}-{weights_sha256[:16]}.pt"


def open_training(lm: LoadedModel, config: TrainConfig, train: list[Sequence], heldout: list[Sequence],
                  resume: bool, out: Path | None = None) -> TrainRun:
    folder = out or cache_dir() / "training-runs" / lm.name / config.run_key()
    checkpoint = folder / "checkpoint.pt"
    if checkpoint.exists() and not resume:
        raise SpecDecError(f"{folder} already holds this run: pass --resume to continue it, or remove it")
    optimizer_state, history = None, []
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False, map_location=lm.device)
        if state["config"] != config.settings():
            raise SpecDecError(f"{checkpoint} was written with other settings: resume it with its own")
        module = checkpoint_module(lm, config, state)
        report, optimizer_state, history = state["vocab_report"], state["optimizer"], state.get("history", [])
    elif config.init:
        module, start = warm_start(config, lm)
        card = start["card"]
        report, history = card["vocab"], card.get("history") or [sitting_of(card)]
        saved = optimizer_file(lm.name, config.kind, start["sha256"])
        if saved.exists():  # the previous sitting's Adam moments, when this machine has them
            optimizer_state = torch.load(saved, weights_only=False, map_location=lm.device)
    else:
        vocab_ids, report = measure_vocab(config, lm, train, heldout)
        module = build_module(config, lm, vocab_ids)
    module = module.to(lm.device)
    optimizer = torch.optim.AdamW(module.parameters(), lr=config.lr, weight_decay=0.0)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    run = TrainRun(config, folder, module, ReducedVocab(module.vocab_ids, lm.model.lm_head.weight), optimizer, 0, [],
                   report, 0.0, history)
    if checkpoint.exists():
        run.step, run.log, run.wall_s = state["step"], state["log"], state["wall_s"]
    return run


def checkpoint_module(lm: LoadedModel, config: TrainConfig, state: dict) -> torch.nn.Module:
    """The module a checkpoint holds (float32): shaped as its run built it (a warm start as the weights it
    started from, a fresh run from its vocabulary), then loaded with the checkpoint's tensors."""
    module = build_module(config, lm, state["vocab_ids"]) if not config.init else warm_start(config, lm)[0]
    module.load_state_dict(state["module"])
    return module


def load_checkpoint(lm: LoadedModel, folder: Path, kind: str) -> tuple[torch.nn.Module, dict]:
    """A training run's latest checkpoint as a module, and its step: a run's progress scored mid-way
    (`eval-draft --checkpoint`), before it finishes and exports."""
    path = folder / "checkpoint.pt"
    if not path.is_file():
        raise SpecDecError(f"no checkpoint.pt in {folder}: pass a train-draft run folder "
                           f"(SPECDEC_CACHE/training-runs/MODEL/KIND-...)")
    state = torch.load(path, weights_only=False, map_location=lm.device)
    config = TrainConfig(**state["config"])
    if (config.kind, config.model) != (kind, lm.name):
        raise SpecDecError(f"{path} holds a {config.kind} run on {config.model}, not {kind} on {lm.name}")
    return checkpoint_module(lm, config, state).to(lm.device).eval(), {
        "folder": folder.name, "step": state["step"], "steps": config.steps, "wall_s": round(state["wall_s"], 1)}


def sitting_of(card: dict) -> dict:
    """A model card's own run as one entry of the history (cards written before the history existed)."""
    data = card.get("data", {})
    return {"steps": card.get("steps"), "tokens_seen": card.get("tokens_seen"), "wall_s": card.get("wall_s"),
            "batch_size": card.get("train_config", {}).get("batch_size"), "data": data.get("folder"),
            "response_tokens": data.get("response_tokens"), "hardware": card.get("hardware")}


def save_checkpoint(run: TrainRun) -> None:
    run.folder.mkdir(parents=True, exist_ok=True)
    partial = run.folder / "checkpoint.pt.partial"
    torch.save({"config": run.config.settings(), "module": run.module.state_dict(), "optimizer": run.optimizer.state_dict(),
                "step": run.step, "log": run.log, "wall_s": run.wall_s, "vocab_ids": run.module.vocab_ids.clone(),
                "vocab_report": run.vocab_report, "history": run.history}, partial)
    os.replace(partial, run.folder / "checkpoint.pt")


def steps_taken(history: list[dict], data: str, response_tokens: int, batch_size: int, seed: int) -> int:
    """Batches the latest sittings of `history` took over this very data (same corpus folder and size,
    batch size and seed, counted back from the newest): where the next sitting's data order goes on."""
    taken = 0
    for sitting in reversed(history):
        if (sitting.get("data"), sitting.get("response_tokens"), sitting.get("batch_size"), sitting.get("seed", 0)) \
                != (data, response_tokens, batch_size, seed):
            break
        taken += sitting.get("steps") or 0
    return taken


def _data_step(run: TrainRun) -> int:
    return run.config.data_offset + run.step


def _end(run: TrainRun, stop_after: int | None) -> int:
    return run.config.steps if stop_after is None else min(run.config.steps, run.step + stop_after)


def data_steps(runs: list[TrainRun], stop_after: int | None = None) -> range:
    """The batches (data steps) `train_steps` will take, in order: from where the runs stand to where the
    last of them stops."""
    start = _data_step(runs[0])
    return range(start, start + max(_end(r, stop_after) - r.step for r in runs))


def train_steps(lm: LoadedModel, runs: TrainRun | list[TrainRun], train: list[Sequence], stop_after: int | None = None,
                bar=None, batches: Callable[[int], Batch] | None = None) -> None:
    """Train each run from run.step to its config.steps (or `stop_after` steps of this sitting), checkpointing.

    Several runs (drafter kinds) train together on one stream of batches: a batch is built once — with
    online features that is the target's forward, ~40 % of a joint step of five kinds — and every run
    takes its step on it. They must stand at the same place in the same data order (batch size, seed,
    data_offset + step). `batches(step)` builds data step `step`'s batch (default `batch_at` on
    `train`, here; prefetch.py builds them ahead in other processes)."""
    runs = [runs] if isinstance(runs, TrainRun) else list(runs)
    order = {(r.config.batch_size, r.config.seed, _data_step(r)) for r in runs}
    if len(order) > 1:
        raise SpecDecError("runs trained together must share batch size, seed and place in the data "
                           f"(batch size, seed, batch index: {sorted(order)}): train them separately")
    final = lm.model.config.num_hidden_layers
    ends = {id(r): _end(r, stop_after) for r in runs}
    config = runs[0].config
    batches = batches or (lambda step: batch_at(train, step, config.batch_size, config.seed))
    for run in runs:
        run.module.train()
        run.threads = torch.get_num_threads()
    while True:
        live = [r for r in runs if r.step < ends[id(r)]]
        if not live:
            break
        start = time.perf_counter()
        batch = batches(_data_step(live[0])).to(lm.device)
        shared = (time.perf_counter() - start) / len(live)  # the batch's cost, split between the runs that use it
        for run in live:
            start = time.perf_counter()
            loss, agreement = _step(lm, run, batch, final)
            run.wall_s += shared + time.perf_counter() - start
            run.log.append({"step": run.step, "loss": round(loss, 5), "top1": [round(a, 4) for a in agreement],
                            "rows": int(batch.rows.sum())})
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.3f}", top1="/".join(f"{a:.2f}" for a in agreement[:4]), refresh=False)
            if run.step % run.config.checkpoint_every == 0 or run.step == ends[id(run)]:
                save_checkpoint(run)
    for run in runs:
        run.module.eval()


def _step(lm: LoadedModel, run: TrainRun, batch: Batch, final: int) -> tuple[float, list[float]]:
    """One optimizer step of `run` on `batch`: (loss, per-position top-1 agreement)."""
    config = run.config
    for group in run.optimizer.param_groups:
        group["lr"] = learning_rate(config, run.step)
    # Any randomness of the loss (the block drafter's anchors) is a function of (seed, step) too.
    generator = torch.Generator().manual_seed(config.seed * 1_000_003 + run.step)
    loss, agreement = KINDS[config.kind].training_loss(run.module, run.vocab, lm.model, batch,
                                                       KINDS[config.kind].train_depth(config.depth), final, generator)
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(run.module.parameters(), 1.0)
    run.optimizer.step()
    run.step += 1
    return float(loss.detach()), agreement


@torch.no_grad()
def evaluate(lm: LoadedModel, kind: str, module: torch.nn.Module, vocab: ReducedVocab, sequences: list[Sequence],
             k: int = 8, batch_size: int = 8) -> dict:
    """Offline greedy acceptance on held-out sequences (teacher-forced, no timing): per-position
    survival and the tau each k implies, over all anchors and over the greedy sequences alone."""
    final = lm.model.config.num_hidden_layers
    limit = KINDS[kind].max_k(module)  # heads: nothing to draft beyond the last head
    k = min(k, limit or k)
    parts: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {"all": [], "greedy": []}
    for start in range(0, len(sequences), batch_size):
        chunk = sequences[start:start + batch_size]
        batch = make_batch(chunk).to(lm.device)
        accepted, valid = acceptance(KINDS[kind].logits(module, vocab, lm.model, batch, k), vocab, lm.model.lm_head,
                                     batch, final)
        greedy = torch.tensor([s.greedy for s in chunk], device=lm.device)[:, None]
        parts["all"].append((accepted.cpu(), valid.cpu()))
        parts["greedy"].append((accepted.cpu(), (valid & greedy).cpu()))
    result: dict = {"k": k, "sequences": len(sequences)}
    for split, pieces in parts.items():
        summary = survival_summary(torch.cat([a[v] for a, v in pieces]), k)
        summary["tau_walked"] = {kk: walked_tau(pieces, kk) for kk in range(1, k + 1)}
        summary["walked_survival"] = {kk: walked_survival(pieces, kk) for kk in range(1, k + 1)}
        result[split] = summary
    return result


def export(lm: LoadedModel, run: TrainRun, data_manifest: dict, offline: dict, root: Path | None = None,
           calibration: dict | None = None) -> Path:
    """Write the fp16 weights, their manifest entry and the model card (markdown beside the weights)."""
    tensors = {name: (t.half() if t.is_floating_point() else t).cpu() for name, t in run.module.state_dict().items()}
    totals = data_manifest.get("totals", {})
    shards = data_manifest.get("shards", [])
    tokens_seen = sum(entry.get("rows", 0) for entry in run.log)
    sitting = {"steps": run.step, "tokens_seen": tokens_seen, "wall_s": round(run.wall_s, 1),
               "batch_size": run.config.batch_size, "seed": run.config.seed, "data_offset": run.config.data_offset,
               "data": Path(run.config.data).name,
               "response_tokens": totals.get("response_tokens"), "init": run.config.init or "scratch",
               "hardware": f"{platform.machine()} {os.cpu_count()} CPU threads, torch {torch.__version__}, "
                           f"{run.threads or torch.get_num_threads()} torch threads", "date": time.strftime("%Y-%m-%d")}
    history = [*run.history, sitting]
    card = {
        "kind": run.config.kind, "target": lm.name,
        "train_config": {**asdict(run.config), "data": Path(run.config.data).name},  # no local paths
        "data": {"folder": Path(run.config.data).name, "shards": len(shards), "sequences": totals.get("sequences"),
                 "response_tokens": totals.get("response_tokens"), "sources": totals.get("sources", {}),
                 "licences": {name: info["licence"] for name, info in data_manifest.get("sources", {}).items()},
                 "overlap": {"threshold": data_manifest.get("overlap", {}).get("threshold"),
                             "max_overlap": max((e.get("max_overlap", 0.0) for e in shards), default=0.0),
                             "dropped": sum(e.get("dropped", {}).get("overlap", 0) for e in shards)}},
        "vocab": run.vocab_report, "steps": run.step, "tokens_seen": tokens_seen, "wall_s": round(run.wall_s, 1),
        "hardware": sitting["hardware"], "history": history,
        "total": {"steps": sum(h.get("steps") or 0 for h in history), "tokens_seen": sum(h.get("tokens_seen") or 0 for h in history),
                  "wall_s": round(sum(h.get("wall_s") or 0 for h in history), 1), "sittings": len(history)},
        "final_loss": run.log[-1]["loss"] if run.log else None, "offline_heldout": offline,
    }
    if calibration is not None:
        card["calibration"] = summary_of(calibration)
    config = dict(run.module.config)
    path = save_state(lm.name, run.config.kind, tensors, config, card, root)
    (path.parent / f"{run.config.kind}.md").write_text(model_card(card), encoding="utf-8")
    saved = optimizer_file(lm.name, run.config.kind, entry(lm.name, run.config.kind, root)["sha256"])
    saved.parent.mkdir(parents=True, exist_ok=True)
    torch.save(run.optimizer.state_dict(), saved)  # for the next sitting's warm start (--init)
    return path


def model_card(card: dict) -> str:
    off = card["offline_heldout"]
    lines = [f"# `{card['kind']}` drafter for {card['target']}", "",
             f"- Data: {card['data']['sequences']} sequences, {card['data']['response_tokens']} response tokens, the "
             f"target's own answers (self-distillation) from the corpus {card['data']['folder']} "
             f"({card['data']['shards']} shards), no external dataset. Prompts by source: "
             + ", ".join(f"{name} {count} ({card['data']['licences'].get(name, '?')})"
                         for name, count in card['data']['sources'].items()) + ".",
             f"- Overlap check: max 3-gram overlap with any eval prompt {card['data']['overlap']['max_overlap']:.0%} "
             f"(limit {card['data']['overlap']['threshold']:.0%}; {card['data']['overlap']['dropped']} prompts dropped).",
             f"- Reduced vocabulary: N = {card['vocab']['N']} ({card['vocab']['rule']}).",
             f"- Training: {card['steps']} steps ({card['tokens_seen']} tokens seen), {card['wall_s'] / 60:.1f} min on "
             f"{card['hardware']}; settings {json.dumps(card['train_config'])}.",
             f"- In all, over {card['total']['sittings']} sitting(s): {card['total']['steps']} steps, "
             f"{card['total']['tokens_seen']} tokens seen, {card['total']['wall_s'] / 60:.1f} min.",
             "", "Offline, held-out, greedy sequences (teacher-forced):", "",
             "| i | survival s_i | conditional a_i |", "|---|---|---|"]
    g = off["greedy"]
    lines += [f"| {i} | {s:.3f} | {a:.3f} |" for i, (s, a) in enumerate(zip(g["survival"], g["conditional"]), 1)]
    lines += ["", "tau(k) = 1 + s_1 + ... + s_k (every anchor): " + ", ".join(f"k={k}: {t:.2f}" for k, t in g["tau"].items()),
              "", "tau(k) along the anchors the greedy loop visits (what decoding measures): "
              + ", ".join(f"k={k}: {t:.2f}" for k, t in g["tau_walked"].items()), ""]
    if "calibration" in card:
        cal = card["calibration"]
        lines += [f"Confidence calibration ({cal['rule']}): ECE of prefix survival S_j, 15 bins, before -> after "
                  "sequential temperature scaling.", "", "| j | regime | blocks | T_j | survival | ECE before | ECE after | AUC |",
                  "|---|---|---|---|---|---|---|---|"]
        for regime in ("greedy", "sampled"):
            for p in cal[regime]["positions"]:
                auc = "–" if p["auc"] is None else f"{p['auc']:.3f}"
                lines.append(f"| {p['position']} | {regime} | {cal[regime]['blocks']} | {p['temperature']:.2f} | "
                             f"{p['survival']:.3f} | {p['ece_before']:.1%} | {p['ece_after']:.1%} | {auc} |")
        lines.append("")
    return "\n".join(lines)


def summary_of(calibration: dict) -> dict:
    """A calibration report without its reliability tables (what the manifest keeps)."""
    return {key: ({**value, "positions": [{k: v for k, v in p.items() if not k.startswith("reliability")}
                                          for p in value["positions"]]} if isinstance(value, dict) else value)
            for key, value in calibration.items()}


def weights_root(lm: LoadedModel, run: TrainRun) -> Path | None:
    """Where a finished run exports: the repository's weights for the real model, the run folder for tiny."""
    return None if lm.name != "tiny" else run.folder / "weights"


def load_data(lm: LoadedModel, folder: Path, kinds: str | tuple[str, ...], features: str = "cache", shards: int = 0,
              sources: tuple[str, ...] | None = None, tokens: int = 0,
              on_sequence=lambda n: None) -> tuple[list[Sequence], list[Sequence], dict]:
    """The corpus of `folder` (`corpus.load_corpus`: its first `shards`, only `sources`, up to `tokens`),
    verified, split into train and held-out sequences with the states the kind(s) train on (`features`:
    "cache" or "online", features.py; several kinds get the union of their layers from one forward);
    the manifest returned lists the shards read."""
    corpus = load_corpus(folder, shards, tokens, sources)
    if corpus.manifest["model"]["name"] != lm.name:
        raise SpecDecError(f"{folder} holds a corpus of {corpus.manifest['model']['name']}, not {lm.name}")
    train, heldout = load_splits(lm, corpus, feature_layers(lm, kinds), features, on_sequence)
    return train, heldout, corpus.manifest


def feature_layers(lm: LoadedModel, kinds: str | tuple[str, ...]) -> tuple[int, ...]:
    """The target layers the kind(s) train on: several kinds get the union, from one forward."""
    kinds = (kinds,) if isinstance(kinds, str) else kinds
    return tuple(sorted({layer for kind in kinds for layer in layers_needed(kind, lm)}))


__all__ = ["KINDS", "TrainConfig", "layers_needed", "TrainRun", "WEIGHTS_DIR", "data_steps", "evaluate", "export", "feature_layers",
           "load_data", "open_training", "steps_taken", "train_steps", "weights_root"]
