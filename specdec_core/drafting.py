"""The one small interface every drafter implements (cf. transformers' CandidateGenerator), and the
draft loop the model drafters share.

A drafter proposes up to k tokens with their q-distributions, then observes what the target
accepted. The decode loop knows nothing else about it, so adding a drafter touches no loop. The
interface lives in the core beside the loop that calls it; the drafters themselves (`drafters/`) sit
one layer up and the loop never imports them.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable

import torch

from .sampling import SamplingParams, logits_to_probs, penalise_repeats, sample
from .trees.build import Tree, TreeSize


@dataclass
class Draft:
    tokens: list[int]  # at most k proposed token ids (may be empty: then the step is a plain AR step)
    q: torch.Tensor | None  # (len(tokens), V) draft distributions; None = deterministic one-hot proposals
    overhead_s: float = 0.0  # time spent *simulating* a drafter (sim's oracle), excluded from draft time
    # confidence[i]: the drafter's estimate that tokens[i] survives verification given tokens[:i] did
    # (a conditional survival a_i). Schedulers multiply them into prefix survival to choose how many
    # drafts to verify. It must be computable *before* tokens[i] is drawn (e.g. the top probability of
    # q[i], never q[i][tokens[i]]): a verify length that depends on the drafted token itself biases
    # sampling (serving/schedulers.py). None: no estimate (schedulers then verify the whole draft).
    confidence: list[float] | None = None
    # the drafter that proposed (None: the request's drafter itself; `mix` sets it), or for `suffix` where it
    # recalled the draft: "suffix:INDEX:M:N", INDEX request or history, a match of M tokens seen N times
    source: str | None = None
    # guess[i]: a block drafter's parallel backbone's own choice at position i, before the serial Markov
    # head corrected it with the token before (what the inspector shows; None for other drafters)
    guess: list[int] | None = None
    # A tree (`trees/`): parents[i] is the node tokens[i] continues (-1: the context's last token), nodes
    # parents-first, siblings by rank; their q is then None (the nodes were chosen, not sampled) and
    # confidence[i] is q of node i at its parent. None: a chain.
    parents: list[int] | None = None

    @property
    def is_tree(self) -> bool:
        return self.parents is not None and bool(self.tokens)


class Drafter(ABC):
    """Proposes draft tokens for one request; holds that request's drafter state (e.g. its KV cache)."""

    name: str = "drafter"
    # Target layers whose hidden states this drafter wants from each verification forward
    # (parallel heads / feature-level drafters read them; the forward is not repeated for them).
    hidden_layers: tuple[int, ...] = ()

    def reset(self, prompt_ids: list[int]) -> None:
        """Start a new request."""

    def prefill(self, hidden: dict[int, torch.Tensor]) -> None:
        """Told once, after the prompt's forward: the requested hidden states of every prompt position
        (layer -> (prompt length, H)), from that same forward. Feature-level drafters start from them."""

    @abstractmethod
    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator) -> Draft:
        """Propose up to k tokens that continue `context` (prompt + output so far)."""

    @classmethod
    def propose_batch(cls, drafters: list["Drafter"], contexts: list[list[int]], ks: list[int],
                      params: list[SamplingParams], generators: list[torch.Generator]) -> list[Draft]:
        """Propose for many requests at once, one drafter (one request's state) each. The serving
        engine calls this once per step and drafter class; a model drafter overrides it with one
        batched forward instead of a forward per request."""
        return [d.propose(c, k, p, g) for d, c, k, p, g in zip(drafters, contexts, ks, params, generators)]

    def observe(self, accepted: int, emitted: list[int], hidden: dict[int, torch.Tensor],
                verified: int | None = None) -> None:
        """Told after verification: how many drafts were accepted, the tokens appended, the requested
        hidden states of the verification forward (layer -> (verified+1, H)), and how many of the
        proposed drafts were verified (None: all; a serving scheduler may verify fewer)."""

    def finish(self) -> None:
        """Told once, when the request has stopped (after its last `observe`). A drafter that learns
        across requests (suffix: its shared history) takes the finished output here."""

    def memory_bytes(self) -> int:
        """Bytes this drafter holds beyond the target (its own weights and caches)."""
        return 0


def draft_probs(logits: torch.Tensor, history: list[int], params: SamplingParams) -> torch.Tensor:
    """q for one row of a drafter's full-vocabulary logits (V,) continuing `history`: exactly the processing
    p will get (repetition penalty on the same history, temperature, top-k, top-p), so p/q compare like
    with like."""
    return logits_to_probs(penalise_repeats(logits, history, params.repetition_penalty), params)


def choose_draft(logits: torch.Tensor, history: list[int], params: SamplingParams, generator: torch.Generator,
                 dynamic_k: float | None = None) -> tuple[int, torch.Tensor] | None:
    """A model drafter's next token and its q from its logits (V,), or None where dynamic k stops drafting
    (q's top probability below the threshold)."""
    q = draft_probs(logits, history, params)
    if dynamic_k is not None and float(q.max()) < dynamic_k:
        return None
    return (int(torch.argmax(q)) if params.greedy else sample(q, generator)), q


def draft_chain(logits_at: Callable[[int, int], torch.Tensor], context: list[int], k: int, params: SamplingParams,
                generator: torch.Generator, dynamic_k: float | None = None) -> tuple[list[int], list[torch.Tensor]]:
    """The autoregressive draft loop every model drafter runs: up to k tokens, each chosen from the
    drafter's full-vocabulary logits (V,) for position i given the token before it, `logits_at(i, prev)`
    (prev = the context's last token at i = 0, else draft i-1). Called lazily, once per drafted position,
    so a drafter never computes logits it will not use (nothing after the last draft, nothing after
    dynamic k stops). Returns the drafted tokens and their q rows."""
    tokens: list[int] = []
    qs: list[torch.Tensor] = []
    prev = context[-1]
    for i in range(k):
        chosen = choose_draft(logits_at(i, prev), context + tokens, params, generator, dynamic_k)
        if chosen is None:
            break
        prev = chosen[0]
        tokens.append(prev)
        qs.append(chosen[1])
    return tokens, qs


def tree_draft(tree: Tree, size: TreeSize) -> Draft:
    """A tree drafter's Draft, cut to its size. The nodes were chosen, not sampled: q is None (one-hot
    proposals, `trees/verify.py`); confidence is each node's q at its parent."""
    tree = size.cut(tree)
    return Draft(tree.tokens, None, confidence=tree.probs, parents=tree.parents)


def model_draft(tokens: list[int], qs: list[torch.Tensor]) -> Draft:
    """A model drafter's Draft. Confidence: q's top probability, known before the token is drawn."""
    return Draft(tokens, torch.stack(qs) if qs else None, confidence=[float(q.max()) for q in qs])
