"""The target's hidden states for training, computed from the corpus's token ids.

The corpus stores token ids only (corpus.py); every drafter but `draft` trains on the target's
states (Medusa heads on the final one, EAGLE on three fused layers, the block drafter on five). Two
ways to get them, measured in BENCHMARKS §11 and both kept, because they trade disk for compute:
- `cache`: one plain forward per sequence, once, into a local file per shard and layer under
  SPECDEC_CACHE/features (float16); every epoch after the first reads it back. A fresh clone rebuilds
  it from the committed ids (never by regenerating text).
- `online`: the same forward inside each training step, under no_grad: no disk, but it is paid again
  every epoch.
Both go through `capture` — one sequence per forward, rounded to float16 — so they give the same
numbers bit for bit and a run may switch between them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file, save_file

from ..models import LoadedModel, cache_dir
from ..target import Target
from ..errors import SpecDecError
from .corpus import Corpus, read_shard

MODES = ("cache", "online")


def capture(target: Target, ids: list[int], prompt_len: int, layers: tuple[int, ...]) -> dict[int, torch.Tensor]:
    """One plain forward (fresh cache) over prompt + response: {layer: (len(ids) - prompt_len + 1, H)}
    float16 from the last prompt position on (row j predicts token prompt_len + j; the last row, at the
    final response token, predicts nothing but is the feature EAGLE regresses to). Only the last
    position goes through the output head."""
    out = target.forward(target.new_cache(), ids, hidden_layers=layers, last_only=True)
    return {layer: h[prompt_len - 1:].to(device="cpu", dtype=torch.float16) for layer, h in out.hidden.items()}


def online(target: Target, ids: list[int], prompt_len: int, layers: tuple[int, ...]) -> Callable[[], dict[int, torch.Tensor]]:
    """The states of one sequence, computed when a batch needs them (nothing kept)."""
    return lambda: capture(target, ids, prompt_len, layers)


def _file(model: str, sha256: str, layer: int, root: Path | None = None) -> Path:
    return (root or cache_dir()) / "features" / model / f"{sha256[:20]}.L{layer}.safetensors"


def shard_features(lm: LoadedModel, target: Target, folder: Path, entry: dict, layers: tuple[int, ...],
                   root: Path | None = None) -> list[dict[int, torch.Tensor]]:
    """Every sequence of one shard, {layer: (rows, H) float16}: from the cache (under `root`, default the
    lab's cache folder), after computing the layers it lacks over the *whole* shard (a cache file always
    covers its shard, whichever sequences of it a run uses) and writing them, keyed by the shard's SHA-256."""
    stored = read_shard(folder / entry["file"])
    missing = tuple(layer for layer in layers if not _file(lm.name, entry["sha256"], layer, root).exists())
    if missing:
        rows = [capture(target, s.ids, s.prompt_len, missing) for s in stored]
        for layer in missing:
            path = _file(lm.name, entry["sha256"], layer, root)
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{path.name}.partial")
            save_file({"hidden": torch.cat([r[layer] for r in rows]).contiguous()}, partial)
            partial.replace(path)  # whole or absent
    tensors = {layer: load_file(_file(lm.name, entry["sha256"], layer, root))["hidden"] for layer in layers}
    ends = torch.cumsum(torch.tensor([len(s.ids) - s.prompt_len + 1 for s in stored]), 0).tolist()
    if any(len(h) != ends[-1] for h in tensors.values()):
        raise SpecDecError(f"the feature cache of {entry['file']} does not match the shard: remove "
                           f"{_file(lm.name, entry['sha256'], layers[0], root).parent} and run again")
    return [{layer: h[end - n:end] for layer, h in tensors.items()}
            for end, n in zip(ends, (len(s.ids) - s.prompt_len + 1 for s in stored))]


def cached(lm: LoadedModel, corpus: Corpus, layers: tuple[int, ...],
           on_sequence: Callable[[int], None] = lambda n: None, root: Path | None = None) -> list[dict[int, torch.Tensor]]:
    """Per sequence of `corpus`, {layer: (rows, H) float16}, from the feature cache (`shard_features`)."""
    target = Target(lm)
    out: list[dict[int, torch.Tensor]] = []
    current, states = -1, []
    for shard, index in corpus.origin:
        if shard != current:
            current, states = shard, shard_features(lm, target, corpus.folder, corpus.manifest["shards"][shard], layers, root)
            on_sequence(len(states))
        out.append(states[index])
    return out
