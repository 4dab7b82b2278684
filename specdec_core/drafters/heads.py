"""Medusa-style parallel heads: extra output heads on the target's own last hidden state.

The target's output head reads the final state h_t and names token t+1; head i reads the same h_t and
guesses token t+1+i, without seeing tokens t+1 .. t+i. So one verification forward hands over h_t for
free (`hidden_layers`), the heads cost one small matmul each, and the draft is the chain of every
head's own guess: cheap, but each head guesses blind to the guesses before it, so acceptance falls
fast with i.

Each head is Medusa's residual block h + SiLU(W h + b) followed by the target's output head over the
reduced vocabulary (`vocab.py`). W starts at zero, so an untrained head repeats the target's own
next-token guess (what Medusa does); training (`training/heads.py`) teaches head i the target's
distribution i tokens further on.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..models import LoadedModel
from ..sampling import SamplingParams
from ..trees import Tree, TreeSize, best_blind_tree, node_depths
from ..drafting import Draft, Drafter, draft_chain, draft_probs, model_draft, tree_draft
from .vocab import ReducedVocab


class MedusaHeads(torch.nn.Module):
    """`heads` residual blocks on the final hidden state, and the reduced vocabulary they speak."""

    def __init__(self, config: dict) -> None:
        super().__init__()
        self.config = dict(config)  # hidden, heads, vocab (N)
        hidden = config["hidden"]
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(config["heads"]))
        for block in self.blocks:
            torch.nn.init.zeros_(block.weight)
            torch.nn.init.zeros_(block.bias)
        self.register_buffer("vocab_ids", torch.zeros(config["vocab"], dtype=torch.int32))

    @staticmethod
    def tiny_config(lm: LoadedModel) -> dict:
        return {"hidden": lm.model.config.hidden_size, "heads": 4, "vocab": 4096}

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """(..., H) final states -> (heads, ..., H): the state each head projects onto the vocabulary."""
        return torch.stack([h + F.silu(block(h)) for block in self.blocks])


class HeadsDrafter(Drafter):
    """Drafts min(k, heads) tokens from the last verified position's final hidden state."""

    name = "heads"

    def __init__(self, heads: MedusaHeads, vocab: ReducedVocab, final_layer: int, dynamic_k: float | None = None,
                 tree: TreeSize | None = None, shape: Tree | None = None) -> None:
        """tree: draft a tree of that size (`trees/build.py`) instead of the chain; shape: a static tree
        (Medusa), its nodes' tokens the ranks of the guesses they take at their depth."""
        self.heads = heads.eval()
        self.tree = tree
        self.shape = shape
        self.vocab = vocab
        self.hidden_layers = (final_layer,)
        self.dynamic_k = dynamic_k
        self.state: torch.Tensor | None = None  # (H,) the final state that predicted the context's last token

    def reset(self, prompt_ids: list[int]) -> None:
        self.state = None

    def prefill(self, hidden: dict[int, torch.Tensor]) -> None:
        self.state = hidden[self.hidden_layers[0]][-1]

    def observe(self, accepted: int, emitted: list[int], hidden: dict[int, torch.Tensor],
                verified: int | None = None) -> None:
        # Row `accepted` of the verify forward sits at the last accepted token: it predicted the
        # correction/bonus just appended, so head i now guesses i tokens past it.
        self.state = hidden[self.hidden_layers[0]][accepted]

    @torch.inference_mode()
    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator) -> Draft:
        if self.state is None:
            return Draft([], None)
        logits = self.vocab.logits(self.heads(self.state.to(self.vocab.weight.dtype)))  # (heads, N)
        if self.shape is not None:
            return self._static(logits, context, k, params)
        if self.tree:
            # Head i's guess ignores the drafts before it, so each depth has one q and the best tree is exact.
            q = torch.stack([draft_probs(self.vocab.expand(row), context, params) for row in logits[:k]])  # (depth, V)
            return tree_draft(best_blind_tree(q, self.tree.cap), self.tree)
        # Head i guesses blind to the drafts before it: its row ignores `prev`.
        return model_draft(*draft_chain(lambda i, prev: self.vocab.expand(logits[i]), context, min(k, len(logits)),
                                        params, generator, self.dynamic_k))

    def _static(self, logits: torch.Tensor, context: list[int], k: int, params: SamplingParams) -> Draft:
        """Medusa's static tree: the same shape every step, node i taking the guess of its rank at its depth."""
        shape = self.shape.within(min(k, len(logits)))
        depths = node_depths(shape.parents)
        q = [draft_probs(self.vocab.expand(row), context, params) for row in logits[:max(depths)]]
        ranked = [torch.topk(row, max(shape.tokens) + 1) for row in q]  # (values, ids) per depth
        tokens = [int(ranked[d - 1].indices[rank]) for d, rank in zip(depths, shape.tokens)]
        probs = [float(ranked[d - 1].values[rank]) for d, rank in zip(depths, shape.tokens)]
        return Draft(tokens, None, confidence=probs, parents=shape.parents)

    def memory_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.heads.parameters()) + \
            self.vocab.weight.numel() * self.vocab.weight.element_size()
