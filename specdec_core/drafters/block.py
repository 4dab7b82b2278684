"""`block`: a semi-autoregressive block drafter (the production article's scheme A, in miniature).

EAGLE (eagle.py) drafts k tokens with k serial passes of its layer; Medusa heads (heads.py) draft
them in one pass but each blind to the others. A block drafter sits between the two:
1. context: the target's states at a few evenly spaced layers (5, 15, 25 of 30) are fused by one
   linear layer + RMSNorm into one feature per committed position, and every backbone layer reads
   those features as extra keys/values (its own k/v projections, rotary at their positions);
2. backbone: ONE forward of a decoder layer over the block [anchor, mask, ..., mask] (the last
   committed token, then one learned mask embedding per position to fill), attention non-causal
   inside the block, rotary positions continuing the sequence. Its output at slot j names the token
   at anchor + 1 + j through the target's final-norm-free output head over the reduced vocabulary;
3. Markov head: the one serial part. Slot j's logits get a low-rank bias from the token before it
   (the anchor, then each draft just chosen): `markov_in` (N + 1 rows: the draft vocabulary and one
   bucket for tokens outside it, rank r) times `markov_out` (r x N). γ cheap steps instead of γ
   backbone passes: the parallel backbone guesses each position, the serial head makes neighbouring
   drafts agree with each other. `block-parallel` is the same model with rank 0: every position
   drafted independently (DFlash-style), the paper's main ablation;
4. confidence head: a linear layer + sigmoid on [slot state ; previous token's embedding] estimating
   the chance that draft j survives given drafts < j did. It reads nothing of draft j itself, so the
   serving schedulers may use it (`Draft.confidence`'s contract, serving/schedulers.py). Its logits
   are divided by a temperature per position and regime (greedy, sampled), fitted on held-out data
   one position at a time (training/calibration.py) and shipped with the weights.

Alignment (as in training/batches.py): the anchor at position t is the token the target emitted last;
the context holds the target's states of positions <= t-1 (the anchor's own state does not exist yet),
from the prompt's last position on (where the data's hidden rows start).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer

from .. import llama
from ..models import LoadedModel
from ..sampling import SamplingParams
from ..drafting import Draft, Drafter, draft_chain, draft_probs, tree_draft
from ..trees import TreeSize, expand_tree
from .vocab import ReducedVocab

# The fused target layers as fractions of the depth (`llama.depth_layer`): 5, 15, 25 of 30.
FEATURE_FRACTIONS = ((1, 6), (1, 2), (5, 6))
BLOCK = 8  # slots per block: the most it drafts in one step
BACKBONE_LAYERS = 1
INTERMEDIATE = 512  # the backbone's MLP width: both block models within 20 MB and the repository within 50 MB
RANK = 64  # the Markov head's rank (block-parallel: 0)
REGIMES = ("greedy", "sampled")  # the confidence temperatures' rows


def feature_layers(num_layers: int) -> tuple[int, ...]:
    return tuple(llama.depth_layer(a, b, num_layers) for a, b in FEATURE_FRACTIONS)


def unit_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / rms(x) in float32, no learned scale (the previous token's embedding as the confidence head reads it)."""
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class BlockNet(torch.nn.Module):
    """fuse (F·H -> H) + RMSNorm, a mask embedding, `backbone` decoder layers, a final norm, the Markov
    head (rank r) and the confidence head with its fitted temperatures."""

    def __init__(self, config: dict) -> None:
        super().__init__()
        self.config = dict(config)  # hidden, heads, kv_heads, head_dim, intermediate, backbone, layers, block, rank, vocab, eps
        h, n, rank = config["hidden"], config["vocab"], config["rank"]
        self.llama_config = LlamaConfig(
            hidden_size=h, num_attention_heads=config["heads"], num_key_value_heads=config["kv_heads"],
            head_dim=config["head_dim"], intermediate_size=config["intermediate"], num_hidden_layers=config["backbone"],
            rms_norm_eps=config["eps"], vocab_size=n, hidden_act="silu")
        self.fuse = torch.nn.Linear(len(config["layers"]) * h, h, bias=False)
        self.fuse_norm = torch.nn.Parameter(torch.ones(h))
        self.mask_embedding = torch.nn.Parameter(torch.zeros(h))
        self.layers = torch.nn.ModuleList(LlamaDecoderLayer(self.llama_config, i) for i in range(config["backbone"]))
        self.final_norm = torch.nn.Parameter(torch.ones(h))
        if rank:
            self.markov_in = torch.nn.Parameter(torch.randn(n + 1, rank) * 0.02)  # row n: the out-of-subset bucket
            self.markov_out = torch.nn.Parameter(torch.zeros(rank, n))  # zero: training starts from the parallel model
        self.confidence = torch.nn.Linear(2 * h, 1)
        self.register_buffer("temperature", torch.ones(len(REGIMES), config["block"]))  # fitted after training
        self.register_buffer("vocab_ids", torch.zeros(n, dtype=torch.int32))

    @staticmethod
    def target_config(lm: LoadedModel, vocab: int, rank: int = RANK, intermediate: int = INTERMEDIATE,
                      block: int = BLOCK, backbone: int = BACKBONE_LAYERS) -> dict:
        c = lm.model.config
        return {"hidden": c.hidden_size, "heads": c.num_attention_heads, "kv_heads": c.num_key_value_heads,
                "head_dim": getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
                "intermediate": intermediate, "backbone": backbone, "layers": list(feature_layers(c.num_hidden_layers)),
                "block": block, "rank": rank, "vocab": vocab, "eps": c.rms_norm_eps}

    @staticmethod
    def tiny_config(lm: LoadedModel, rank: int = 16) -> dict:
        return BlockNet.target_config(lm, vocab=4096, rank=rank, intermediate=lm.model.config.intermediate_size // 2)

    # --- the context: fused target features as keys/values -----------------------------------------

    def context(self, hidden: dict[int, torch.Tensor]) -> torch.Tensor:
        """The target's states {layer: (..., H)} -> the fused context feature (..., H)."""
        x = self.fuse(torch.cat([hidden[layer] for layer in self.config["layers"]], dim=-1))
        return llama.rms_norm(x, self.fuse_norm, self.config["eps"])

    def context_kv(self, target: torch.nn.Module, ctx: torch.Tensor, positions: torch.Tensor
                   ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Context features (B, L, H) at rotary positions (B, L) -> each backbone layer's keys and
        values (B, kv_heads, L, hd)."""
        b, length, _ = ctx.shape
        c = self.config
        cos, sin = llama.rotary_tables(target, positions, ctx.dtype)
        out = []
        for layer in self.layers:
            k = layer.self_attn.k_proj(ctx).view(b, length, c["kv_heads"], c["head_dim"]).transpose(1, 2)
            v = layer.self_attn.v_proj(ctx).view(b, length, c["kv_heads"], c["head_dim"]).transpose(1, 2)
            out.append((llama.rotate(k, cos, sin), v))
        return out

    # --- the backbone: one forward over the block's slots ----------------------------------------

    def slots(self, target: torch.nn.Module, anchors: torch.Tensor, width: int) -> torch.Tensor:
        """Anchor token ids (...,) -> the block's input (..., width, H): the anchor's embedding, then masks."""
        first = F.embedding(anchors, target.model.embed_tokens.weight).to(self.mask_embedding.dtype)
        masks = self.mask_embedding.expand(*anchors.shape, width - 1, -1)
        return torch.cat((first[..., None, :], masks), dim=-2)

    def backbone(self, target: torch.nn.Module, x: torch.Tensor, positions: torch.Tensor,
                 kv: list[tuple[torch.Tensor, torch.Tensor]], mask: torch.Tensor) -> torch.Tensor:
        """Slots x (B, Q, H) at rotary `positions` (B, Q), each layer attending over [its context keys ;
        the slots' own keys] as `mask` (B or 1, 1, Q, L + Q) allows -> final-normed states (B, Q, H)."""
        b, q_len, _ = x.shape
        c, eps = self.config, self.config["eps"]
        cos, sin = llama.rotary_tables(target, positions, x.dtype)
        for layer, (ck, cv) in zip(self.layers, kv):
            att, mlp = layer.self_attn, layer.mlp
            h = llama.rms_norm(x, layer.input_layernorm.weight, eps)
            q = att.q_proj(h).view(b, q_len, c["heads"], c["head_dim"]).transpose(1, 2)
            k = att.k_proj(h).view(b, q_len, c["kv_heads"], c["head_dim"]).transpose(1, 2)
            v = att.v_proj(h).view(b, q_len, c["kv_heads"], c["head_dim"]).transpose(1, 2)
            keys = torch.cat((ck, llama.rotate(k, cos, sin)), 2)
            values = torch.cat((cv, v), 2)
            y = llama.attention(llama.rotate(q, cos, sin), keys, values, mask, c["head_dim"] ** -0.5)
            x = x + att.o_proj(y.transpose(1, 2).reshape(b, q_len, -1))
            h = llama.rms_norm(x, layer.post_attention_layernorm.weight, eps)
            x = x + mlp.down_proj(F.silu(mlp.gate_proj(h)) * mlp.up_proj(h))
        return llama.rms_norm(x, self.final_norm, eps)

    # --- the serial part: Markov bias and confidence, from the token before each slot -----------

    def markov(self, prev: torch.Tensor) -> torch.Tensor | float:
        """Place of the previous token in the draft vocabulary (..., -1 outside) -> the bias (..., N)."""
        if not self.config["rank"]:
            return 0.0
        return self.markov_in[prev.where(prev >= 0, self.config["vocab"])] @ self.markov_out

    def confidence_logit(self, state: torch.Tensor, prev_embedding: torch.Tensor) -> torch.Tensor:
        """Slot states (..., H) and the previous tokens' embeddings (..., H) -> raw confidence logits (...)."""
        x = torch.cat((state, unit_rms(prev_embedding, self.config["eps"]).to(state.dtype)), -1)
        return self.confidence(x)[..., 0]

    def calibrated(self, logits: torch.Tensor, regime: str) -> torch.Tensor:
        """Raw confidence logits (..., width) -> calibrated survival estimates: sigmoid(z_j / T_j)."""
        t = self.temperature[REGIMES.index(regime), :logits.shape[-1]]
        return torch.sigmoid(logits.float() / t.float())


class ParallelBlockNet(BlockNet):
    """`block-parallel`: the same model without the Markov head (rank 0), every position drafted
    independently. Only its seeded `tiny` stand-in differs in construction."""

    @staticmethod
    def tiny_config(lm: LoadedModel, rank: int = 0) -> dict:
        return BlockNet.tiny_config(lm, rank=0)


class BlockDrafter(Drafter):
    """Keeps the request's context keys/values (one row per committed position from the prompt's last
    on); each step drafts one block: one backbone forward, then the serial Markov head."""

    def __init__(self, net: BlockNet, vocab: ReducedVocab, target: torch.nn.Module, name: str = "block",
                 dynamic_k: float | None = None, tree: TreeSize | None = None) -> None:
        self.net = net.eval()
        self.tree = tree
        self.vocab = vocab
        self.target = target  # borrowed: embeddings and rotary tables
        self.name = name
        self.hidden_layers = tuple(sorted(set(net.config["layers"])))
        self.dynamic_k = dynamic_k
        self.reset([])

    def reset(self, prompt_ids: list[int]) -> None:
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # per layer (1, kv_heads, L, hd)
        self.start = 0  # absolute position of the context's first row

    @property
    def rows(self) -> int:
        return 0 if self.kv is None else self.kv[0][0].shape[2]

    @torch.inference_mode()
    def _append(self, hidden: dict[int, torch.Tensor]) -> None:
        ctx = self.net.context({layer: h[None] for layer, h in hidden.items()})  # (1, n, H)
        positions = torch.arange(self.start + self.rows, self.start + self.rows + ctx.shape[1], device=ctx.device)[None]
        new = self.net.context_kv(self.target, ctx, positions)
        self.kv = new if self.kv is None else [(torch.cat((k, nk), 2), torch.cat((v, nv), 2))
                                               for (k, v), (nk, nv) in zip(self.kv, new)]

    def prefill(self, hidden: dict[int, torch.Tensor]) -> None:
        rows = next(iter(hidden.values())).shape[0]
        self.start = rows - 1  # the prompt's last position: where training's context starts
        self._append({layer: h[-1:] for layer, h in hidden.items()})

    def observe(self, accepted: int, emitted: list[int], hidden: dict[int, torch.Tensor],
                verified: int | None = None) -> None:
        # Verify rows 0 .. accepted sat at the context's last token and the accepted drafts: committed
        # positions, each the state that named the token after it.
        self._append({layer: h[:accepted + 1] for layer, h in hidden.items()})

    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator) -> Draft:
        return self.propose_batch([self], [context], [k], [params], [generator])[0]

    @classmethod
    def propose_batch(cls, drafters: list[Drafter], contexts: list[list[int]], ks: list[int],
                      params: list[SamplingParams], generators: list[torch.Generator]) -> list[Draft]:
        """One backbone forward for every request whose drafter shares the net (contexts padded and
        masked), then each request's serial Markov steps."""
        groups: dict[int, list[int]] = {}
        for r, d in enumerate(drafters):
            groups.setdefault(id(d.net), []).append(r)
        drafts = [Draft([], None) for _ in drafters]
        for rows in groups.values():
            for r, draft in zip(rows, cls._draft_group([drafters[r] for r in rows], [contexts[r] for r in rows],
                                                       [ks[r] for r in rows], [params[r] for r in rows],
                                                       [generators[r] for r in rows])):
                drafts[r] = draft
        return drafts

    @staticmethod
    @torch.inference_mode()
    def _draft_group(drafters: list["BlockDrafter"], contexts: list[list[int]], ks: list[int],
                     params: list[SamplingParams], generators: list[torch.Generator]) -> list[Draft]:
        net, target, vocab = drafters[0].net, drafters[0].target, drafters[0].vocab
        live = [r for r, (d, k) in enumerate(zip(drafters, ks)) if d.rows and k > 0]
        drafts = [Draft([], None) for _ in drafters]
        if not live:
            return drafts
        width = min(max(ks[r] for r in live), net.config["block"])
        device = net.final_norm.device
        longest = max(drafters[r].rows for r in live)
        kv = []
        for layer in range(len(net.layers)):  # pad every request's context to the longest, masked out
            kv.append(tuple(torch.cat([F.pad(drafters[r].kv[layer][i], (0, 0, 0, longest - drafters[r].rows)) for r in live])
                            for i in (0, 1)))
        valid = torch.tensor([[j < drafters[r].rows for j in range(longest)] for r in live], device=device)
        mask = torch.cat((valid, torch.ones(len(live), width, dtype=torch.bool, device=device)), 1)[:, None, None, :]
        anchors = torch.tensor([contexts[r][-1] for r in live], device=device)
        starts = torch.tensor([len(contexts[r]) - 1 for r in live], device=device)
        positions = starts[:, None] + torch.arange(width, device=device)[None]  # (B, width): the slots' positions
        states = net.backbone(target, net.slots(target, anchors, width), positions, kv, mask)  # (B, width, H)
        guesses = vocab.logits(states)  # (B, width, N): the backbone's own guess at every slot
        for b, r in enumerate(live):
            draft = drafters[r]._tree if drafters[r].tree else drafters[r]._serial
            drafts[r] = draft(states[b], guesses[b], contexts[r], min(ks[r], width), params[r], generators[r])
        return drafts

    def _serial(self, states: torch.Tensor, guesses: torch.Tensor, context: list[int], k: int,
                params: SamplingParams, generator: torch.Generator) -> Draft:
        """The Markov head's γ cheap steps: slot j's logits = the backbone's guess + the bias from the
        token before it; its confidence reads that token too (never draft j itself)."""
        regime = "greedy" if params.greedy else "sampled"
        embed = self.target.model.embed_tokens.weight
        raw: list[torch.Tensor] = []

        def logits_at(j: int, prev: int) -> torch.Tensor:
            prev_t = torch.tensor(prev, device=states.device)
            raw.append(self.net.confidence_logit(states[j], embed[prev_t]))
            return self.vocab.expand(guesses[j] + self.net.markov(self.vocab.index[prev_t]))

        tokens, qs = draft_chain(logits_at, context, k, params, generator, self.dynamic_k)
        confidence = self.net.calibrated(torch.stack(raw), regime)[:len(tokens)].tolist() if raw else []
        guess = self.vocab.ids[guesses[:len(tokens)].argmax(-1)].tolist()
        return Draft(tokens, torch.stack(qs) if qs else None, confidence=confidence, guess=guess)

    def _tree(self, states: torch.Tensor, guesses: torch.Tensor, context: list[int], k: int,
              params: SamplingParams, generator: torch.Generator) -> Draft:
        """EAGLE-2's dynamic tree from one block: a node at depth d takes slot d's backbone guess plus the
        Markov bias from its own token, so every level is expanded without another backbone forward
        (block-parallel, with no Markov head, gives each depth one q: the tree of blind guesses)."""

        def q_after(slot: int, prev: int, history: list[int]) -> torch.Tensor:
            bias = self.net.markov(self.vocab.index[torch.tensor(prev, device=states.device)])
            return draft_probs(self.vocab.expand(guesses[slot] + bias), history, params)

        def children_q(tokens: list[int], tree: list[int], paths: list[list[int]]) -> torch.Tensor:
            return torch.stack([q_after(len(path), token, context + path) for token, path in zip(tokens, paths)])

        return tree_draft(expand_tree(q_after(0, context[-1], context), children_q, k, self.tree.cap), self.tree)

    def memory_bytes(self) -> int:
        cache = sum(t.numel() * t.element_size() for pair in (self.kv or []) for t in pair)
        return cache + sum(p.numel() * p.element_size() for p in self.net.parameters()) + \
            self.vocab.weight.numel() * self.vocab.weight.element_size()
