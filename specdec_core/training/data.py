"""Self-distillation data: the target's own answers to the training prompts, with the hidden states
every drafter trains on, in safetensors shards outside the repo.

A drafter is trained to guess what *this* target says next, so the data is the target's own text.
The work is done shard by shard, and a shard is the unit of resuming and of reproducibility:
1. generate: the shard's prompts, through the chat template, answered by the target with the serving
   engine (plain AR, `fixed` scheduler, a closed loop of C requests in flight); even prompt indices
   greedy, odd ones sampled at temperature 0.7, each request with its own seed from the run seed and
   its prompt index;
2. capture: when a response is done, one plain forward of the target (fresh cache) over prompt +
   response returns the CAPTURE layers' hidden states, of which the last prompt position and every
   response position are kept, in float16;
3. write: the shard goes to a temporary file, is renamed into place, and its SHA-256 into manifest.json.
Every shard runs on an engine of its own that drains before the next shard starts, so a shard's
batches (and with them the float rounding of its batched forwards) never depend on what ran before:
a resumed run writes the same bytes as an uninterrupted one, and the same seed regenerates the same
shards on the same machine, kernels and thread count.

Shard format (`train-00000.safetensors`, `heldout-00000.safetensors`; n sequences):
- `tokens` (T,) int32: each sequence's prompt ids (chat template applied) then its response ids, back
  to back; `offsets` (n+1,) int64: sequence i is tokens[offsets[i]:offsets[i+1]];
- `prompt_lens` (n,) int32; `prompt_index` (n,) int32, the prompt's place in `training_prompts(seed)`
  (its parity says greedy or sampled);
- `hidden.<layer>` (rows, H) float16 per captured layer: sequence i owns 1 + (its response length)
  rows, row j the state at position prompt_len - 1 + j, the one that predicts token prompt_len + j
  (the last row, at the final response token, predicts nothing but is the feature EAGLE regresses to).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from fractions import Fraction
from itertools import accumulate
from pathlib import Path
from typing import Callable, Sequence

import torch
from safetensors.torch import load_file, save_file

from ..decode import GenerationConfig
from ..errors import SpecDecError
from ..provenance import git_commit
from ..llama import depth_layer
from ..models import LoadedModel, cache_dir, sha256_file
from ..serving import ServingEngine, make_scheduler
from ..serving.engine import Request
from ..target import Target
from .prompts import TrainingPrompt, check_contamination, training_prompts

FORMAT = 1
SAMPLED_TEMPERATURE = 0.7
REPO = Path(__file__).resolve().parents[2]

# The hidden states a shard keeps: the union of what every drafter kind trains on, as fractions of the
# depth L, numbered as `llama.decoder` numbers them (i = the output after i decoder layers, L = after
# the final norm). Fractions keep `tiny` (L = 2) working; the layers they round to are deduplicated.
CAPTURE_FRACTIONS = (
    # The final normed state: what Medusa heads read, and the draft model's distillation target
    # (logits = h @ embed^T with the tied embeddings, so no logits are stored).
    Fraction(1),
    # Low, middle and high layers for the EAGLE-3-style fuse (its paper: layers 2, L/2 and L-3 of 30).
    Fraction(1, 15), Fraction(1, 2), Fraction(9, 10),
    # Five evenly spaced interior layers for the block drafter (issue 15: never the final state).
    Fraction(1, 6), Fraction(2, 6), Fraction(3, 6), Fraction(4, 6), Fraction(5, 6),
)


def capture_layers(num_layers: int) -> tuple[int, ...]:
    """The CAPTURE_FRACTIONS of a model of `num_layers` layers (`llama.depth_layer`): 2, 5, 10, 15, 20,
    25, 27, 30 for SmolLM2's 30."""
    return tuple(sorted({depth_layer(f.numerator, f.denominator, num_layers) for f in CAPTURE_FRACTIONS}))


@dataclass(frozen=True)
class DataConfig:
    model: str = "smollm2-135m"
    prompts: int = 2048
    max_new_tokens: int = 128
    concurrency: int = 16
    seed: int = 0
    heldout: float = 0.05  # the share of prompts held out, chosen by a hash of the prompt text
    shard_size: int = 128  # sequences per shard: what an interrupted run can lose

    def validate(self) -> None:
        available = len(training_prompts(self.seed))
        if not 1 <= self.prompts <= available:
            raise SpecDecError(f"prompts must be between 1 and {available} (the training set's size; got {self.prompts})")
        if self.max_new_tokens < 1:
            raise SpecDecError(f"max-new-tokens must be >= 1 (got {self.max_new_tokens})")
        if not 1 <= self.concurrency <= 256:
            raise SpecDecError(f"concurrency must be between 1 and 256 (got {self.concurrency})")
        if not 0 <= self.heldout < 1:
            raise SpecDecError(f"heldout must be in [0, 1) (got {self.heldout})")
        if self.shard_size < 1:
            raise SpecDecError(f"shard-size must be >= 1 (got {self.shard_size})")

    def run_key(self, prompt_hash: str) -> str:
        """The run's folder name: readable settings + a hash of everything that changes the bytes
        (concurrency and shard size too: they set the batches, hence the rounding)."""
        blob = json.dumps({**asdict(self), "prompt_set": prompt_hash, "format": FORMAT}, sort_keys=True)
        digest = hashlib.sha256(blob.encode()).hexdigest()[:10]
        return f"n{self.prompts}-t{self.max_new_tokens}-s{self.seed}-{digest}"


def _unit_hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def is_heldout(prompt: TrainingPrompt, fraction: float) -> bool:
    """Held out by a hash of the text alone: a prompt is on the same side in every run and every seed,
    so a drafter trained on one run can be evaluated on another's held-out split."""
    return _unit_hash(prompt.text) < fraction * 2 ** 64


def request_config(config: DataConfig, index: int) -> GenerationConfig:
    """Prompt `index`'s generation: greedy on even indices, temperature 0.7 on odd ones, and a seed of
    its own from (run seed, index), so any one response can be regenerated alone."""
    return GenerationConfig(mode="ar", max_new_tokens=config.max_new_tokens,
                            temperature=0.0 if index % 2 == 0 else SAMPLED_TEMPERATURE,
                            seed=_unit_hash(f"{config.seed}:{index}") >> 1)


def prompt_set_hash(prompts: Sequence[TrainingPrompt]) -> str:
    return hashlib.sha256(json.dumps([asdict(p) for p in prompts], ensure_ascii=False).encode()).hexdigest()


@dataclass(frozen=True)
class ShardPlan:
    name: str  # "train-00000", "heldout-00000"
    split: str
    prompts: tuple[TrainingPrompt, ...]


def plan_shards(prompts: Sequence[TrainingPrompt], config: DataConfig) -> list[ShardPlan]:
    """The run's shards in order: the training prompts in runs of shard_size, then the held-out ones."""
    plans = []
    for split in ("train", "heldout"):
        members = [p for p in prompts if is_heldout(p, config.heldout) == (split == "heldout")]
        for number, start in enumerate(range(0, len(members), config.shard_size)):
            plans.append(ShardPlan(f"{split}-{number:05d}", split, tuple(members[start:start + config.shard_size])))
    return plans


# --- one shard ----------------------------------------------------------------------------------


@dataclass
class Sample:
    prompt: TrainingPrompt
    ids: list[int]  # prompt (chat template applied) + response
    prompt_len: int
    hidden: dict[int, torch.Tensor]  # layer -> (len(ids) - prompt_len + 1, H) float16


def respond(lm: LoadedModel, prompts: Sequence[TrainingPrompt], config: DataConfig,
            on_done: Callable[[TrainingPrompt, Request], None], on_tokens: Callable[[int], None]) -> None:
    """The target's answers, `config.concurrency` requests in flight: the next prompt is submitted
    when one finishes (in prompt order, so the batches depend on the prompts and seeds alone)."""
    engine = ServingEngine(lm, make_scheduler("fixed"))
    pending = iter(prompts)
    owner: dict[int, TrainingPrompt] = {}
    live: list[Request] = []

    def submit() -> None:
        prompt = next(pending, None)
        if prompt is None:
            return
        request = engine.submit([{"role": "user", "content": prompt.text}], request_config(config, prompt.index))
        if request.error:
            raise SpecDecError(f"training prompt {prompt.index} was refused: {request.error}")
        owner[request.id] = prompt
        live.append(request)

    for _ in range(config.concurrency):
        submit()
    counted = 0
    while not engine.idle:
        finished = engine.step()
        produced = sum(len(r.output_ids) for r in live)
        on_tokens(produced - counted)
        counted = produced
        for request in finished:
            live.remove(request)
            counted -= len(request.output_ids)
            on_done(owner.pop(request.id), request)
            submit()


def capture(target: Target, ids: list[int], prompt_len: int, layers: tuple[int, ...]) -> dict[int, torch.Tensor]:
    """One plain forward (fresh cache) over prompt + response; {layer: (len(ids) - prompt_len + 1, H)} float16
    from the last prompt position on. Only the last position goes through the output head."""
    out = target.forward(target.new_cache(), ids, hidden_layers=layers, last_only=True)
    return {layer: h[prompt_len - 1:].to(device="cpu", dtype=torch.float16) for layer, h in out.hidden.items()}


def shard_tensors(samples: Sequence[Sample], layers: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """The samples (in prompt order) as the shard format's flat tensors (module docstring)."""
    lengths = [len(s.ids) for s in samples]
    tensors = {
        "tokens": torch.tensor([t for s in samples for t in s.ids], dtype=torch.int32),
        "offsets": torch.tensor([0, *accumulate(lengths)], dtype=torch.int64),
        "prompt_lens": torch.tensor([s.prompt_len for s in samples], dtype=torch.int32),
        "prompt_index": torch.tensor([s.prompt.index for s in samples], dtype=torch.int32),
    }
    for layer in layers:
        tensors[f"hidden.{layer}"] = torch.cat([s.hidden[layer] for s in samples]).contiguous()
    return tensors


def make_shard(lm: LoadedModel, plan: ShardPlan, config: DataConfig, folder: Path, bar=None) -> dict:
    """Generate, capture and write one shard; returns its manifest entry."""
    layers = capture_layers(lm.model.config.num_hidden_layers)
    target = Target(lm)
    samples: dict[int, Sample] = {}
    start = time.perf_counter()
    generated = 0

    def on_tokens(n: int) -> None:
        nonlocal generated
        generated += n
        if bar is not None:
            bar.set_postfix(shard=plan.name, tok_s=f"{generated / (time.perf_counter() - start):.1f}", refresh=False)

    def on_done(prompt: TrainingPrompt, request: Request) -> None:
        ids = request.prompt_ids + request.output_ids
        samples[prompt.index] = Sample(prompt, ids, len(request.prompt_ids),
                                       capture(target, ids, len(request.prompt_ids), layers))
        if bar is not None:
            bar.update(1)

    respond(lm, plan.prompts, config, on_done, on_tokens)
    ordered = [samples[p.index] for p in plan.prompts]
    path = folder / f"{plan.name}.safetensors"
    partial = folder / f".{plan.name}.safetensors.partial"
    # One metadata key only: safetensors writes metadata in hash-map order, and the bytes must repeat.
    save_file(shard_tensors(ordered, layers), partial, metadata={"format": str(FORMAT)})
    os.replace(partial, path)  # a shard is either whole or absent
    response_tokens = sum(len(s.ids) - s.prompt_len for s in ordered)
    wall_s = time.perf_counter() - start
    return {"file": path.name, "split": plan.split, "sequences": len(ordered),
            "prompt_tokens": sum(s.prompt_len for s in ordered), "response_tokens": response_tokens,
            "bytes": path.stat().st_size, "sha256": sha256_file(path), "wall_s": round(wall_s, 2),
            "tokens_per_s": round(response_tokens / wall_s, 2)}


# --- the run ------------------------------------------------------------------------------------


def machine(lm: LoadedModel) -> dict:
    return {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
            "device": str(lm.device), "dtype": str(lm.dtype).replace("torch.", ""), "torch": torch.__version__,
            "commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def default_folder(config: DataConfig, prompt_hash: str) -> Path:
    return cache_dir() / "training-data" / config.model / config.run_key(prompt_hash)


def _write_manifest(folder: Path, manifest: dict) -> None:
    partial = folder / ".manifest.json.partial"
    partial.write_text(json.dumps(manifest, indent=1, ensure_ascii=False))
    os.replace(partial, folder / "manifest.json")


def _manifest_to_continue(folder: Path, fresh: dict, resume: bool) -> dict:
    """The manifest to continue: a new one, or (with resume) the folder's own if it describes this run."""
    path = folder / "manifest.json"
    if not path.exists():
        return fresh
    if not resume:
        raise SpecDecError(f"{folder} already holds a data run: pass --resume to continue it, or remove it")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise SpecDecError(f"cannot read {path}: {err}")
    for key in ("format", "config", "model", "prompt_set", "capture_layers"):
        if manifest.get(key) != fresh[key]:
            raise SpecDecError(f"{folder} holds a run with another {key.replace('_', ' ')}: resume it with its own "
                               f"settings, or write this run elsewhere (--out)")
    return manifest


@dataclass
class DataRun:
    """A run checked and ready to fill: where it goes, its shards, and its manifest so far."""

    config: DataConfig
    folder: Path
    plans: list[ShardPlan]
    manifest: dict


def open_run(lm: LoadedModel, config: DataConfig, out: Path | None = None, resume: bool = False) -> DataRun:
    """Every check before any work: the settings, the contamination of the prompts (refused when any
    overlaps an eval prompt), the folder (never inside the repo: training data never enters it) and,
    with `resume`, that the folder's manifest describes this very run."""
    config.validate()
    if lm.name != config.model:
        raise SpecDecError(f"the config is for {config.model}, the loaded model is {lm.name}")
    prompts = training_prompts(config.seed)[:config.prompts]
    report = check_contamination([p.text for p in prompts], lm.tokenizer)
    if not report.ok:
        raise SpecDecError(report.refusal())
    prompt_hash = prompt_set_hash(prompts)
    folder = (out or default_folder(config, prompt_hash)).resolve()
    if (REPO / ".git").exists() and folder.is_relative_to(REPO):
        raise SpecDecError(f"{folder} is inside the repository: training data belongs outside it (default: under SPECDEC_CACHE)")
    model_config = lm.model.config
    fresh = {
        "format": FORMAT, "config": asdict(config),
        "model": {"name": lm.name, "layers": model_config.num_hidden_layers, "hidden_size": model_config.hidden_size,
                  "vocab_size": model_config.vocab_size, "dtype": str(lm.dtype).replace("torch.", "")},
        "capture_layers": list(capture_layers(model_config.num_hidden_layers)),
        "hidden_rows": "sequence i owns 1 + response-length rows; row j = position prompt_len - 1 + j (predicts token prompt_len + j)",
        "sampling": f"serving engine, plain AR; even prompt index greedy, odd temperature {SAMPLED_TEMPERATURE}; "
                    "request seed = sha256('<seed>:<index>')[:8] >> 1",
        "prompt_set": {"sha256": prompt_hash, "seed": config.seed, "used": len(prompts),
                       "available": len(training_prompts(config.seed))},
        "heldout": {"fraction": config.heldout, "rule": "sha256(prompt text)[:8] / 2^64 < fraction",
                    "prompt_indices": [p.index for p in prompts if is_heldout(p, config.heldout)]},
        "contamination": report.to_dict(),
        "shards": {}, "sittings": [], "complete": False,
    }
    manifest = _manifest_to_continue(folder, fresh, resume)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecDecError(f"cannot create {folder}: {err.strerror or err}")
    return DataRun(config, folder, plan_shards(prompts, config), manifest)


def fill_run(lm: LoadedModel, run: DataRun, bar=None) -> dict:
    """Write every shard the run lacks (kept: those whose file matches the manifest's SHA-256) and
    the manifest after each; returns the completed manifest."""
    folder, manifest = run.folder, run.manifest
    sitting = {"machine": machine(lm), "written": [], "wall_s": 0.0}
    manifest["sittings"].append(sitting)
    start = time.perf_counter()
    for plan in run.plans:
        entry = manifest["shards"].get(plan.name)
        if entry and (folder / entry["file"]).exists() and sha256_file(folder / entry["file"]) == entry["sha256"]:
            if bar is not None:
                bar.update(len(plan.prompts))
            continue
        manifest["shards"][plan.name] = make_shard(lm, plan, run.config, folder, bar)
        sitting["written"].append(plan.name)
        sitting["wall_s"] = round(time.perf_counter() - start, 2)
        _write_manifest(folder, manifest)
    sitting["wall_s"] = round(time.perf_counter() - start, 2)
    shards = manifest["shards"].values()
    response_tokens = sum(s["response_tokens"] for s in shards)
    manifest["totals"] = {
        "sequences": sum(s["sequences"] for s in shards), "response_tokens": response_tokens,
        "prompt_tokens": sum(s["prompt_tokens"] for s in shards), "bytes": sum(s["bytes"] for s in shards),
        "bytes_per_response_token": round(sum(s["bytes"] for s in shards) / max(response_tokens, 1), 1),
        "generation_wall_s": round(sum(s["wall_s"] for s in shards), 2),
    }
    manifest["complete"] = True
    _write_manifest(folder, manifest)
    return manifest


# --- reading ------------------------------------------------------------------------------------


@dataclass
class Shard:
    tokens: torch.Tensor  # (T,) int32
    offsets: torch.Tensor  # (n+1,) int64
    prompt_lens: torch.Tensor  # (n,) int32
    prompt_index: torch.Tensor  # (n,) int32
    hidden: dict[int, torch.Tensor]  # layer -> (rows, H) float16

    def __len__(self) -> int:
        return len(self.prompt_lens)

    def sequence(self, i: int) -> tuple[list[int], int, dict[int, torch.Tensor]]:
        """(prompt + response ids, prompt length, {layer: (1 + response length, H)}) of sequence i."""
        lengths = self.offsets[1:] - self.offsets[:-1]
        rows = torch.cumsum(lengths - self.prompt_lens + 1, 0)  # (n,): where each sequence's rows end
        first = int(rows[i - 1]) if i else 0
        ids = self.tokens[self.offsets[i]:self.offsets[i + 1]].tolist()
        return ids, int(self.prompt_lens[i]), {layer: h[first:int(rows[i])] for layer, h in self.hidden.items()}


def read_shard(path: Path) -> Shard:
    tensors = load_file(path)
    hidden = {int(name.split(".", 1)[1]): t for name, t in tensors.items() if name.startswith("hidden.")}
    return Shard(tensors["tokens"], tensors["offsets"], tensors["prompt_lens"], tensors["prompt_index"], hidden)
