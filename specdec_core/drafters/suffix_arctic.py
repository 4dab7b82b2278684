"""`spec:suffix@impl=arctic`: the production implementation of SuffixDecoding as the lab's peer.

Snowflake's arctic-inference (the `suffix_decoding` module vLLM's `suffix` method imports) keeps a C++
suffix tree per active request over its prompt and response, and one global tree over responses. Here
its `SuffixDecodingCache` proposes inside the lab's own verify loop, so `suffix` and this peer differ
only in the proposer: the same verification, the same k, factor, offset, min_token_prob and tree mode.
`make arctic` builds it into SPECDEC_CACHE/arctic (nothing in the venv).

Two differences of semantics, both arctic's by design, which a comparison counts by cause:
- arctic adds an active request's response to the global tree as it grows (`add_active_response`), so
  a request also meets its own answer there and concurrent requests see each other's partial answers;
  the lab's `SuffixHistory` takes a response only once the request has finished;
- arctic bounds its global tree by a number of requests, the lab by tokens; on a tie in score arctic
  keeps the request's own tree, the lab the longer match first.
"""
from __future__ import annotations

import itertools
import sys

import torch

from ..drafting import Draft, Drafter
from ..errors import SpecDecError
from ..models import cache_dir
from ..sampling import SamplingParams
from .suffix import SuffixOptions

_ids = itertools.count()


def arctic_cache_class():
    """arctic-inference's SuffixDecodingCache, from SPECDEC_CACHE/arctic; a one-line error when not built."""
    folder = str(cache_dir() / "arctic")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        from arctic_inference.suffix_decoding import SuffixDecodingCache
    except ImportError as err:
        raise SpecDecError(f"spec:suffix@impl=arctic needs arctic-inference's suffix decoding: run `make arctic` ({err})")
    return SuffixDecodingCache


class ArcticHistory:
    """A SuffixDecodingCache shared like `SuffixHistory`: its global tree is the history."""

    def __init__(self, options: SuffixOptions) -> None:
        self.cache = arctic_cache_class()(max_tree_depth=options.suffix_depth, max_cached_requests=-1)

    def add(self, output: list[int]) -> None:
        """A finished response, e.g. a resumed bench run's (as `SuffixHistory.add`)."""
        request = next(_ids)
        self.cache.start_request(request, [])
        self.cache.add_active_response(request, list(output))
        self.cache.stop_request(request)


class ArcticSuffixDrafter(Drafter):
    """Proposes with arctic's cache; the request is one `start_request` … `stop_request` of it."""

    name = "suffix"

    def __init__(self, options: SuffixOptions, history: ArcticHistory | None = None, tree: bool = False) -> None:
        self.options = options
        self.history = history if history is not None else ArcticHistory(options)
        self.tree = tree
        self.request: int | None = None
        self.score = 0.0  # the last proposal's score (sum of its path probabilities), for a comparison
        self.reset([])

    def reset(self, prompt_ids: list[int]) -> None:
        cache = self.history.cache
        if self.request is not None and self.request in cache.active_requests:
            cache.stop_request(self.request)
        self.request = next(_ids)
        cache.start_request(self.request, list(prompt_ids))
        self.indexed = len(prompt_ids)

    def _take(self, tokens: list[int]) -> None:
        if tokens:
            self.history.cache.add_active_response(self.request, list(tokens))
            self.indexed += len(tokens)

    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator) -> Draft:
        self._take(context[self.indexed:])  # the prefill's token, which no drafter observes
        o = self.options
        draft = self.history.cache.speculate(self.request, context[-o.suffix_depth:], max_spec_tokens=k,
                                             max_spec_factor=o.suffix_factor, max_spec_offset=o.suffix_offset,
                                             min_token_prob=o.suffix_min_prob, use_tree_spec=self.tree)
        self.score = draft.score
        if not draft.token_ids:
            return Draft([], None)
        # arctic reports each node's path probability; the engine's confidence is the conditional one
        confidence = [p / (draft.probs[parent] if parent >= 0 else 1.0) for p, parent in zip(draft.probs, draft.parents)]
        return Draft(list(draft.token_ids), None, confidence=confidence,
                     parents=list(draft.parents) if self.tree else None, source=f"suffix:arctic:{draft.match_len}:0")

    def observe(self, accepted: int, emitted: list[int], hidden: dict[int, torch.Tensor],
                verified: int | None = None) -> None:
        self._take(emitted)

    def finish(self) -> None:
        self.history.cache.stop_request(self.request)  # its response stays in the global tree
