"""Weight-only quantised copies of the target: int8 (per output channel) and int4 (groups of 32).

On a memory-bound machine the cost of a decode step is the bytes it reads: 538 MB of fp32 weights per
token here. A copy whose linears hold int4 codes reads ~8× fewer bytes for them, int8 ~4×. Only the
weights are quantised; activations go through the kernel in bf16 (torch's CPU int4 kernel is fast only
with bf16 inputs, PLATFORM_NOTES.md) and come back in fp32, so the residual stream, the norms, rotary,
attention and the KV cache stay fp32 exactly as in `llama.py`. How each quantised linear runs is
decided in `kernels/quantised.py`, beside the fp32 kernel table.

Where the int4 codes come from matters for what the copy *is*:
- int4 from the GGUF's own Q4_1 blocks (32 weights, w = d·q + m): our fp32 target *is* those blocks
  dequantised, so the int4 copy holds the target's own weights. The kernel stores w = (q − 8)·scale + zero,
  so scale = d and zero = m + 8d, kept in bf16: that rounding (about 2⁻⁹ relative) is the whole
  difference, plus bf16 arithmetic (`Q41_BOUND` states it and a test holds it).
- int8 is requantised from the fp32 weights (symmetric, one scale per output row): genuinely different
  weights, the case a real fp16 checkpoint would give.
- `tiny` (random weights, no GGUF) gets int4 by the same asymmetric min/max rule per group of 32.

The tied embedding/output head (49,152 × 576): the embedding stays the target's fp32 table (a lookup
reads one row per token), the head becomes int8 (one scale per row). Measured on the quant drafter over
six chat/story prompts (k = 4): first-draft acceptance 0.968 with the fp32 head, 0.967 with int8, 0.901
with int4, and the int8 head reads 28 MB per token instead of 113 MB; so int8, the cheapest head that
keeps the copy's guesses (the GGUF stores this table as Q8_0: int8 is its own precision).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from transformers import LlamaForCausalLM

from .kernels import Int4Linear, Int8Linear
from .errors import SpecDecError
from .models import LoadedModel, gguf_path

BITS = (4, 8)
WEIGHTS = {"fp32": None, "int8": 8, "int4": 4}  # the target's precision options -> bits of the copy
GROUP = 32  # weights per int4 group: one Q4_1 block, and a divisor of the 576 width
Q41_BLOCK_BYTES = 20  # fp16 d, fp16 m, 16 bytes of 32 nibbles
# max |int4 copy - fp32 target| over a weight, relative to that weight's largest |w|: bf16 scale and zero
# (8 significant bits) against the fp32 dequantisation; measured 0.0039 on SmolLM2's 210 linears.
Q41_BOUND = 2 ** -7
GGUF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down"}


def q41_codes(raw: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GGUF Q4_1 rows (N, K/32 · 20 bytes) -> codes q (N, K) in 0..15, d and m (N, K/32) in fp32.

    A block is fp16 d, fp16 m, then 16 bytes whose low nibbles are weights 0..15 and high nibbles 16..31."""
    n, row_bytes = raw.shape
    blocks = raw.reshape(n, row_bytes // Q41_BLOCK_BYTES, Q41_BLOCK_BYTES)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    nibbles = blocks[..., 4:]
    q = np.concatenate((nibbles & 0x0F, nibbles >> 4), axis=-1)  # (N, K/32, 32)
    return torch.from_numpy(q.reshape(n, -1).astype(np.int32)), torch.from_numpy(d), torch.from_numpy(m)


def dequantise(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """The int4 kernel's weight: (q − 8) · scale + zero per group of 32, in fp32 (N, K)."""
    n, k = q.shape
    w = (q.reshape(n, k // GROUP, GROUP).float() - 8) * scale.float()[..., None] + zero.float()[..., None]
    return w.reshape(n, k)


def q41_to_int4(q: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q4_1 (w = d·q + m) in the kernel's form (w = (q − 8)·scale + zero): scale = d, zero = m + 8d."""
    return q, d, m + 8 * d


def quantise_int4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric int4 per group of 32 (Q4_1's rule: the group's min and range over 15 steps)."""
    n, k = weight.shape
    groups = weight.float().reshape(n, k // GROUP, GROUP)
    low, high = groups.amin(-1), groups.amax(-1)
    scale = ((high - low) / 15).clamp_min(1e-12)
    q = torch.round((groups - low[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32)
    return q.reshape(n, k), scale, low + 8 * scale


def quantise_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 with one scale per output row: w ≈ q · scale, q in −127..127."""
    scale = (weight.float().abs().amax(-1) / 127).clamp_min(1e-12)
    return torch.round(weight.float() / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


def qk_row_order(rows: int, heads: int) -> torch.Tensor:
    """The row order transformers gives q/k weights read from a GGUF (llama.cpp stores them permuted for its
    rotary layout): new row r = GGUF row order[r]."""
    return torch.arange(rows).reshape(heads, rows // heads // 2, 2).transpose(1, 2).reshape(rows)


def gguf_int4_codes(lm: LoadedModel) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """module name (as in the model) -> int4 (q, scale, zero) of every linear, read from the GGUF's Q4_1 blocks."""
    import gguf

    config = lm.model.config
    tensors = {t.name: t for t in gguf.GGUFReader(str(gguf_path())).tensors}
    out = {}
    for i in range(config.num_hidden_layers):
        for module, short in GGUF_NAMES.items():
            tensor = tensors[f"blk.{i}.{short}.weight"]
            if tensor.tensor_type.name != "Q4_1":
                raise ValueError(f"blk.{i}.{short} is {tensor.tensor_type.name}, not Q4_1")
            q, d, m = q41_codes(np.asarray(tensor.data))
            heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}.get(short)
            if heads:
                order = qk_row_order(q.shape[0], heads)
                q, d, m = q[order], d[order], m[order]
            out[f"model.layers.{i}.{module}"] = q41_to_int4(q, d, m)
    return out


# Linears that read the same input become one linear of their stacked rows (`llama.project_qkv`,
# `project_gate_up`): 4 kernel calls a layer instead of 7. Every output row is computed as before (int8
# scales and int4 groups are per row), so fusing changes no weight.
FUSED = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
         "self_attn.o_proj": ("self_attn.o_proj",),
         "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
         "mlp.down_proj": ("mlp.down_proj",)}


def quantised_linear(bits: int, weights: list[torch.Tensor],
                     codes: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None) -> torch.nn.Module:
    """One quantised linear over the stacked rows of `weights` (int4 from the GGUF's `codes` where given)."""
    if bits == 8:
        return Int8Linear(*quantise_int8(torch.cat(weights)))
    if codes:
        return Int4Linear(*(torch.cat(parts) for parts in zip(*codes)))
    return Int4Linear(*quantise_int4(torch.cat(weights)))


def quantised_copy(lm: LoadedModel, bits: int, layers: int | None = None, fuse: bool = True) -> LlamaForCausalLM:
    """The target with its decoder linears quantised (int4 or int8) and an int8 output head, its first
    `layers` decoder layers only (None: all), sharing the target's embedding table, norms and rotary tables.
    fuse=False keeps the seven linears of a layer apart (for `scripts/ab_quant.py`'s before/after)."""
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}")
    config = lm.model.config
    layers = config.num_hidden_layers if layers is None else layers
    codes = gguf_int4_codes(lm) if bits == 4 and lm.name != "tiny" else {}
    copy = LlamaForCausalLM.__new__(LlamaForCausalLM)
    torch.nn.Module.__init__(copy)
    copy.config = config.__class__(**{**config.to_dict(), "num_hidden_layers": layers})
    copy.generation_config = lm.model.generation_config
    copy.model = torch.nn.Module()
    copy.model.embed_tokens = lm.model.model.embed_tokens
    copy.model.norm = lm.model.model.norm
    copy.model.rotary_emb = lm.model.model.rotary_emb
    copy.lm_head = Int8Linear(*quantise_int8(lm.model.lm_head.weight.detach()))
    copy.model.layers = torch.nn.ModuleList()
    for i, source in enumerate(lm.model.model.layers[:layers]):
        layer = torch.nn.Module()
        layer.input_layernorm, layer.post_attention_layernorm = source.input_layernorm, source.post_attention_layernorm
        layer.self_attn, layer.mlp = torch.nn.Module(), torch.nn.Module()
        layer.self_attn.scaling = source.self_attn.scaling
        groups = FUSED if fuse else {module: (module,) for module in GGUF_NAMES}
        for fused, parts in groups.items():
            weights = [source.get_submodule(part).weight.detach() for part in parts]
            keys = [f"model.layers.{i}.{part}" for part in parts]
            linear = quantised_linear(bits, weights, [codes[key] for key in keys] if codes else None)
            parent, name = fused.split(".")
            setattr(getattr(layer, parent), name, linear)
        if fuse:
            layer.self_attn.qkv_sizes = tuple(source.get_submodule(part).weight.shape[0] for part in FUSED["self_attn.qkv_proj"])
        copy.model.layers.append(layer)
    return copy.eval()


_COPIES: dict[tuple[int, int, int | None], tuple[LoadedModel, LlamaForCausalLM]] = {}


def cached_copy(lm: LoadedModel, bits: int, layers: int | None = None) -> LlamaForCausalLM:
    """`quantised_copy`, built once per process, target, precision and depth (seconds; never written to disk)."""
    key = (id(lm), bits, layers)
    if key not in _COPIES:  # the entry keeps lm alive, so its id is never reused by another model
        _COPIES[key] = (lm, quantised_copy(lm, bits, layers))
    return _COPIES[key][1]


_TARGETS: dict[tuple[int, str], LoadedModel] = {}


def with_weights(lm: LoadedModel, weights: str) -> LoadedModel:
    """The target read at `weights` precision: fp32 is `lm` itself; int8 / int4 the same tokenizer over the
    quantised copy (cached), a faster AR path whose text may differ slightly from fp32's."""
    if weights not in WEIGHTS:
        raise SpecDecError(f"unknown weights {weights!r}: choose one of {', '.join(WEIGHTS)}")
    if weights == "fp32" or lm.weights == weights:
        return lm
    key = (id(lm), weights)
    if key not in _TARGETS:
        _TARGETS[key] = replace(lm, model=cached_copy(lm, WEIGHTS[weights]), weights=weights)
    return _TARGETS[key]
