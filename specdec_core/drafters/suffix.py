"""The recipe book: draft what followed the same words before, in this request or in earlier answers
(SuffixDecoding, Oliaro et al. 2024, arXiv 2411.04975; production: Snowflake's arctic-inference, which
vLLM's `suffix` method imports).

The question every step asks: after the last m tokens of the context, what came next, and how often?

The structure is a suffix tree over token sequences, cut at depth D: the node reached from the root by a
string s stands for every position where s occurs, and its count is how many there are; its children are
the tokens that followed those occurrences. Here the tree is never built. A node is kept as what defines
it, the array of positions where s ends (what a suffix array stores as an interval), so

    the root's child for token t   = every position holding t          one vectorised scan, O(L)
    extending the match one token  = filtering those positions by the token before them   O(|node|)
    a node's children and counts   = counting the tokens right after its positions         O(|node|)

for L indexed tokens. Memory is the tokens themselves (int64, in an array grown by doubling: at most 3.2 MB
at the history's bound), against O(L·D) nodes for a tree stored node by node, which at 200k tokens would
not fit a teaching machine in Python.

Two indexes, as in the paper:
- the request's own, over prompt + output so far. Emitted tokens join it at once (arctic-inference
  likewise adds an active request's response to its tree as it grows), so a request copies from its own
  earlier answer turns and from the prompt as n-gram lookup does, but sized and weighted by counts;
- `SuffixHistory`, one index over the outputs of completed requests, shared by every request of a run like
  serving's survival statistics, bounded in tokens (the oldest request evicted first). By default a
  request joins it when it finishes (`SuffixHistory.add`), never from a warm-up. With `suffix_in_flight`
  its answer joins as it grows, as in arctic-inference's global tree: the request then also meets its own
  answer there, and requests served together meet each other's partial answers.

Speculation (the paper's §3.2): for each match length m = 1, 2, … (stopping at the first length that does
not occur) take the node of the context's last m tokens and grow a proposal from it of at most
min(k, ⌊m·factor + offset⌋) tokens, a longer match earning a longer draft. The tree is cut at depth D, so a
draft reaches at most D − m tokens past its match; and, as in arctic-inference, m stays below the
context's length (the whole context is never the match):
- chain: follow the most frequent child while the path's probability, the product of count(child) /
  count(node), stays at or above `min_prob`;
- tree: best first over all children by path probability, the same floor, the same number of nodes.
A proposal's score is the sum of its nodes' path probabilities, its expected accepted length if the
counts were the target's probabilities; the best score over both indexes and all m is proposed (within
an index a tie goes to the longer match; between the two, to the request's own, as in arctic-inference).

Paying for itself (`suffix_cut`, off by default, as in arctic-inference; `mix` always cuts the book's
proposal, to weigh it against its other sources): a score is an expected length only if the counts were
the target's probabilities, and every drafted token makes the verify forward longer. So, as the n-gram
lookup does, the drafter can keep a running conditional survival per match length (what the target
actually accepted after a match of m tokens) and verify only the prefix of the proposal that pays under
this machine's measured verify ratios, or nothing when a plain step pays more. The proposal is computed
either way (its cost is paid before the choice, so the cut charges it nothing). Chains only: a tree's
size is its own. Measured on an AMD EPYC (BENCHMARKS §19d) the cut cost more than it saved: the
min_prob floor already stops most drafts that would fail, and a verify row is cheap there.

The drafts are chosen, not sampled: q is one-hot (`Draft.q` None), so sampled verification accepts a
draft x with the target's p(x) and resamples from p with x removed (`sampling`, `trees/verify.py`):
lossless at any temperature. The confidence of each draft is its conditional frequency, known from the
counts before the token is chosen.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

from ..drafting import Draft, Drafter
from ..errors import SpecDecError
from ..sampling import SamplingParams
from ..theory import best_length
from .ngram import SurvivalStats

SEPARATOR = -1  # between indexed sequences: no match and no continuation crosses it
# The cut's survival is kept per match length m up to this; longer matches share the last row.
MATCH_ROWS = 8
SMALL_NODE = 48  # nodes of up to this many occurrences count their children in plain Python


@dataclass(frozen=True)
class SuffixOptions:
    """The recipe book's knobs (`suffix`), named as in the paper and arctic-inference."""

    suffix_depth: int = 24  # D: the longest match looked for (arctic's max_tree_depth)
    suffix_factor: float = 1.0  # a match of m tokens may propose up to m·factor + offset (max_spec_factor)
    suffix_offset: float = 0.0  # (max_spec_offset)
    suffix_min_prob: float = 0.1  # a proposal stops where its path probability falls below this (min_token_prob)
    suffix_history: int = 200_000  # tokens the history keeps; the oldest request is evicted first
    # the answer so far joins the history as it grows (arctic-inference's add_active_response: a request
    # meets its own answer there, concurrent requests each other's); off: only finished answers join
    suffix_in_flight: bool = False
    suffix_impl: str = "lab"  # "lab" (this file) or "arctic" (arctic-inference's cache, `suffix_arctic.py`)
    # verify only as much of a chain as its record pays for on this machine (see the docstring); off: all of it
    suffix_cut: bool = False

    def validate(self, num_layers: int) -> None:
        if self.suffix_depth < 1:
            raise SpecDecError(f"suffix-depth must be >= 1 (got {self.suffix_depth})")
        if self.suffix_factor < 0 or self.suffix_offset < 0:
            raise SpecDecError("suffix-factor and suffix-offset must be >= 0")
        if not 0 <= self.suffix_min_prob <= 1:
            raise SpecDecError(f"suffix-min-prob must lie in [0, 1] (got {self.suffix_min_prob})")
        if self.suffix_history < 0:
            raise SpecDecError(f"suffix-history must be >= 0 tokens (got {self.suffix_history})")
        if self.suffix_impl not in ("lab", "arctic"):
            raise SpecDecError(f"suffix-impl must be lab or arctic (got {self.suffix_impl!r})")


@dataclass
class Proposal:
    """One candidate draft and where it came from (what the inspector shows)."""

    tokens: list[int]
    parents: list[int] | None  # None: a chain
    confidence: list[float]  # count(node) / count(its parent) of every drafted node
    score: float  # the sum of the nodes' path probabilities
    match: int  # m: how many context tokens the match covers
    occurrences: int  # count of the matched node: how often those m tokens occur in the index
    index: str  # "request" or "history"


def _ends(tokens: np.ndarray, context: list[int], depth: int):
    """The nodes along the context's tail, shortest match first: (m, positions just after each occurrence
    of context[-m:]) for m = 1 … depth, stopping at the first m that does not occur. The context's own
    tail, if indexed, is an occurrence like any other (with nothing after it)."""
    ends = np.flatnonzero(tokens == context[-1]) + 1  # the root's child for the last token: O(L)
    m = 1
    while ends.size and m <= min(depth, len(context) - 1):
        yield m, ends
        if m == len(context) - 1:
            return
        starts = ends - m - 1  # the token before each occurrence must be context[-m-1]
        keep = starts >= 0
        ends = ends[keep]
        ends = ends[tokens[starts[keep]] == context[-m - 1]]  # O(|node|)
        m += 1


def _children(tokens: np.ndarray, ends: np.ndarray, first_only: bool = False) -> list[tuple[int, np.ndarray]]:
    """A node's children, most frequent first: (token, its positions' ends). Ties in count are broken as
    arctic-inference's tree orders its children (so the two propose alike): among children seen once, the
    one met first; among children seen c ≥ 2 times, the one whose c-th occurrence came last (a child moves
    to the front of its new count's group each time its count grows). first_only: just the first (a chain's)."""
    inside = ends[ends < tokens.size]
    if inside.size == 1:  # one occurrence (most long matches): one child, no counting
        token = int(tokens[inside[0]])
        return [] if token == SEPARATOR else [(token, inside + 1)]
    if inside.size <= SMALL_NODE:  # counted in Python: cheaper than numpy's sorts on a few dozen tokens
        seen: dict[int, list[int]] = {}  # token -> [count, first index, last index]
        following = tokens[inside].tolist()
        for j, token in enumerate(following):
            if token != SEPARATOR:
                entry = seen.setdefault(token, [0, j, j])
                entry[0] += 1
                entry[2] = j
        ranked = sorted(seen, key=lambda t: (-seen[t][0], -seen[t][2] if seen[t][0] > 1 else seen[t][1]))
        return [(token, inside[[j for j, u in enumerate(following) if u == token]] + 1)
                for token in ranked[:1 if first_only else None]]
    following = tokens[inside]
    inside, following = inside[following != SEPARATOR], following[following != SEPARATOR]
    if not following.size:
        return []
    values, first, counts = np.unique(following, return_index=True, return_counts=True)  # `inside` is sorted
    last = following.size - 1 - np.unique(following[::-1], return_index=True)[1]
    order = np.lexsort((np.where(counts > 1, -last, first), -counts))
    return [(int(values[i]), inside[following == values[i]] + 1) for i in order[:1 if first_only else None]]


def _chain(tokens: np.ndarray, ends: np.ndarray, budget: int, min_prob: float) -> tuple[list[int], list[float], float]:
    """Follow the most frequent child while the path probability stays >= min_prob: O(budget · |node|)."""
    drafted, confidence, score, prob = [], [], 0.0, 1.0
    for _ in range(budget):
        children = _children(tokens, ends, first_only=True)
        if not children:
            break
        token, child = children[0]
        step = child.size / ends.size
        if prob * step < min_prob:
            break
        prob *= step
        drafted.append(token)
        confidence.append(step)
        score += prob
        ends = child
    return drafted, confidence, score


def _tree(tokens: np.ndarray, ends: np.ndarray, budget: int, min_prob: float,
          max_depth: int) -> tuple[list[int], list[int], list[float], float]:
    """Best first by path probability, every child at or above min_prob a candidate, `budget` nodes at most
    `max_depth` below the match. Nodes come out parents first (a child is pushed only once its parent is taken)."""
    drafted, parents, confidence, score = [], [], [], 0.0
    frontier: list[tuple[float, int, int, int, float, np.ndarray, int]] = []  # (-prob, order, token, parent, step, ends, depth)
    order = 0

    def push(parent: int, node_ends: np.ndarray, prob: float, depth: int) -> None:
        nonlocal order
        if depth >= max_depth:
            return  # the tree is cut there
        for token, child in _children(tokens, node_ends):
            step = child.size / node_ends.size
            if prob * step < min_prob:
                break  # children come most frequent first: the rest are rarer still
            heapq.heappush(frontier, (-prob * step, order, token, parent, step, child, depth + 1))
            order += 1

    push(-1, ends, 1.0, 0)
    while frontier and len(drafted) < budget:
        negative, _, token, parent, step, child, depth = heapq.heappop(frontier)
        drafted.append(token)
        parents.append(parent)
        confidence.append(step)
        score += -negative
        push(len(drafted) - 1, child, -negative, depth)
    return drafted, parents, confidence, score


class SuffixIndex:
    """Token sequences laid end to end, each closed by a separator: the implicit suffix tree. The array
    grows by doubling, so appending to the last sequence costs O(appended) amortised."""

    def __init__(self) -> None:
        self._buffer = np.empty(0, dtype=np.int64)
        self._size = 0  # tokens of _buffer in use

    @property
    def tokens(self) -> np.ndarray:
        return self._buffer[:self._size]

    def _reserve(self, n: int) -> None:
        if self._size + n > self._buffer.size:
            grown = np.empty(max(2 * self._buffer.size, self._size + n, 256), dtype=np.int64)
            grown[:self._size] = self.tokens
            self._buffer = grown

    def extend(self, tokens: list[int]) -> None:
        """Append tokens to the last sequence (the request's own index grows by its emitted tokens)."""
        if not self._size:
            self._reserve(1)
            self._buffer[0], self._size = SEPARATOR, 1  # an empty sequence, closed
        self._reserve(len(tokens))
        end = self._size - 1 + len(tokens)  # written over the closing separator, which moves to the end
        self._buffer[self._size - 1:end] = tokens
        self._buffer[end] = SEPARATOR
        self._size = end + 1

    def nbytes(self) -> int:
        return int(self._buffer.nbytes)  # the array as allocated (up to twice the tokens held)

    def propose(self, context: list[int], k: int, options: SuffixOptions, tree: bool, index: str) -> Proposal | None:
        """The best proposal over every match length (see the module docstring), or None."""
        best: Proposal | None = None
        tokens = self.tokens
        previous = None  # (node size, length limit, chain) of the last match length's chain
        for m, ends in _ends(tokens, context, options.suffix_depth):
            reach = options.suffix_depth - m  # the tree is cut at depth D
            # (1e-6: m·factor + offset on a whole number must not floor below it, as in arctic-inference)
            budget = min(k, math.floor(m * options.suffix_factor + options.suffix_offset + 1e-6))
            if budget < 1 or reach < 1:
                continue
            if tree:
                drafted, parents, confidence, score = _tree(tokens, ends, budget, options.suffix_min_prob, reach)
            else:
                limit = min(budget, reach)
                # A longer match with the same occurrences is the same node's chain again: reuse it when the
                # limit is the same or did not stop it (the common case past m = k; saves most of the counting).
                if previous and previous[0] == ends.size and (previous[1] == limit or len(previous[2][0]) < min(limit, previous[1])):
                    chain = previous[2]
                else:
                    chain = _chain(tokens, ends, limit, options.suffix_min_prob)
                previous = (ends.size, limit, chain)
                (drafted, confidence, score), parents = chain, None
            if drafted and (best is None or score >= best.score):  # >=: a tie goes to the longer match
                best = Proposal(drafted, parents, confidence, score, m, int(ends.size), index)
        return best


class SuffixHistory(SuffixIndex):
    """The outputs of earlier requests, shared by all requests of a run; at most `max_tokens` tokens, the
    oldest request evicted first. `bench --history run` keeps one for a whole run; `fresh` gives every
    prompt an empty one. An answer joins when its request finishes (`add`) or, with `suffix_in_flight`,
    as it grows (`open`, then `grow` every step, as arctic-inference's global tree does)."""

    def __init__(self, max_tokens: int = SuffixOptions.suffix_history) -> None:
        super().__init__()
        self.max_tokens = max_tokens
        self._parts: list[list[int]] = []  # each answer's tokens, oldest first (what eviction and a rebuild need)
        self._slots: deque[int] = deque()  # each part's slot id (an in-flight answer grows its own)
        self._next_slot = 0
        self._held = 0  # tokens in _parts

    @classmethod
    def of(cls, answers: list[list[int]], max_tokens: int = SuffixOptions.suffix_history) -> "SuffixHistory":
        """A history holding these answers, oldest first."""
        history = cls(max_tokens)
        for answer in answers:
            history.add(list(answer))
        return history

    def answers(self) -> list[list[int]]:
        """The answers held, oldest first (copies)."""
        return [list(part) for part in self._parts]

    def open(self) -> int:
        """A slot for an answer that joins as it grows; its id for `grow`."""
        slot, self._next_slot = self._next_slot, self._next_slot + 1
        self._parts.append([])
        self._slots.append(slot)
        self._reserve(1)
        self._buffer[self._size], self._size = SEPARATOR, self._size + 1
        return slot

    def grow(self, slot: int, tokens: list[int]) -> None:
        """Append to the answer of `slot` (nothing if it has been evicted already). The newest answer grows
        in place; an older one (requests served together) rebuilds the array: O(L)."""
        if not tokens or slot not in self._slots:
            return
        i = self._slots.index(slot)
        self._parts[i] += tokens
        self._held += len(tokens)
        if i == len(self._parts) - 1:
            super().extend(tokens)
        self._evict(rebuild=i != len(self._parts) - 1)

    def add(self, output: list[int]) -> None:
        """A request finished: index its output (the prompt is not kept: it is the learner's, not the model's)."""
        if not output or self.max_tokens == 0:
            return
        self.grow(self.open(), output[-self.max_tokens:])

    def _evict(self, rebuild: bool) -> None:
        while self._held > self.max_tokens:  # the oldest whole request goes first
            self._held -= len(self._parts.pop(0))
            self._slots.popleft()
            rebuild = True
        if rebuild:
            self._size = 0
            for part in self._parts:
                self._reserve(len(part) + 1)
                self._buffer[self._size:self._size + len(part)] = part
                self._buffer[self._size + len(part)] = SEPARATOR
                self._size += len(part) + 1

    def clear(self) -> None:
        self._parts.clear()
        self._slots.clear()
        self._held = self._size = 0

    @property
    def size(self) -> int:
        """Tokens held."""
        return self._held


class SuffixDrafter(Drafter):
    """Drafts from the request's own index and the shared history, whichever proposal scores higher;
    with `verify_ratios` (the cut, chains only) only the prefix of it that pays on this machine."""

    name = "suffix"

    def __init__(self, options: SuffixOptions | None = None, history: SuffixHistory | None = None,
                 tree: bool = False, verify_ratios: dict[int, float] | None = None) -> None:
        """verify_ratios: d -> the measured cost of verifying d drafts over a plain step, for the cut
        (None: propose in full, as arctic-inference does)."""
        self.options = options or SuffixOptions()
        # A shared history is reported once by its owner (the engine, the bench run), not by every request.
        self.owns_history = history is None
        self.history = history if history is not None else SuffixHistory(self.options.suffix_history)
        self.tree = tree
        self.verify_ratios = None if tree else verify_ratios
        self.reset([])

    def reset(self, prompt_ids: list[int]) -> None:
        self.own = SuffixIndex()
        self.own.extend(prompt_ids)
        self.indexed = len(prompt_ids)  # tokens of the context the own index holds
        self.output: list[int] = []
        self.slot: int | None = None  # in flight: the history's slot this answer grows (opened by its first token)
        self.last: Proposal | None = None  # the pending proposal, for the inspector
        self.survival = SurvivalStats()  # the cut's record: conditional survival per match-length row
        self.pending: tuple[int, int] | None = None  # (row, drafted) of a cut proposal awaiting verification
        self.rate = 0.0  # expected tokens per unit of target-forward time of the pending draft (mix weighs it)

    def _take(self, tokens: list[int]) -> None:
        """Output the request emitted joins its own index at once (arctic-inference likewise grows an
        active request's tree as its response grows)."""
        self.own.extend(tokens)
        self.indexed += len(tokens)
        self.output += tokens
        if self.options.suffix_in_flight and tokens:
            if self.slot is None:
                self.slot = self.history.open()
            self.history.grow(self.slot, tokens)

    def propose(self, context: list[int], k: int, params: SamplingParams, generator: torch.Generator) -> Draft:
        # The first token comes from the prompt's forward, which no drafter observes: the context has it.
        self._take(context[self.indexed:])
        self.pending, self.rate = None, 0.0
        candidates = [self.own.propose(context, k, self.options, self.tree, "request"),
                      self.history.propose(context, k, self.options, self.tree, "history")]
        found = [c for c in candidates if c is not None]
        # the highest score; a tie goes to the request's own index (listed first), as in arctic-inference
        self.last = max(found, key=lambda c: c.score, default=None)
        if self.last is None:
            return Draft([], None)  # nothing recalled: a plain step
        last = self.last
        tokens, confidence = last.tokens, last.confidence
        if self.verify_ratios is not None:
            row = min(last.match, MATCH_ROWS)
            self.rate, d = best_length(self.survival.confidence(row, len(tokens)), 0.0, self.verify_ratios)
            if self.rate < 1.0:  # a plain step pays more than any prefix of it
                self.rate = 0.0
                return Draft([], None)
            tokens, confidence, self.pending = tokens[:d], confidence[:d], (row, d)
        return Draft(tokens, None, confidence=confidence, parents=last.parents,
                     source=f"suffix:{last.index}:{last.match}:{last.occurrences}")

    def withdraw(self) -> None:
        """The pending proposal will not be verified (`mix` chose another source): no evidence for the cut."""
        self.pending = None

    def observe(self, accepted: int, emitted: list[int], hidden: dict[int, torch.Tensor],
                verified: int | None = None) -> None:
        if self.pending is not None:
            row, drafted = self.pending
            self.survival.update(row, drafted if verified is None else verified, accepted)
        self.pending = None
        self._take(emitted)

    def finish(self) -> None:
        """The request is done: its output joins the shared history (a request that stopped at its first
        token, before any proposal, adds nothing: no drafter saw that token)."""
        if not self.options.suffix_in_flight:  # (in flight, it has joined already)
            self.history.add(self.output)

    def memory_bytes(self) -> int:
        return int(self.own.nbytes()) + (self.history.nbytes() if self.owns_history else 0)
