"""An EAGLE-3-style feature-level drafter: one decoder layer that continues the target's own features.

Medusa heads (heads.py) guess every position blind from one state. EAGLE instead runs a tiny model
*autoregressively*, but on features rather than tokens alone:
1. fuse: the target's low, middle and high layer states at a position (layers 2, 15, 27 of 30; the
   verification forward returns them through `hidden_layers`) -> one linear layer -> a feature g (H);
2. one decoder layer reads [norm(embedding of the next token) ; norm(g)] (2H wide: its q/k/v take
   both) with its own KV cache, residual from g, and outputs the feature of the next position;
3. its final norm + the target's output head over the reduced vocabulary name the token after that.
Drafting step i+1 feeds step i's *output* feature back in with the token step i drafted. The target
never computes those positions, so the drafter runs on its own predictions, and training has to
show it them: training-time test (`training/eagle.py`) unrolls these steps during training, which
is the published fix for acceptance that otherwise decays with the draft position.

Alignment (the same in training data and here): the feature at position t and the token at t+1 go in
at position t, and predict the token at t+2. The drafter's context starts at the prompt's last
position (where the data's hidden rows start), at the absolute rotary positions of the target.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import llama
from ..models import LoadedModel
from ..sampling import SamplingParams
from ..drafting import Draft, Drafter, draft_chain, draft_probs, model_draft, tree_draft
from ..trees import TreeSize, ancestor_mask, expand_tree, row_positions
from .vocab import ReducedVocab

# Which target layers are fused, as fractions of the depth (`llama.depth_layer`): 2, 15, 27 of 30.
FEATURE_FRACTIONS = ((1, 15), (1, 2), (9, 10))


def feature_layers(num_layers: int) -> tuple[int, ...]:
    return tuple(llama.depth_layer(a, b, num_layers) for a, b in FEATURE_FRACTIONS)


class EagleNet(torch.nn.Module):
    """fuse (3H -> H) + one decoder layer over [embedding ; feature] (2H in) + final norm."""

    def __init__(self, config: dict) -> None:
        super().__init__()
        self.config = dict(config)  # hidden, heads, kv_heads, head_dim, intermediate, layers, vocab, eps
        h, heads, kv, hd = config["hidden"], config["heads"], config["kv_heads"], config["head_dim"]
        linear = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.fuse = linear(len(config["layers"]) * h, h)
        self.embed_norm = torch.nn.Parameter(torch.ones(h))
        self.feature_norm = torch.nn.Parameter(torch.ones(h))
        self.q_proj, self.k_proj, self.v_proj = linear(2 * h, heads * hd), linear(2 * h, kv * hd), linear(2 * h, kv * hd)
        self.o_proj = linear(heads * hd, h)
        self.mlp_norm = torch.nn.Parameter(torch.ones(h))
        self.gate_proj, self.up_proj = linear(h, config["intermediate"]), linear(h, config["intermediate"])
        self.down_proj = linear(config["intermediate"], h)
        self.final_norm = torch.nn.Parameter(torch.ones(h))
        self.register_buffer("vocab_ids", torch.zeros(config["vocab"], dtype=torch.int32))

    @staticmethod
    def target_config(lm: LoadedModel, vocab: int, intermediate: int | None = None) -> dict:
        c = lm.model.config
        return {"hidden": c.hidden_size, "heads": c.num_attention_heads, "kv_heads": c.num_key_value_heads,
                "head_dim": getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
                "intermediate": intermediate or c.intermediate_size, "layers": list(feature_layers(c.num_hidden_layers)),
                "vocab": vocab, "eps": c.rms_norm_eps}

    @staticmethod
    def tiny_config(lm: LoadedModel) -> dict:
        return EagleNet.target_config(lm, vocab=4096)

    def fused(self, hidden: dict[int, torch.Tensor]) -> torch.Tensor:
        """The target's states {layer: (..., H)} -> the drafter's input feature (..., H)."""
        return self.fuse(torch.cat([hidden[layer] for layer in self.config["layers"]], dim=-1))

    def qkv(self, feature: torch.Tensor, embeds: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """feature, embeds (B, n, H) -> rotated q (B, heads, n, hd), k and v (B, kv_heads, n, hd)."""
        b, n, _ = feature.shape
        c, eps = self.config, self.config["eps"]
        x = torch.cat((llama.rms_norm(embeds, self.embed_norm, eps), llama.rms_norm(feature, self.feature_norm, eps)), -1)
        q = self.q_proj(x).view(b, n, c["heads"], c["head_dim"]).transpose(1, 2)
        k = self.k_proj(x).view(b, n, c["kv_heads"], c["head_dim"]).transpose(1, 2)
        v = self.v_proj(x).view(b, n, c["kv_heads"], c["head_dim"]).transpose(1, 2)
        return llama.rotate(q, cos, sin), llama.rotate(k, cos, sin), v

    def finish(self, feature: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """The rest of the layer: attention output (B, heads, n, hd) -> the next feature (B, n, H)."""
        b, _, n, _ = attended.shape
        x = feature + self.o_proj(attended.transpose(1, 2).reshape(b, n, -1))
        h = llama.rms_norm(x, self.mlp_norm, self.config["eps"])
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    def head_state(self, feature: torch.Tensor) -> torch.Tensor:
        """What the output head reads: the final norm of an output feature."""
        return llama.rms_norm(feature, self.final_norm, self.config["eps"])

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return llama.attention(q, k, v, mask, self.config["head_dim"] ** -0.5)


class EagleDrafter(Drafter):
    """Keeps the drafter's KV cache over the verified positions; drafts k steps on its own features."""

    name = "eagle"

    def __init__(self, net: EagleNet, vocab: ReducedVocab, target: torch.nn.Module, dynamic_k: float | None = None,
                 tree: TreeSize | None = None) -> None:
        """tree: draft EAGLE-2's dynamic tree of that size (`trees/build.py`), not a chain."""
        self.net = net.eval()
        self.tree = tree
        self.vocab = vocab
        self.target = target  # borrowed: token embeddings and rotary tables
        self.hidden_layers = tuple(sorted(set(net.config["layers"])))
        self.dynamic_k = dynamic_k
        self.reset([])

    def reset(self, prompt_ids: list[int]) -> None:
        self.keys: torch.Tensor | None = None  # (1, kv_heads, committed, hd): verified positions only
        self.values: torch.Tensor | None = None
        self.start = 0  # absolute position of the cache's first row
        self.pending: torch.Tensor | None = None  # (m, H) fused target features not yet fed
        self.pending_at = 0  # the position of pending's first row

    def prefill(self, hidden: dict[int, torch.Tensor]) -> None:
        rows = next(iter(hidden.values())).shape[0]
        self.pending = self.net.fused({layer: h[-1:] for layer, h in hidden.items()})  # the prompt's last position
        self.start = self.pending_at = rows - 1

    def observe(self, accepted: int, emitted: list[int], hidden: dict[int, torch.Tensor],
                verified: int | None = None) -> None:
        # Verify rows 0 .. accepted sat at the context's last token and the accepted drafts: true
        # features whose next tokens are exactly the tokens just emitted.
        rows = self.net.fused({layer: h[:accepted + 1] for layer, h in hidden.items()})
        if self.pending is not None:  # a step this drafter did not propose (`mix` verified another's drafts)
            self.pending = torch.cat((self.pending, rows))
            return
        self.pending = rows
        self.pending_at = self.start + (self.keys.shape[2] if self.keys is not None else 0)

    def _step(self, feature: torch.Tensor, tokens: list[int], position: int, cache: tuple | None,
              tree: list[int] | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Feed features (n, H) with the tokens that follow them at `position`..; -> output features (n, H)
        and the cache grown by n rows. tree: the cache's last len(tree) rows with these n as a draft tree
        (as `llama.forward` reads it), `position` then the tree's first position."""
        n = len(tokens)
        embeds = F.embedding(torch.tensor([tokens], device=feature.device), self.target.model.embed_tokens.weight)
        offsets = range(n) if tree is None else row_positions(tree)[-n:]
        positions = torch.tensor([position + d for d in offsets], device=feature.device).unsqueeze(0)
        cos, sin = llama.rotary_tables(self.target, positions, feature.dtype)
        q, k, v = self.net.qkv(feature[None], embeds.to(feature.dtype), cos, sin)
        if cache is not None:
            k, v = torch.cat((cache[0], k), 2), torch.cat((cache[1], v), 2)
        if tree is None:
            mask = llama.causal_mask(k.shape[2] - n, n, feature.device)
        else:
            mask = ancestor_mask(k.shape[2] - len(tree), tree, feature.device)[-n:]
        out = self.net.finish(feature[None], self.net.attend(q, k, v, mask))
        return out[0], (k, v)

    @torch.inference_mode()
    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator) -> Draft:
        if self.pending is None:
            return Draft([], None)
        # 1. catch up: the verified features with their next tokens (the last len(pending) of the context)
        m = self.pending.shape[0]
        cache = (self.keys, self.values) if self.keys is not None else None
        out, (self.keys, self.values) = self._step(self.pending, context[-m:], self.pending_at, cache)
        self.pending = None
        feature, cache = out[-1:], (self.keys, self.values)
        position = self.start + self.keys.shape[2]
        if self.tree:
            return self._propose_tree(feature, cache, position, context, k, params)

        def logits_at(i: int, prev: int) -> torch.Tensor:
            nonlocal feature, cache, position
            if i > 0:  # 2. draft on: the previous step's output feature with the token it drafted
                feature, cache = self._step(feature, [prev], position, cache)
                position += 1
            return self.vocab.expand(self.vocab.logits(self.net.head_state(feature[-1])))  # (V,)

        return model_draft(*draft_chain(logits_at, context, k, params, generator, self.dynamic_k))

    def _propose_tree(self, feature: torch.Tensor, cache: tuple, position: int, context: list[int], k: int,
                      params: SamplingParams) -> Draft:
        """EAGLE-2: each level's expanded nodes fed in one step, each with the output feature of the step
        that proposed it (its parent's), under the tree mask; the tree's keys/values stay in the local
        cache and are dropped with it (the drafter's own cache keeps verified positions only)."""
        out = [feature[-1]]  # the feature each fed row's step put out, the root's first (row r at r + 1)

        def q_of(state: torch.Tensor, history: list[int]) -> torch.Tensor:
            return draft_probs(self.vocab.expand(self.vocab.logits(self.net.head_state(state))), history, params)

        def children_q(tokens: list[int], tree: list[int], paths: list[list[int]]) -> torch.Tensor:
            nonlocal cache
            inputs = torch.stack([out[parent + 1] for parent in tree[-len(tokens):]])  # (m, H): the parents' outputs
            outputs, cache = self._step(inputs, tokens, position, cache, tree=tree)
            out.extend(outputs)
            return torch.stack([q_of(state, context + path) for state, path in zip(outputs, paths)])

        return tree_draft(expand_tree(q_of(feature[-1], context), children_q, k, self.tree.cap), self.tree)

    def memory_bytes(self) -> int:
        cache = sum(t.numel() * t.element_size() for t in (self.keys, self.values) if t is not None)
        return cache + sum(p.numel() * p.element_size() for p in self.net.parameters()) + \
            self.vocab.weight.numel() * self.vocab.weight.element_size()
