"""Shipped drafter weights: `specdec_core/weights/<model>/<kind>.safetensors`, checked before use.

`manifest.json` beside them records, per file, its SHA-256, its size and the settings the module is
built from (`config`), so a drafter is rebuilt with the shapes it was trained with and any file that is
missing, altered or of the wrong shape is a one-line error that names it. The target's embeddings and
output head are never stored: drafters borrow them at load time.

`tiny` (the test model) has no files: its drafters get seeded random weights of the right shapes, so
every drafter runs in tests and smoke runs without anything shipped.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..errors import SpecDecError
from ..models import sha256_file

WEIGHTS_DIR = Path(__file__).resolve().parents[1] / "weights"


def weights_path(model: str, kind: str, root: Path | None = None) -> Path:
    return (root or WEIGHTS_DIR) / model / f"{kind}.safetensors"


def _manifest(folder: Path) -> dict:
    path = folder / "manifest.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {"files": {}}
    except ValueError as err:
        raise SpecDecError(f"{path} is not valid JSON ({err})")


def shipped(model: str, root: Path | None = None) -> dict[str, dict]:
    """{kind: manifest entry} of every drafter file that ships for `model` (listed and present)."""
    folder = (root or WEIGHTS_DIR) / model
    return {name.removesuffix(".safetensors"): meta for name, meta in _manifest(folder)["files"].items()
            if (folder / name).is_file()}


def entry(model: str, kind: str, root: Path | None = None) -> dict:
    """The manifest entry of a shipped file (its sha256, bytes, config, card), or a one-line error."""
    path = weights_path(model, kind, root)
    meta = _manifest(path.parent)["files"].get(path.name)
    if meta is None or not path.is_file():
        raise SpecDecError(f"no trained {kind!r} drafter for {model}: {path} is missing "
                           f"(train one with: python -m specdec_core train-draft --kind {kind})")
    return meta


def load_state(model: str, kind: str, expected: dict[str, tuple[int, ...]], root: Path | None = None) -> dict[str, torch.Tensor]:
    """The tensors of a shipped file after checking its hash against the manifest and every name and
    shape against `expected` (the module's own state_dict shapes)."""
    path = weights_path(model, kind, root)
    meta = entry(model, kind, root)
    if sha256_file(path) != meta["sha256"]:
        raise SpecDecError(f"{path} does not match its SHA-256 in {path.parent / 'manifest.json'}: the file was changed "
                           f"or truncated; restore it (git checkout) or retrain")
    tensors = load_file(path)
    for name, shape in expected.items():
        if name not in tensors:
            raise SpecDecError(f"{path} lacks tensor {name!r} (expected shape {tuple(shape)})")
        if tuple(tensors[name].shape) != tuple(shape):
            raise SpecDecError(f"{path}: tensor {name!r} has shape {tuple(tensors[name].shape)}, expected {tuple(shape)}")
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise SpecDecError(f"{path} holds tensors this drafter does not have: {', '.join(extra[:3])}")
    return tensors


def save_state(model: str, kind: str, tensors: dict[str, torch.Tensor], config: dict, card: dict,
               root: Path | None = None) -> Path:
    """Write a file (temp, then rename) and its manifest entry: what `load_state` will check."""
    path = weights_path(model, kind, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    save_file({name: t.contiguous() for name, t in tensors.items()}, partial)
    os.replace(partial, path)
    manifest = _manifest(path.parent)
    manifest["files"][path.name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size, "config": config, "card": card}
    manifest["files"] = dict(sorted(manifest["files"].items()))
    (path.parent / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    return path


def tree_table_path(model: str, kind: str, root: Path | None = None) -> Path:
    return (root or WEIGHTS_DIR) / model / f"{kind}.tree.json"


def save_rank_accuracy(model: str, kind: str, table: dict, root: Path | None = None) -> Path:
    """Ship a drafter's measured rank accuracies (`training/tree_shape.py`) beside its weights, tied to
    them by their SHA-256: retrained weights make the table stale, and `rank_accuracy` says so."""
    path = tree_table_path(model, kind, root)
    path.write_text(json.dumps({"weights_sha256": entry(model, kind, root)["sha256"], **table}, indent=1) + "\n")
    return path


# tiny's heads have random weights and no data to measure a static tree on: this stand-in rank accuracy
# (halving with each rank and each depth) only gives its static tree a Medusa-like, top-heavy shape for tests.
TINY_RANK_ACCURACY = [[0.5 ** (d + r + 1) for r in range(8)] for d in range(4)]


def rank_accuracy(lm, kind: str, root: Path | None = None) -> list[list[float]]:
    """acc[d][r]: how often the drafter's rank-r guess at depth d+1 was the target's token, measured on the
    held-out split (`training/tree_shape.py`) — what a static tree's shape is built from."""
    if lm.name == "tiny":
        return TINY_RANK_ACCURACY
    path = tree_table_path(lm.name, kind, root)
    try:
        measured = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecDecError(f"the shipped {kind!r} drafter has no measured static tree ({path} is missing): "
                           f"run python -m specdec_core tree-shape") from None
    except ValueError as err:
        raise SpecDecError(f"{path} is not valid JSON ({err})") from None
    if measured.get("weights_sha256") != entry(lm.name, kind, root)["sha256"]:
        raise SpecDecError(f"{path} was measured on other {kind!r} weights than the shipped ones: "
                           f"run python -m specdec_core tree-shape")
    return measured["rank_accuracy"]


def seeded_(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Random weights from a fixed seed (the `tiny` drafters): matrices ~ N(0, 1/fan_in), norms 1,
    biases 0. The global random state is left as it was."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=generator) / p.shape[-1] ** 0.5)
            else:
                p.fill_(1.0 if "norm" in name else 0.0)
    return module


def seeded_vocab(vocab_size: int, n: int, seed: int) -> torch.Tensor:
    """A seeded random subset of n token ids, sorted (the `tiny` drafters' reduced vocabulary)."""
    return torch.randperm(vocab_size, generator=torch.Generator().manual_seed(seed))[:n].sort().values.to(torch.int32)


def load_module(model: str, kind: str, build, root: Path | None = None) -> torch.nn.Module:
    """A shipped drafter module: `build(config)` from the manifest's settings, then its checked tensors."""
    module = build(entry(model, kind, root)["config"])
    state = module.state_dict()
    tensors = load_state(model, kind, {name: tuple(t.shape) for name, t in state.items()}, root)
    module.load_state_dict({name: tensors[name].to(state[name].dtype) for name in state})
    return module


_LOADED: dict[tuple[int, str], torch.nn.Module] = {}


def drafter_module(lm, kind: str, cls, seed: int = 0) -> torch.nn.Module:
    """A trained drafter's module for target `lm`, loaded once per process: the shipped file, or for
    `tiny` seeded random weights sized by `cls.tiny_config(lm)` (no file)."""
    key = (id(lm.model), kind)
    if key not in _LOADED:
        if lm.name == "tiny":
            module = seeded_(cls(cls.tiny_config(lm)), seed)
            module.vocab_ids.copy_(seeded_vocab(lm.model.config.vocab_size, len(module.vocab_ids), seed))
        else:
            module = load_module(lm.name, kind, cls)
        # Inference only: no autograd graph behind any drafted feature or logit.
        _LOADED[key] = module.to(device=lm.device, dtype=lm.dtype).eval().requires_grad_(False)
    return _LOADED[key]
