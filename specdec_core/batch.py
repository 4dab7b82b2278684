"""One target forward for many requests: their new tokens packed into one row, attention over a ragged cache.

Requests in a serving batch differ in everything that shapes a forward: prompt length, how many
drafts each verifies this step, how many of those survive. Two layouts handle that:

- *padded*: a (B, longest) block of tokens; every row pays for the longest row's tokens.
- *packed* (this file): the R = sum of all rows' tokens as ONE sequence (1, R) through every linear
  layer (the 135M weights are read once for all of them, and the matmul costs R rows, not B × longest);
  only attention unpacks them into (B, longest) so each request's queries meet its own keys.

On a CPU the linears are most of a forward, so packing makes a step's cost a function of the total
tokens verified: a request verifying 8 copied drafts next to fifteen plain requests costs 23 token
rows, not 16 × 9 = 144 (the cost table, `serving/costs.py`, is keyed by total tokens for that reason).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM

from . import llama
from .trees.shape import ancestor_mask, row_positions


class RaggedCache:
    """Keys and values of up to `slots` requests, one slot each, each slot with its own length.

    keys[layer] is (slots, kv_heads, capacity, hd). Slot s holds positions 0 .. lengths[s]-1 of its
    request; anything beyond is stale and never attended (the mask stops at each row's length).
    Rolling back rejected drafts is lowering a length: no copy, no crop. The engine keeps its active
    requests in slots 0 .. B-1, so every forward reads a view of the first B slots, never a gather.
    """

    def __init__(self, model: LlamaForCausalLM, slots: int = 4, capacity: int = 256) -> None:
        config = model.config
        self.layers = config.num_hidden_layers
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.dtype = model.model.embed_tokens.weight.dtype  # the residual stream's (a quantised head has no .weight)
        self.device = model.model.embed_tokens.weight.device
        self.keys = self._empty(slots, capacity)
        self.values = self._empty(slots, capacity)
        self.lengths = [0] * slots

    def _empty(self, slots: int, capacity: int) -> list[torch.Tensor]:
        return [torch.zeros(slots, self.kv_heads, capacity, self.head_dim, dtype=self.dtype, device=self.device)
                for _ in range(self.layers)]

    @property
    def slots(self) -> int:
        return self.keys[0].shape[0]

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    @torch.inference_mode()
    def reserve(self, slots: int, capacity: int) -> None:
        """Grow (doubling) until there are `slots` slots of `capacity` positions; contents are kept."""
        new_slots, new_capacity = self.slots, self.capacity
        while new_slots < slots:
            new_slots *= 2
        while new_capacity < capacity:
            new_capacity *= 2
        if (new_slots, new_capacity) == (self.slots, self.capacity):
            return
        for store in (self.keys, self.values):
            for i, old in enumerate(store):
                grown = torch.zeros(new_slots, self.kv_heads, new_capacity, self.head_dim, dtype=self.dtype, device=self.device)
                grown[:old.shape[0], :, :old.shape[2]] = old
                store[i] = grown
        self.lengths += [0] * (new_slots - len(self.lengths))

    @torch.inference_mode()
    def move(self, source: int, target: int) -> None:
        """Copy slot `source` into slot `target` (a request leaving gives its slot to the last one)."""
        n = self.lengths[source]
        for store in (self.keys, self.values):
            for layer in store:
                layer[target, :, :n] = layer[source, :, :n]
        self.lengths[target] = n
        self.lengths[source] = 0

    @torch.inference_mode()
    def keep(self, slot: int, new: int, rows: list[int]) -> None:
        """After a forward that stored `new` positions in `slot`, keep only `rows` of them (ascending: a
        tree's accepted path), moved up in order; a chain's prefix (rows 0 .. m-1) is a plain rollback."""
        start = self.lengths[slot] - new
        if rows != list(range(len(rows))):
            index = torch.tensor(rows, device=self.device) + start
            for store in (self.keys, self.values):
                for layer in store:
                    layer[slot, :, start:start + len(rows)] = layer[slot, :, index]
        self.lengths[slot] = start + len(rows)

    def bytes_per_token(self) -> int:
        """Keys + values of one position in every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.keys[0].element_size()


def batch_forward(model: LlamaForCausalLM, cache: RaggedCache, first_slot: int, rows: list[list[int]],
                  hidden_layers: tuple[int, ...] = (), last_only: bool = False,
                  trees: list[list[int] | None] | None = None) -> tuple[list[torch.Tensor], list[dict[int, torch.Tensor]]]:
    """Run rows[b] on top of slot first_slot + b (which grows by len(rows[b])), all in one forward.

    Returns per row its logits (n_b or 1, V) in float32 and its requested hidden states {layer: (n_b, H)}.
    A single row runs exactly the single-request forward's ops (same kernels, same mask), so batched
    decoding at concurrency 1 reproduces `llama.forward` bit for bit. trees[b]: row b's tokens as a draft
    tree (its tokens' parent rows, `llama.forward`'s `tree`), None for a chain; the tokens are stored in
    the slot in row order and `keep` compacts the accepted path afterwards.
    """
    config = model.config
    heads = config.num_attention_heads
    device = cache.device
    b, lens = len(rows), [len(r) for r in rows]
    n = max(lens)
    cache.reserve(first_slot + b, max(cache.lengths[first_slot:first_slot + b] + [0]) + n)
    past = cache.lengths[first_slot:first_slot + b]
    span = max(p + m for p, m in zip(past, lens))  # key positions any query of this forward may see
    slots = slice(first_slot, first_slot + b)

    row_of = torch.tensor([r for r in range(b) for _ in range(lens[r])], device=device)  # (R,) which request
    col_of = torch.tensor([j for r in range(b) for j in range(lens[r])], device=device)  # (R,) its offset there
    stored = torch.tensor([past[r] + j for r in range(b) for j in range(lens[r])], device=device)  # (R,) slot index
    if trees and any(t is not None for t in trees):  # a chain row is the tree whose node i hangs from row i
        trees = [tree or list(range(-1, lens[r] - 1)) for r, tree in enumerate(trees)]
    else:
        trees = None
    if trees is None:  # a token's rotary position is where it is stored
        positions = stored
    else:  # a tree node's is the end of the cache + its depth
        positions = torch.tensor([past[r] + d for r in range(b) for d in row_positions(trees[r])],
                                 device=device)
    single = b == 1
    if single:  # the single-request forward's own mask: None (one token, or a prefill's is_causal) or causal
        mask = llama.causal_mask(past[0], n, device) if trees is None else ancestor_mask(past[0], trees[0], device)
    elif trees is None:  # (B, 1, n, span): query j of row r sees key positions 0 .. past[r] + j of its own slot
        limit = torch.tensor(past, device=device)[:, None] + torch.arange(n, device=device)[None, :]  # (B, n)
        mask = (torch.arange(span, device=device)[None, None, :] <= limit[:, :, None])[:, None]
    else:  # row r's own ancestor mask in its corner; padding queries see key 0 only (never read)
        mask = torch.zeros(b, 1, n, span, dtype=torch.bool, device=device)
        mask[:, :, :, 0] = True
        for r in range(b):
            mask[r, 0, :lens[r], :past[r] + lens[r]] = ancestor_mask(past[r], trees[r], device)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, scale: float) -> torch.Tensor:
        # q (1, heads, R, hd); k, v (1, kv_heads, R, hd): every request's new tokens in one row.
        keys, values = cache.keys[layer], cache.values[layer]  # (slots, kv_heads, capacity, hd)
        if single:
            keys[first_slot, :, past[0]:past[0] + n] = k[0]
            values[first_slot, :, past[0]:past[0] + n] = v[0]
            # Prefix views, as `KVCache` gives the single-request forward: the same SDPA call, so the same bits.
            return llama.attention(q, keys[slots, :, :span], values[slots, :, :span], mask, scale)
        keys[first_slot + row_of, :, stored] = k[0].transpose(0, 1)  # (R, kv_heads, hd) into each slot
        values[first_slot + row_of, :, stored] = v[0].transpose(0, 1)
        padded = q.new_zeros(b, heads, n, q.shape[-1])  # (B, heads, n, hd); padding queries are never read
        padded[row_of, :, col_of] = q[0].transpose(0, 1)
        y = llama.attention(padded, keys[slots, :, :span], values[slots, :, :span], mask, scale)
        return y[row_of, :, col_of].transpose(0, 1)[None]  # back to (1, heads, R, hd)

    ids = torch.tensor([[t for r in rows for t in r]], device=device)  # (1, R)
    x, hidden = llama.decoder(model, F.embedding(ids, model.model.embed_tokens.weight), positions[None], attend,
                              hidden_layers)
    for r in range(b):
        cache.lengths[first_slot + r] += lens[r]
    ends = torch.tensor(lens).cumsum(0).tolist()
    starts = [e - m for e, m in zip(ends, lens)]
    if last_only:
        logits = model.lm_head(x[0, [e - 1 for e in ends]]).float()  # (B, V)
        per_row = [logits[r:r + 1] for r in range(b)]
    else:
        logits = model.lm_head(x[0]).float()  # (R, V)
        per_row = [logits[s:e] for s, e in zip(starts, ends)]
    hidden_rows = [{layer: h[0, s:e] for layer, h in hidden.items()} for s, e in zip(starts, ends)]
    return per_row, hidden_rows
