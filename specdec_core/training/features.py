"""The target's hidden states for training, computed from the corpus's token ids.

The corpus stores token ids only (corpus.py); every drafter but `draft` trains on the target's
states (Medusa heads on the final one, EAGLE on three fused layers, the block drafter on five). Two
ways to get them, measured in BENCHMARKS §11 and both kept, because they trade disk for compute:
- `cache`: one plain forward per sequence, once, into a local file per shard (or the part of it a run reads) and layer under
  SPECDEC_CACHE/features (float16); every epoch after the first reads it back. A fresh clone rebuilds
  it from the committed ids (never by regenerating text).
- `online`: the same forward inside each training step, under no_grad: no disk, but it is paid again
  every epoch.
Both go through `capture` — one sequence per forward, rounded to float16 — so they give the same
numbers bit for bit and a run may switch between them.
"""
from __future__ import annotations

import hashlib
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


def _file(model: str, sha256: str, layer: int, root: Path | None = None, part: str = "") -> Path:
    return (root or cache_dir()) / "features" / model / f"{sha256[:20]}{part}.L{layer}.safetensors"


def _part(indices: list[int]) -> str:
    """The cache key of some sequences of a shard (a run on one source reads a few of each shard)."""
    return ".part-" + hashlib.sha256(",".join(map(str, indices)).encode()).hexdigest()[:12]


def shard_features(lm: LoadedModel, target: Target, folder: Path, entry: dict, layers: tuple[int, ...],
                   root: Path | None = None, indices: list[int] | None = None) -> list[dict[int, torch.Tensor]]:
    """Sequences `indices` of one shard (None: all of them), {layer: (rows, H) float16}, from the cache
    (under `root`, default the lab's cache folder), after computing the layers it lacks and writing them,
    keyed by the shard's SHA-256. A file covers the whole shard — or, for a run that reads only some of
    its sequences (one source), exactly those, under a key of its own: computing a whole shard for a
    fifth of it would cost five times the forwards. A whole-shard file serves any subset."""
    stored = read_shard(folder / entry["file"])
    whole = indices is None or list(indices) == list(range(len(stored))) or all(
        _file(lm.name, entry["sha256"], layer, root).exists() for layer in layers)
    wanted = list(range(len(stored))) if whole else list(indices)
    part = "" if whole else _part(wanted)
    missing = tuple(layer for layer in layers if not _file(lm.name, entry["sha256"], layer, root, part).exists())
    if missing:
        rows = [capture(target, stored[i].ids, stored[i].prompt_len, missing) for i in wanted]
        for layer in missing:
            path = _file(lm.name, entry["sha256"], layer, root, part)
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{path.name}.partial")
            save_file({"hidden": torch.cat([r[layer] for r in rows]).contiguous()}, partial)
            partial.replace(path)  # whole or absent
    tensors = {layer: load_file(_file(lm.name, entry["sha256"], layer, root, part))["hidden"] for layer in layers}
    sizes = [len(stored[i].ids) - stored[i].prompt_len + 1 for i in wanted]
    ends = torch.cumsum(torch.tensor(sizes), 0).tolist()
    if any(len(h) != ends[-1] for h in tensors.values()):
        raise SpecDecError(f"the feature cache of {entry['file']} does not match the shard: remove "
                           f"{_file(lm.name, entry['sha256'], layers[0], root).parent} and run again")
    states = {i: {layer: h[end - n:end] for layer, h in tensors.items()} for i, end, n in zip(wanted, ends, sizes)}
    return [states[i] for i in (range(len(stored)) if indices is None else indices)]


def cached(lm: LoadedModel, corpus: Corpus, layers: tuple[int, ...],
           on_sequence: Callable[[int], None] = lambda n: None, root: Path | None = None) -> list[dict[int, torch.Tensor]]:
    """Per sequence of `corpus`, {layer: (rows, H) float16}, from the feature cache (`shard_features`)."""
    target = Target(lm)
    by_shard: dict[int, list[int]] = {}
    for shard, index in corpus.origin:
        by_shard.setdefault(shard, []).append(index)
    states: dict[tuple[int, int], dict[int, torch.Tensor]] = {}
    for shard, indices in by_shard.items():
        got = shard_features(lm, target, corpus.folder, corpus.manifest["shards"][shard], layers, root, indices)
        states.update({(shard, i): h for i, h in zip(indices, got)})
        on_sequence(len(indices))
    return [states[origin] for origin in corpus.origin]
