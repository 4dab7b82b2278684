"""The Llama forward pass written out, over the weights of a transformers `LlamaForCausalLM`.

Every decode step of this lab is one call of `forward` below: embed → 30 × (norm, attention with
rotary positions and the KV cache, norm, MLP) → norm → output head. transformers' own
`model(...)` computes exactly this, op for op, but wraps it in hundreds of Python module calls,
decorators and a mask builder per step; on this project's 2-core CPU that wrapping costs ~2–4 ms of a
~30 ms one-token step (`scripts/ab_forward.py`, BENCHMARKS.md §3b). Written out as plain functions (gpt-fast's and nanoGPT's style) the step is shorter
and a learner can read the whole model on one screen.

The result is *the same numbers*, not just the same maths: each op is the one transformers calls,
in its order and dtype (RMSNorm in float32, the same rotary formula, the same SDPA call with the same
mask convention), and the linear layers are the model's own modules (so the kernel table's matmul choice, `kernels/`,
applies to both). `tests/test_llama_forward.py` checks the logits and hidden states are bitwise equal
to `model(...)`, and that a broken mask or rotary is caught. The KV cache is the lab's own (`kvcache.py`):
buffers allocated ahead, so appending writes only the new positions and rolling back is a length.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM

from .errors import SpecDecError
from .kvcache import KVCache
from .trees.shape import ancestor_mask, row_positions


def check_supported(model: torch.nn.Module) -> None:
    """Refuse models this forward does not reproduce (it knows plain Llama with default RoPE only)."""
    config = model.config
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if not isinstance(model, LlamaForCausalLM) or rope != "default" or config.hidden_act != "silu":
        raise SpecDecError(f"the lab's forward supports Llama models with default RoPE and SiLU, "
                           f"not {type(model).__name__} (rope {rope!r}, activation {config.hidden_act!r})")


def depth_layer(numerator: int, denominator: int, num_layers: int) -> int:
    """The layer at a fraction of the depth, numbered as `decoder` numbers hidden states, rounded half
    up: 1 is the final normed state (num_layers); any other fraction stays inside 1 .. num_layers-1
    (never the embeddings, never the final state), so a 2-layer model still has the layer asked for."""
    if numerator == denominator:
        return num_layers
    return min(max((2 * numerator * num_layers + denominator) // (2 * denominator), 1), num_layers - 1)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) * weight, computed in float32 (as Llama was trained) and cast back (no cast at all for a
    float32 x: each skipped no-op is a dispatch less, ×61 norms a step)."""
    if x.dtype == torch.float32:
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def rotary_tables(model: LlamaForCausalLM, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The tables `rotate` reads for these positions, (1, 1, n, head_dim) each: cos of position × frequency,
    and its sin with the first half negated (the sign rotate_half would put on the second half of x)."""
    rotary = model.model.rotary_emb
    freqs = positions[..., None].float() * rotary.inv_freq.float()  # (1, n, head_dim/2)
    angles = torch.cat((freqs, freqs), dim=-1)  # (1, n, head_dim): both halves rotate by the same angle
    cos = (angles.cos() * rotary.attention_scaling).to(dtype)
    sin = (angles.sin() * rotary.attention_scaling).to(dtype)
    half = sin.shape[-1] // 2
    signed_sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    return cos.unsqueeze(1), signed_sin.unsqueeze(1)


def rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding: turn each (first-half, second-half) pair (a, b) by its angle, to
    (a·cos − b·sin, b·cos + a·sin). transformers writes it x·cos + rotate_half(x)·sin with rotate_half(x) =
    (−b, a), a neg, two slices and a cat per call; rolling x by half gives (b, a) in one op, and the sign
    sits in the table instead. (−b)·sin and b·(−sin) are the same float, so the bits are transformers'."""
    return x * cos + torch.roll(x, x.shape[-1] // 2, dims=-1) * signed_sin


def causal_mask(past: int, n: int, device: torch.device) -> torch.Tensor | None:
    """(n, past+n) bool, True where new token i may look: positions 0 .. past+i. None where SDPA needs
    no explicit mask: one new token sees every position, and a prefill is SDPA's own is_causal."""
    if n == 1 or past == 0:
        return None
    return torch.arange(past + n, device=device)[None, :] <= torch.arange(past, past + n, device=device)[:, None]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """Causal attention of n new queries over all keys. q (B, heads, n, hd), k/v (B, kv_heads, past+n, hd):
    each key/value head serves heads / kv_heads query heads, which SDPA's GQA reads in place (no repeated copy of
    the cache; the same numbers as attending a repeated copy, bit for bit)."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, is_causal=mask is None and q.shape[2] > 1,
                                          enable_gqa=True)


def forward(model: LlamaForCausalLM, cache: KVCache, input_ids: torch.Tensor, hidden_layers: tuple[int, ...] = (),
            last_only: bool = False, tree: list[int] | None = None) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """Run input_ids (B, n) on top of `cache` (which grows by n). Returns logits (B, n or 1, V) in the
    model's dtype and the requested hidden states {layer: (B, n, H)}, numbered as transformers numbers
    them: 0 = the embeddings, i = after decoder layer i, the last = after the final norm.

    tree: the last len(tree) >= n positions of cache + input as a draft tree, tree[i] = the index of row
    i's parent in it (-1: the position before the tree). Each new row then sits at rotary position
    start + its depth in that tree (0 for a row without a parent) and attends to everything before the tree (from `start`) and to its own
    ancestors only (`trees/shape.py`). The target verifies a tree in one forward (len(tree) = n, its
    first row the context's last token); a drafter grows one level by level, its earlier levels already
    in its cache. None is the chain, the causal case."""
    b, n = input_ids.shape
    past = cache.get_seq_length()
    if tree is None:
        positions = torch.arange(past, past + n, device=input_ids.device).unsqueeze(0)  # (1, n)
        mask = causal_mask(past, n, input_ids.device)
    else:
        start = past + n - len(tree)
        positions = torch.tensor([start + d for d in row_positions(tree)[-n:]], device=input_ids.device).unsqueeze(0)
        mask = ancestor_mask(start, tree, input_ids.device)[-n:]

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, scale: float) -> torch.Tensor:
        k, v = cache.update(k, v, layer)  # (B, kv_heads, past+n, hd): the cache + the new keys
        return attention(q, k, v, mask, scale)

    x, hidden = decoder(model, F.embedding(input_ids, model.model.embed_tokens.weight), positions, attend, hidden_layers)
    if last_only:
        x = x[:, -1:]
    return model.lm_head(x), hidden


def project_qkv(att: torch.nn.Module, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The query, key and value projections of h (B, n, H): (B, n, heads·hd) and twice (B, n, kv_heads·hd).
    A quantised copy holds the three as one fused linear (`quant.py`): one kernel call and one bf16 cast
    instead of three, per layer (BENCHMARKS §9b′ measures what that saves)."""
    if hasattr(att, "qkv_proj"):
        return att.qkv_proj(h).split(att.qkv_sizes, dim=-1)
    return att.q_proj(h), att.k_proj(h), att.v_proj(h)


def project_gate_up(mlp: torch.nn.Module, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The MLP's gate and up projections of h (B, n, H), each (B, n, intermediate); fused as above."""
    if hasattr(mlp, "gate_up_proj"):
        return mlp.gate_up_proj(h).chunk(2, dim=-1)
    return mlp.gate_proj(h), mlp.up_proj(h)


Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int, float], torch.Tensor]


def decoder(model: LlamaForCausalLM, x: torch.Tensor, positions: torch.Tensor, attend: Attend,
            hidden_layers: tuple[int, ...] = ()) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """The decoder layers and the final norm on embeddings x (B, n, H) at rotary `positions` (1 or B, n).

    `attend(q, k, v, layer, scale)` gets the new rotated queries (B, heads, n, hd) and keys/values
    (B, kv_heads, n, hd), stores the keys/values in its cache and returns the attention output
    (B, heads, n, hd). `forward` above attends over one KVCache per sequence; the serving engine
    packs many requests' tokens into one row and attends over its ragged cache (`batch.py`).
    """
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    eps = config.rms_norm_eps
    b, n, _ = x.shape
    cos, sin = rotary_tables(model, positions, x.dtype)
    layers = model.model.layers
    hidden = {0: x} if 0 in hidden_layers else {}
    for i, layer in enumerate(layers):
        att, mlp = layer.self_attn, layer.mlp
        h = rms_norm(x, layer.input_layernorm.weight, eps)
        q, k, v = project_qkv(att, h)
        q = q.view(b, n, heads, head_dim).transpose(1, 2)  # (B, heads, n, hd)
        k = k.view(b, n, kv_heads, head_dim).transpose(1, 2)  # (B, kv_heads, n, hd)
        v = v.view(b, n, kv_heads, head_dim).transpose(1, 2)
        y = attend(rotate(q, cos, sin), rotate(k, cos, sin), v, i, att.scaling)  # (B, heads, n, hd)
        x = x + att.o_proj(y.transpose(1, 2).reshape(b, n, heads * head_dim))
        h = rms_norm(x, layer.post_attention_layernorm.weight, eps)
        gate, up = project_gate_up(mlp, h)
        x = x + mlp.down_proj(F.silu(gate) * up)
        if i + 1 in hidden_layers and i + 1 < len(layers):
            hidden[i + 1] = x
    x = rms_norm(x, model.model.norm.weight, eps)
    if len(layers) in hidden_layers:
        hidden[len(layers)] = x
    return x, hidden
