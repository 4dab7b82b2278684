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

import torch

from ..drafters import ReducedVocab
from ..drafters.weights import WEIGHTS_DIR, save_state, seeded_vocab
from ..errors import SpecDecError
from ..models import LoadedModel, cache_dir
from .batches import Sequence, batch_at, load_split, make_batch, read_manifest
from .kinds import KINDS, layers_needed
from .objectives import acceptance, survival_summary, walked_survival, walked_tau
from .vocab import choose_vocab


@dataclass(frozen=True)
class TrainConfig:
    kind: str
    model: str = "smollm2-135m"
    data: str = ""  # the data run folder
    steps: int = 1200
    batch_size: int = 8  # sequences (each up to 129 rows)
    lr: float = 1e-3
    warmup: int = 50
    depth: int = 4  # heads: how many heads; eagle: training-time-test unroll steps; draft, block: unused (a block is 8 wide)
    intermediate: int = 0  # the MLP width of eagle, draft and block (0: eagle the target's, draft 480, block 512)
    vocab: int = 0  # reduced vocabulary size N (0: measured, training/vocab.py)
    seed: int = 0
    checkpoint_every: int = 100

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise SpecDecError(f"unknown drafter kind {self.kind!r}: choose one of {', '.join(KINDS)}")
        for name in ("steps", "batch_size", "depth", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise SpecDecError(f"{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        if not 0 < self.lr < 1:
            raise SpecDecError(f"lr must be in (0, 1) (got {self.lr})")
        if self.depth > 16:
            raise SpecDecError(f"depth must be <= 16 (got {self.depth})")

    def run_key(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]
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


def open_training(lm: LoadedModel, config: TrainConfig, train: list[Sequence], heldout: list[Sequence],
                  resume: bool, out: Path | None = None) -> TrainRun:
    folder = out or cache_dir() / "training-runs" / lm.name / config.run_key()
    checkpoint = folder / "checkpoint.pt"
    if checkpoint.exists() and not resume:
        raise SpecDecError(f"{folder} already holds this run: pass --resume to continue it, or remove it")
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False, map_location=lm.device)
        if state["config"] != asdict(config):
            raise SpecDecError(f"{checkpoint} was written with other settings: resume it with its own")
        vocab_ids, report = state["vocab_ids"], state["vocab_report"]
    else:
        vocab_ids, report = measure_vocab(config, lm, train, heldout)
        state = None
    module = build_module(config, lm, vocab_ids).to(lm.device)
    optimizer = torch.optim.AdamW(module.parameters(), lr=config.lr, weight_decay=0.0)
    run = TrainRun(config, folder, module, ReducedVocab(vocab_ids, lm.model.lm_head.weight), optimizer, 0, [], report, 0.0)
    if state is not None:
        module.load_state_dict(state["module"])
        optimizer.load_state_dict(state["optimizer"])
        run.step, run.log, run.wall_s = state["step"], state["log"], state["wall_s"]
    return run


def save_checkpoint(run: TrainRun) -> None:
    run.folder.mkdir(parents=True, exist_ok=True)
    partial = run.folder / "checkpoint.pt.partial"
    torch.save({"config": asdict(run.config), "module": run.module.state_dict(), "optimizer": run.optimizer.state_dict(),
                "step": run.step, "log": run.log, "wall_s": run.wall_s, "vocab_ids": run.module.vocab_ids.clone(),
                "vocab_report": run.vocab_report}, partial)
    os.replace(partial, run.folder / "checkpoint.pt")


def train_steps(lm: LoadedModel, run: TrainRun, train: list[Sequence], stop_after: int | None = None, bar=None) -> None:
    """Train from run.step to config.steps (or `stop_after` steps of this sitting), checkpointing."""
    config = run.config
    final = lm.model.config.num_hidden_layers
    run.module.train()
    end = config.steps if stop_after is None else min(config.steps, run.step + stop_after)
    while run.step < end:
        start = time.perf_counter()
        batch = batch_at(train, run.step, config.batch_size, config.seed).to(lm.device)
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
        loss = float(loss.detach())
        run.wall_s += time.perf_counter() - start
        run.log.append({"step": run.step, "loss": round(loss, 5), "top1": [round(a, 4) for a in agreement]})
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", top1="/".join(f"{a:.2f}" for a in agreement[:4]), refresh=False)
        if run.step % config.checkpoint_every == 0 or run.step == end:
            save_checkpoint(run)
    run.module.eval()


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
    card = {
        "kind": run.config.kind, "target": lm.name,
        "train_config": {**asdict(run.config), "data": Path(run.config.data).name},  # no local paths
        "data": {"folder": Path(run.config.data).name, "sequences": totals.get("sequences"),
                 "response_tokens": totals.get("response_tokens"),
                 "sources": "the target's own answers (self-distillation) to the lab's template prompts "
                            "(specdec_core/training/prompts.py, written for this project, same licence as the repo); "
                            "no external dataset",
                 "contamination": data_manifest.get("contamination", {})},
        "vocab": run.vocab_report, "steps": run.step, "wall_s": round(run.wall_s, 1),
        "hardware": f"{platform.machine()} {os.cpu_count()} CPU threads, torch {torch.__version__}, "
                    f"{torch.get_num_threads()} torch threads",
        "final_loss": run.log[-1]["loss"] if run.log else None, "offline_heldout": offline,
    }
    if calibration is not None:
        card["calibration"] = summary_of(calibration)
    config = dict(run.module.config)
    path = save_state(lm.name, run.config.kind, tensors, config, card, root)
    (path.parent / f"{run.config.kind}.md").write_text(model_card(card), encoding="utf-8")
    return path


def model_card(card: dict) -> str:
    off = card["offline_heldout"]
    lines = [f"# `{card['kind']}` drafter for {card['target']}", "",
             f"- Data: {card['data']['sequences']} sequences, {card['data']['response_tokens']} response tokens "
             f"({card['data']['folder']}); {card['data']['sources']}.",
             f"- Contamination check: max 3-gram overlap with any eval prompt "
             f"{card['data']['contamination'].get('max_overlap', float('nan')):.0%} "
             f"(limit {card['data']['contamination'].get('threshold', float('nan')):.0%}).",
             f"- Reduced vocabulary: N = {card['vocab']['N']} ({card['vocab']['rule']}).",
             f"- Training: {card['steps']} steps, {card['wall_s'] / 60:.1f} min on {card['hardware']}; "
             f"settings {json.dumps(card['train_config'])}.",
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


def load_data(lm: LoadedModel, folder: Path, kind: str, limit: int | None = None) -> tuple[list[Sequence], list[Sequence], dict]:
    layers = layers_needed(kind, lm)
    manifest = read_manifest(folder)
    if manifest.get("model", {}).get("name") != lm.name:
        raise SpecDecError(f"{folder} holds data of {manifest.get('model', {}).get('name')}, not {lm.name}")
    return (load_split(folder, manifest, "train", layers, limit), load_split(folder, manifest, "heldout", layers, limit),
            manifest)


__all__ = ["KINDS", "TrainConfig", "layers_needed", "TrainRun", "WEIGHTS_DIR", "evaluate", "export", "load_data", "open_training",
           "train_steps", "weights_root"]
