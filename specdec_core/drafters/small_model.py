"""A separate small causal LM as the drafter: same tokenizer, its own KV cache.

`early-exit` (below) fills it with the target's first layers, untrained; `draft` (draft.py) with a
small LM distilled from the target, whose output head covers a reduced vocabulary (vocab.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import LlamaForCausalLM

from .. import llama
from ..errors import SpecDecError
from ..kvcache import KVCache
from ..models import LoadedModel
from ..sampling import SamplingParams
from ..drafting import Draft, Drafter, choose_draft, draft_chain, draft_probs, model_draft, tree_draft
from ..trees import TreeSize, expand_tree
from .vocab import ReducedVocab


class DraftModelDrafter(Drafter):
    """Drafts k tokens autoregressively with a small model; q is its processed distribution."""

    def __init__(self, model: torch.nn.Module, device: torch.device, name: str = "draft",
                 dynamic_k: float | None = None, vocab: ReducedVocab | None = None,
                 owned: torch.nn.Module | None = None, tree: TreeSize | None = None) -> None:
        """tree: draft EAGLE-2's dynamic tree of that size (`trees/build.py`), not a chain."""
        llama.check_supported(model)
        self.tree = tree
        self.model = model.eval()
        self.device = device
        self.name = name
        self.dynamic_k = dynamic_k  # stop drafting when q's top probability falls below this
        self.vocab = vocab  # the model's head speaks only these N tokens (None: the full vocabulary)
        self.owned = owned  # the weights this drafter adds to the target's (None: all borrowed, no extra memory)
        self.cache = KVCache()
        self.cached_ids: list[int] = []  # tokens whose keys/values are in self.cache

    def reset(self, prompt_ids: list[int]) -> None:
        self.cache = KVCache()
        self.cached_ids = []

    @torch.inference_mode()
    def _feed(self, ids: list[int]) -> torch.Tensor:
        logits, _ = llama.forward(self.model, self.cache, torch.tensor([ids], device=self.device), last_only=True)
        self.cached_ids.extend(ids)
        return self._full(logits[0, -1])

    def _full(self, logits: torch.Tensor) -> torch.Tensor:
        """The model's last logits (V,) or (N,) -> full-vocabulary float32 logits (V,), -inf outside the subset."""
        return self.vocab.expand(logits) if self.vocab is not None else logits.float()

    def _sync_cache(self, context: list[int]) -> torch.Tensor:
        """Reuse the cached prefix shared with `context`, feed the rest, return next-token logits."""
        common = 0
        limit = min(len(self.cached_ids), len(context) - 1)  # always feed >= 1 token to get logits
        while common < limit and self.cached_ids[common] == context[common]:
            common += 1
        if len(self.cached_ids) > common:
            self.cache.crop(-(len(self.cached_ids) - common))
            del self.cached_ids[common:]
        return self._feed(context[common:])

    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator) -> Draft:
        first = self._sync_cache(context)
        if self.tree:
            return self._propose_tree(first, context, k, params)
        # Position 0 reads the synced cache's logits; every later one feeds the draft before it.
        return model_draft(*draft_chain(lambda i, prev: first if i == 0 else self._feed([prev]), context, k, params,
                                        generator, self.dynamic_k))

    @torch.inference_mode()
    def _propose_tree(self, first: torch.Tensor, context: list[int], k: int, params: SamplingParams) -> Draft:
        """Grow the tree level by level (one forward of this model per level, over that level's expanded
        nodes, with the tree mask over the levels before), then forget the tree's keys/values: the next
        proposal catches the cache up with whatever the target accepted."""
        fed = 0

        def children_q(tokens: list[int], tree: list[int], paths: list[list[int]]) -> torch.Tensor:
            nonlocal fed
            logits, _ = llama.forward(self.model, self.cache, torch.tensor([tokens], device=self.device), tree=tree)
            fed = len(tree)
            return torch.stack([draft_probs(self._full(row), context + path, params) for row, path in zip(logits[0], paths)])

        tree = expand_tree(draft_probs(first, context, params), children_q, k, self.tree.cap)
        if fed:
            self.cache.crop(-fed)
        return tree_draft(tree, self.tree)

    @classmethod
    def propose_batch(cls, drafters: list[Drafter], contexts: list[list[int]], ks: list[int],
                      params: list[SamplingParams], generators: list[torch.Generator]) -> list[Draft]:
        """Draft for many requests with one batched forward of the draft model per drafted position.

        Each request first catches its own cache up with its context (the tokens accepted since its
        last proposal), then its cache is copied into one ragged cache and the requests draft side by
        side, every row of each forward one request's latest token (`batch.py`)."""
        from ..batch import RaggedCache, batch_forward

        models = {id(d.model) for d in drafters}
        if len(drafters) < 2 or len(models) > 1 or any(d.tree for d in drafters):  # trees: one request at a time
            return super().propose_batch(drafters, contexts, ks, params, generators)
        model = drafters[0].model
        logits = [d._sync_cache(c) for d, c in zip(drafters, contexts)]
        ragged = RaggedCache(model, slots=len(drafters), capacity=max(len(d.cached_ids) for d in drafters) + max(ks) + 1)
        with torch.inference_mode():
            for slot, d in enumerate(drafters):
                n = len(d.cached_ids)
                for layer in range(len(d.cache.keys)):
                    keys, values = d.cache.view(layer)
                    ragged.keys[layer][slot, :, :n] = keys[0]
                    ragged.values[layer][slot, :, :n] = values[0]
                ragged.lengths[slot] = n
        tokens: list[list[int]] = [[] for _ in drafters]
        qs: list[list[torch.Tensor]] = [[] for _ in drafters]
        drafting = [k > 0 for k in ks]
        for i in range(max(ks)):
            for r, d in enumerate(drafters):
                if drafting[r]:
                    chosen = choose_draft(logits[r], contexts[r] + tokens[r], params[r], generators[r], d.dynamic_k)
                    if chosen is None:
                        drafting[r] = False
                        continue
                    tokens[r].append(chosen[0])
                    qs[r].append(chosen[1])
                    drafting[r] = len(tokens[r]) < ks[r]
            if not any(drafting):
                break
            # Rows that stopped still feed a token (their last): simpler than compacting, never read.
            rows = [[t[-1] if t else c[-1]] for t, c in zip(tokens, contexts)]
            with torch.inference_mode():
                out, _ = batch_forward(model, ragged, 0, rows)
            logits = [drafters[0]._full(o[-1]) for o in out]
        return [model_draft(t, q) for t, q in zip(tokens, qs)]

    def memory_bytes(self) -> int:
        cache = self.cache.nbytes()
        weights = 0 if self.owned is None else sum(t.numel() * t.element_size()
                                                   for t in (*self.owned.parameters(), *self.owned.buffers()))
        head = 0 if self.vocab is None else self.vocab.weight.numel() * self.vocab.weight.element_size()
        return cache + weights + head


@dataclass(frozen=True)
class EarlyExitOptions:
    """`early-exit`'s one knob: how many of the target's first layers draft."""

    early_exit_layers: int = 4

    def validate(self, num_layers: int) -> None:
        if not 1 <= self.early_exit_layers < num_layers:
            raise SpecDecError(f"early-exit layers must be between 1 and {num_layers - 1} (got {self.early_exit_layers})")


def early_exit_model(lm: LoadedModel, layers: int) -> LlamaForCausalLM:
    """The target's first `layers` decoder layers + its final norm + output head, weights shared.

    Untrained as a drafter: the final norm and head were trained to read layer 30, not layer 4,
    which is why its acceptance is low (seed misconception 3: smaller is not automatically better).
    """
    config = lm.model.config.__class__(**{**lm.model.config.to_dict(), "num_hidden_layers": layers})
    with torch.device("meta"):  # build the skeleton without allocating weights we replace anyway
        draft = LlamaForCausalLM(config)
    target = lm.model
    draft.model.embed_tokens = target.model.embed_tokens
    draft.model.layers = torch.nn.ModuleList(target.model.layers[:layers])
    draft.model.norm = target.model.norm
    draft.model.rotary_emb = target.model.rotary_emb
    draft.lm_head = target.lm_head
    draft.generation_config = target.generation_config
    return draft.eval()
