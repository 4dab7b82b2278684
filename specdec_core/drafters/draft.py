"""`draft`: a small independent causal LM distilled from the target: the classic speculative drafter.

Leviathan et al.'s drafter, and transformers' assisted generation's: a shallow model of the same
family that reads tokens only (no target features), keeps its own KV cache and drafts k tokens one
after another. It drafts with `DraftModelDrafter` (small_model.py), the same class `early-exit`, its
untrained contrast, uses. Here it is 2 decoder layers at the target's width (576) with a narrower MLP
(480 instead of 1536), so the shipped file stays ~7 MB:
- token embeddings: the target's, frozen, borrowed at load time (never stored);
- output head: the target's rows for the reduced vocabulary (vocab.py), borrowed as well;
- trained: the layers and the final norm. They start as the target's first layers with each MLP
  pruned to its largest neurons (`from_target`): a warm start that already reads the target's
  embeddings, then distilled on the target's own generations (training/objectives.py).
"""
from __future__ import annotations

import copy
import functools

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm

from ..kernels import MAX_ROWS, KernelTable, Route, apply_kernels
from ..models import LoadedModel
from .vocab import ReducedVocab, module_vocab

DRAFT_LAYERS = 2
DRAFT_INTERMEDIATE = 480  # 2 layers of 576 wide with this MLP: 6.9 MB in fp16 (the 20 MB budget's remainder)


class DraftNet(torch.nn.Module):
    """The trained part of the draft LM: `layers` Llama decoder layers and a final norm."""

    def __init__(self, config: dict) -> None:
        super().__init__()
        self.config = dict(config)  # hidden, heads, kv_heads, head_dim, intermediate, layers, vocab, eps
        self.llama_config = LlamaConfig(
            hidden_size=config["hidden"], num_attention_heads=config["heads"], num_key_value_heads=config["kv_heads"],
            head_dim=config["head_dim"], intermediate_size=config["intermediate"], num_hidden_layers=config["layers"],
            rms_norm_eps=config["eps"], vocab_size=config["vocab"], hidden_act="silu",
            attn_implementation="sdpa")  # what the target's layers use (transformers' forward, hf:assisted)
        self.layers = torch.nn.ModuleList(LlamaDecoderLayer(self.llama_config, i) for i in range(config["layers"]))
        self.norm = LlamaRMSNorm(config["hidden"], eps=config["eps"])
        self.register_buffer("vocab_ids", torch.zeros(config["vocab"], dtype=torch.int32))

    @staticmethod
    def target_config(lm: LoadedModel, vocab: int, layers: int = DRAFT_LAYERS,
                      intermediate: int = DRAFT_INTERMEDIATE) -> dict:
        c = lm.model.config
        return {"hidden": c.hidden_size, "heads": c.num_attention_heads, "kv_heads": c.num_key_value_heads,
                "head_dim": getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
                "intermediate": intermediate, "layers": layers, "vocab": vocab, "eps": c.rms_norm_eps}

    @staticmethod
    def tiny_config(lm: LoadedModel) -> dict:
        return DraftNet.target_config(lm, vocab=4096, intermediate=lm.model.config.intermediate_size // 2)

    @torch.no_grad()
    def from_target(self, target: LlamaForCausalLM) -> "DraftNet":
        """Copy the target's first layers and final norm; keep each MLP's `intermediate` neurons with the
        largest ||gate_j|| * ||up_j|| * ||down_j|| (the ones that move the residual stream the most)."""
        keep = self.config["intermediate"]
        for mine, theirs in zip(self.layers, target.model.layers):
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(mine.self_attn, name).weight.copy_(getattr(theirs.self_attn, name).weight)
            mine.input_layernorm.weight.copy_(theirs.input_layernorm.weight)
            mine.post_attention_layernorm.weight.copy_(theirs.post_attention_layernorm.weight)
            mlp = theirs.mlp
            size = mlp.gate_proj.weight.norm(dim=1) * mlp.up_proj.weight.norm(dim=1) * mlp.down_proj.weight.norm(dim=0)
            neurons = torch.topk(size, keep).indices.sort().values
            mine.mlp.gate_proj.weight.copy_(mlp.gate_proj.weight[neurons])
            mine.mlp.up_proj.weight.copy_(mlp.up_proj.weight[neurons])
            mine.mlp.down_proj.weight.copy_(mlp.down_proj.weight[:, neurons])
        self.norm.weight.copy_(target.model.norm.weight)
        return self


class FullVocabHead(torch.nn.Module):
    """The reduced-vocabulary head with its logits put back into the full vocabulary (-inf outside the
    subset): the draft LM as a drop-in model for code that expects V logits (transformers' assisted
    generation), computing exactly what the drafter computes."""

    def __init__(self, vocab: ReducedVocab) -> None:
        super().__init__()
        self.vocab = vocab

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.vocab.expand(self.vocab.logits(h))


def causal_lm(net: DraftNet, target: LlamaForCausalLM, vocab: ReducedVocab, full_vocab: bool = False) -> LlamaForCausalLM:
    """The draft LM as a `LlamaForCausalLM` that `llama.forward` (or transformers) runs: `net`'s layers and
    norm between the target's embeddings and rotary tables and an output head over the reduced
    vocabulary: N logits (`vocab.expand` puts them back into the full vocabulary), or with `full_vocab`
    V logits, -inf outside the subset. Nothing is copied."""
    config = target.config.__class__(**{**target.config.to_dict(), "num_hidden_layers": net.config["layers"],
                                        "intermediate_size": net.config["intermediate"]})
    with torch.device("meta"):  # a skeleton: every module is replaced below
        model = LlamaForCausalLM(config)
    model.model.embed_tokens = target.model.embed_tokens
    model.model.rotary_emb = target.model.rotary_emb
    model.model.layers = net.layers
    model.model.norm = net.norm
    if full_vocab:
        model.lm_head = FullVocabHead(vocab)
    else:
        model.lm_head = torch.nn.Linear(net.config["hidden"], len(vocab), bias=False, device=vocab.weight.device,
                                        dtype=vocab.weight.dtype)
        model.lm_head.weight = torch.nn.Parameter(vocab.weight, requires_grad=False)
    model.generation_config = copy.deepcopy(target.generation_config)  # generate() may change an assistant's
    return model.eval()


# The draft LM's routes: the weight-left product for one or two rows (one padded to two), nn.Linear's
# kernel above — the engine's fixed dispatch before kernel tables, kept for this small model (no packed copy).
DRAFT_KERNELS = KernelTable("draft", (Route("weight-left", 2), Route("weight-left", 2),
                                      *(Route("linear", n) for n in range(3, MAX_ROWS + 1))))


@functools.lru_cache(maxsize=8)
def serving_lm(net: DraftNet, target: LlamaForCausalLM) -> tuple[LlamaForCausalLM, ReducedVocab]:
    """One inference view (and vocabulary) per loaded net, shared by every request's drafter: the
    serving engine batches the drafting of requests whose drafters share a model. On CPU its linear
    layers take the weight-left product for one or two rows and nn.Linear's kernel above (kernels/; no
    packed copy of the weights)."""
    vocab = module_vocab(net, target.lm_head.weight)
    model = causal_lm(net, target, vocab)
    if vocab.weight.device.type == "cpu":
        apply_kernels(model, DRAFT_KERNELS)
    return model, vocab
