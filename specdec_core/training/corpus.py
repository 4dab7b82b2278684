"""The training corpus as it lives in the repository: prompts and the target's response token ids.

Hidden states are never stored (1.9 GB for 218k tokens): training recomputes them from the ids
(features.py). Token ids are small — SmolLM2's 49,152-token vocabulary fits uint16 — and compress well,
so the corpus is committed and grows shard by shard across sittings; `make-data --resume` continues
where the committed shards end.

Folder `data/<model>/` (the real model; `tiny`'s smoke corpus lives in the cache):
- `manifest.json`: the model, the generation settings, the sources with their licences, the held-out
  and overlap rules, and one entry per shard (counts per source, the cursors after it, SHA-256, machine);
- `shard-00000.npz`, ...: a zip of .npy arrays, written with fixed timestamps so equal contents give
  equal bytes (n sequences):
  - `tokens` (T,) uint16: each sequence's prompt ids (chat template applied) then its response ids;
  - `offsets` (n+1,) int64: sequence i is tokens[offsets[i]:offsets[i+1]];
  - `prompt_lens` (n,) int32; `temperature` (n,) float32 (0: greedy); `seed` (n,) uint64;
  - `records` (bytes,) uint8: UTF-8 JSON, one `sources.Item` record per sequence (the prompt's text,
    source, task, language and reference), so a shard can be regenerated without its source.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import SpecDecError
from ..models import sha256_file
from .sources import Item

FORMAT = 2
REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO / "data"
HELDOUT = 0.05  # the share of sequences held out, by a hash of the prompt


def corpus_dir(model: str) -> Path:
    return DATA_DIR / model


@dataclass
class Stored:
    """One sequence of a shard."""

    item: Item
    ids: list[int]  # prompt (chat template applied) + response
    prompt_len: int
    temperature: float
    seed: int

    @property
    def response(self) -> list[int]:
        return self.ids[self.prompt_len:]

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def is_heldout(item: Item, fraction: float = HELDOUT) -> bool:
    """Held out by a hash of the prompt's user turns alone, so a prompt is on the same side in every
    shard, every seed and every sitting (a template prompt on the same side as in the first data runs,
    which hashed the prompt text the same way)."""
    return int.from_bytes(hashlib.sha256(item.text.encode()).digest()[:8], "big") < fraction * 2 ** 64


# --- shards -------------------------------------------------------------------------------------


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def write_shard(path: Path, sequences: list[Stored], vocab_size: int) -> None:
    """Write a shard atomically (a temporary file renamed into place): whole or absent."""
    if vocab_size > 2 ** 16:
        raise SpecDecError(f"a vocabulary of {vocab_size} tokens does not fit the corpus's uint16 ids")
    lengths = [len(s.ids) for s in sequences]
    arrays = {
        "tokens": np.array([t for s in sequences for t in s.ids], dtype=np.uint16),
        "offsets": np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        "prompt_lens": np.array([s.prompt_len for s in sequences], dtype=np.int32),
        "temperature": np.array([s.temperature for s in sequences], dtype=np.float32),
        "seed": np.array([s.seed for s in sequences], dtype=np.uint64),
        "records": np.frombuffer(json.dumps([s.item.to_record() for s in sequences], ensure_ascii=False).encode(),
                                 dtype=np.uint8),
    }
    partial = path.with_name(f".{path.name}.partial")
    with zipfile.ZipFile(partial, "w") as archive:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))  # no clock in the bytes
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, _npy(array), compresslevel=9)
    os.replace(partial, path)


def read_shard(path: Path) -> list[Stored]:
    try:
        with np.load(path, allow_pickle=False) as z:
            tokens, offsets, prompt_lens = z["tokens"].astype(np.int64), z["offsets"], z["prompt_lens"]
            temperature, seed = z["temperature"], z["seed"]
            records = json.loads(z["records"].tobytes().decode())
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
        raise SpecDecError(f"cannot read the corpus shard {path}: {err}")
    return [Stored(Item.from_record(records[i]), tokens[offsets[i]:offsets[i + 1]].tolist(), int(prompt_lens[i]),
                   float(temperature[i]), int(seed[i])) for i in range(len(records))]


# --- manifest -----------------------------------------------------------------------------------


def read_manifest(folder: Path) -> dict:
    """A corpus's manifest, or a one-line error naming the folder."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError) as err:
        raise SpecDecError(f"no corpus at {folder} ({err.__class__.__name__}): make one with python -m specdec_core make-data")
    if manifest.get("format") != FORMAT:
        raise SpecDecError(f"{folder} holds a corpus of format {manifest.get('format')}, this code reads format {FORMAT}")
    return manifest


def write_manifest(folder: Path, manifest: dict) -> None:
    partial = folder / ".manifest.json.partial"
    partial.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    os.replace(partial, folder / "manifest.json")


def verify(folder: Path, manifest: dict) -> None:
    """Every shard the manifest lists is present with its SHA-256: a corrupted or edited shard is a
    one-line error, before anything trains on it or appends after it."""
    for entry in manifest["shards"]:
        path = folder / entry["file"]
        if not path.exists():
            raise SpecDecError(f"{path} is missing (the manifest lists it): restore it (git checkout) or remove its entry")
        if sha256_file(path) != entry["sha256"]:
            raise SpecDecError(f"{path} does not match its SHA-256 in the manifest (corrupted or edited): "
                               "restore it with git checkout, or regenerate it from its records")


def totals(shards: list[dict]) -> dict:
    sources: dict[str, int] = {}
    for entry in shards:
        for name, count in entry["sources"].items():
            sources[name] = sources.get(name, 0) + count
    return {"shards": len(shards), "sequences": sum(e["sequences"] for e in shards),
            "response_tokens": sum(e["response_tokens"] for e in shards),
            "prompt_tokens": sum(e["prompt_tokens"] for e in shards), "bytes": sum(e["bytes"] for e in shards),
            "sources": sources, "generation_wall_s": round(sum(e["wall_s"] for e in shards), 1)}


@dataclass
class Corpus:
    """A verified corpus, read: its manifest and every sequence in shard order."""

    folder: Path
    manifest: dict
    sequences: list[Stored]
    origin: list[tuple[int, int]]  # per sequence: (its shard's place in manifest["shards"], its index in the shard)

    def heldout(self) -> list[bool]:
        """Per sequence: is it held out (`is_heldout` at the manifest's fraction)?"""
        fraction = self.manifest["heldout"]["fraction"]
        return [is_heldout(s.item, fraction) for s in self.sequences]


def prefix(manifest: dict, tokens: int = 0) -> list[dict]:
    """The fewest first shards whose response tokens reach `tokens` (0: all of them)."""
    out, seen = [], 0
    for entry in manifest["shards"]:
        if tokens and seen >= tokens:
            break
        out.append(entry)
        seen += entry["response_tokens"]
    return out


def load_corpus(folder: Path, shards: int = 0, tokens: int = 0, sources: tuple[str, ...] | None = None) -> Corpus:
    """Read and verify a corpus: its first `shards` shards (0: all), only the sequences of `sources`
    (None: all), cut after the sequence that reaches `tokens` response tokens (0: no cut). The data
    sizes of the scaling curve are such prefixes of the one corpus. The manifest returned lists only
    the shards read."""
    manifest = read_manifest(folder)
    verify(folder, manifest)
    entries = manifest["shards"][:shards] if shards else manifest["shards"]
    if not entries:
        raise SpecDecError(f"{folder} has no shards yet: grow it with python -m specdec_core make-data")
    if shards and len(entries) < shards:
        raise SpecDecError(f"{folder} has {len(entries)} shards, fewer than the {shards} asked for")
    sequences, origin, used, seen = [], [], [], 0
    for number, entry in enumerate(entries):
        if tokens and seen >= tokens:
            break
        used.append(entry)
        for i, stored in enumerate(read_shard(folder / entry["file"])):
            if tokens and seen >= tokens:
                break
            if sources is None or stored.item.source in sources:
                sequences.append(stored)
                origin.append((number, i))
                seen += len(stored.response)
    if not sequences:
        raise SpecDecError(f"{folder} holds no sequence of the sources {', '.join(sources or ())}")
    return Corpus(folder, {**manifest, "shards": used, "totals": totals(used)}, sequences, origin)
