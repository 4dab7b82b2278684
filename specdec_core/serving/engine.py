"""Continuous batching: many requests share each target forward, join between steps and leave when done.

One `step()`:
1. admit: every request that has arrived gets a slot and its prefill, one forward each, before the
   decode step (prefill first, no chunking: a newcomer's first token comes as soon as possible, and
   the running requests wait one prefill for it, which shows in their inter-token latency);
2. draft: every spec request's drafter proposes as far as it can (`Drafter.propose_batch`, once per
   drafter class);
3. schedule: the scheduler picks each request's verify length from the drafts' confidences and the
   cost table (plain AR requests, and every request under `force_ar`, verify nothing);
4. verify: ONE packed forward over every request's last token + verified drafts (`batch.py`);
5. accept per row, exactly as the one-request loop does (`decode.py`): greedy prefix match or
   rejection sampling with the request's own random stream, then roll the row's cache back;
6. deliver the new tokens (one delivery per request per step), free the slots of finished requests.

Each request's tokens are what `decode.generate` gives for it alone: the same verify rules on the
same logits, up to float rounding of a batched matmul (the tests check greedy identity and report
the margin if a near-tie ever flips).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch

from ..decode import (DecodeState, GenerationConfig, Stopper, commit, commit_tree, emit, first_token, prefill_event,
                      VerifiedStep, step_event, tree_event, verify_row, verify_tree)
from ..costmodel import DraftCosts
from ..drafters import Draft, Drafter, NgramDrafter, SuffixHistory, drafter_options, make_drafter
from ..drafters.ngram import SurvivalStats
from ..errors import SpecDecError
from ..generation import check
from ..models import LoadedModel
from ..target import synchronize
from ..trace import Piecer, StepEvent
from ..batch import RaggedCache, batch_forward
from ..trees import row_parents
from .costs import CostTable
from .schedulers import Candidate, Scheduler


def serving_drafter(lm: LoadedModel, config: GenerationConfig, survival: SurvivalStats | None = None,
                    costs: DraftCosts | None = None, history: SuffixHistory | None = None) -> Drafter:
    """The request's drafter as serving uses it: it proposes as far as it can and the scheduler owns the
    verify length, so n-gram lookup drafts its whole match and the recipe book its whole proposal (their
    cost-aware cuts are the scheduler's job); n-gram lookup reports the survival it has seen across the
    run's requests (`survival`, shared). `costs`: what
    a drafter that weighs proposals itself (mix) is built with, measured by the engine's owner;
    `history`: the suffix drafter's shared history (None: each request starts from an empty one)."""
    if config.drafter in ("ngram", "ngram-fixed"):
        options = drafter_options(config.drafter, config.drafter_options)
        drafter = NgramDrafter(options.ngram_min, options.ngram_max, verify_ratios=None, survival=survival)
        drafter.name = config.drafter
        return drafter
    if config.drafter == "suffix":
        config = replace(config, drafter_options={**config.drafter_options, "suffix_cut": False})
    return make_drafter(config.drafter, lm, config, costs, history)


@dataclass
class StepRecord:
    """What one request did in one decode step: for metrics and for the scheduler replay."""

    drafted: int  # drafts proposed
    verified: int  # drafts verified (the scheduler's decision)
    accepted: int
    emitted: int
    confidence: list[float]  # the proposal's per-position confidences
    survived: int  # greedy only: how many of ALL proposed drafts match the target (-1 when unknown)


@dataclass
class Request:
    id: int
    prompt_ids: list[int]
    config: GenerationConfig
    arrival_s: float = 0.0
    label: str = ""  # the caller's name for it (the load test: its prompt's id)
    state: DecodeState | None = None
    stopper: Stopper | None = None
    deliveries: list[tuple[float, int]] = field(default_factory=list)  # (time, tokens delivered)
    records: list[StepRecord] = field(default_factory=list)
    finish_s: float | None = None
    error: str = ""
    events: list[StepEvent] | None = None  # the prefill and every step as the one-request loop's events (if asked)

    @property
    def output_ids(self) -> list[int]:
        return self.state.output_ids if self.state else []

    @property
    def done(self) -> bool:
        return bool(self.error) or (self.state is not None and bool(self.state.stop_reason))


@dataclass
class StepStats:
    rows: int
    tokens: int  # token rows in the verify forward
    seconds: float
    draft_s: float
    prefill_s: float
    lengths: list[int]


class ServingEngine:
    """Serves requests on one target model with one scheduler; `step()` advances every active request."""

    def __init__(self, lm: LoadedModel, scheduler: Scheduler, costs: CostTable | None = None,
                 force_ar: bool = False, clock=time.perf_counter, make_drafter=None,
                 drafter_costs: DraftCosts | None = None, history: SuffixHistory | None = None) -> None:
        """make_drafter(lm, config, survival): each request's drafter; default `serving_drafter` (drafts
        as far as it can, the scheduler cuts; built with `drafter_costs`, measured by the caller, where
        a drafter weighs proposals itself). The app's server passes decode's own drafters instead.
        `history`: one suffix history every request of this engine recalls from and adds its finished
        output to (None: none shared)."""
        self.lm = lm
        self.history = history
        self.make_drafter = make_drafter or (
            lambda lm_, config, survival: serving_drafter(lm_, config, survival, drafter_costs, history))
        self.piecer = Piecer(lm.tokenizer)
        self.scheduler = scheduler
        self.costs = costs
        self.force_ar = force_ar  # the rollback switch: every request decodes plain AR
        self.clock = clock
        self.cache = RaggedCache(lm.model)
        self.waiting: list[Request] = []
        self.active: list[Request] = []  # active[i] owns cache slot i
        self.finished: list[Request] = []
        self.steps: list[StepStats] = []
        self._next_id = 0
        self.ngram_survival = SurvivalStats()  # one table per run: every request's n-gram drafts feed it

    def submit(self, prompt: str | list[int] | list[dict], config: GenerationConfig, arrival_s: float | None = None,
               raw: bool = False, events: bool = False, label: str = "") -> Request:
        """Queue a request. A bad one is refused with its one-line error (request.error); others go on.
        events=True records its StepEvents (for traces and the app; costs a little time per step)."""
        request = Request(self._next_id, [], config, self.clock() if arrival_s is None else arrival_s, label,
                          events=[] if events else None)
        self._next_id += 1
        try:
            ids = list(prompt) if isinstance(prompt, list) and prompt and isinstance(prompt[0], int) else self.lm.encode(prompt, raw)
            if not ids:
                raise SpecDecError("the prompt is empty")
            if config.mode not in ("ar", "spec"):
                raise SpecDecError(f"serving decodes ar or spec, not {config.mode!r}")
            check(config, self.lm, len(ids))
            request.prompt_ids = ids
        except SpecDecError as err:
            request.error = str(err)
            request.finish_s = request.arrival_s
            self.finished.append(request)
            return request
        self.waiting.append(request)
        return request

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.active

    # --- one step -------------------------------------------------------------------------------

    def step(self) -> list[Request]:
        """Admit arrived requests, then one batched decode step. Returns the requests that finished."""
        prefill_s = self._admit()
        finished = self._retire([r for r in self.active if r.done])  # e.g. finished by their first token
        if self.active:
            finished += self._retire(self._decode(prefill_s))
        return finished

    def _admit(self) -> float:
        now = self.clock()
        arrived = [r for r in self.waiting if r.arrival_s <= now]
        start = self.clock()
        for request in arrived:
            self.waiting.remove(request)
            self._prefill(request)
        return self.clock() - start

    def _prefill(self, request: Request) -> None:
        config = request.config
        generator = torch.Generator(device="cpu").manual_seed(config.seed if config.seed is not None else torch.seed())
        drafter = self.make_drafter(self.lm, config, self.ngram_survival) if config.mode == "spec" and not self.force_ar else None
        if drafter:
            drafter.reset(request.prompt_ids)
        request.state = DecodeState(prompt_ids=list(request.prompt_ids), cache=None, generator=generator, drafter=drafter)
        request.stopper = Stopper(self.lm, config)
        slot = len(self.active)
        self.active.append(request)
        start = self.clock()
        hidden_layers = drafter.hidden_layers if drafter else ()
        with torch.inference_mode():
            logits, hidden = batch_forward(self.lm.model, self.cache, slot, [request.prompt_ids], hidden_layers,
                                           last_only=True)  # (1, V); {layer: (prompt length, H)}
        token, prob = first_token(request.state, config, logits[0])
        synchronize(self.lm.device)
        now = self.clock()
        if hidden_layers:  # after the timing, as in decode.prefill: the prefill event times the target
            drafter.prefill(hidden[0])
        emit(request.state, [token], request.stopper)
        request.deliveries.append((now, 1))
        if request.events is not None:
            request.events.append(prefill_event(config, self.piecer, request.prompt_ids, token, prob, now - start))

    def _drafts(self) -> tuple[list[Draft | None], float]:
        """Every spec request's proposal (as far as it can draft, within its k and tokens left)."""
        drafts: list[Draft | None] = [None] * len(self.active)
        start = self.clock()
        groups: dict[type, list[int]] = {}
        for i, r in enumerate(self.active):
            if r.state.drafter and self._limit(r) > 0:
                groups.setdefault(type(r.state.drafter), []).append(i)
        for cls, rows in groups.items():
            proposals = cls.propose_batch([self.active[i].state.drafter for i in rows],
                                          [self.active[i].state.tokens for i in rows],
                                          [self._limit(self.active[i]) for i in rows],
                                          [self.active[i].config.sampling for i in rows],
                                          [self.active[i].state.generator for i in rows])
            for i, d in zip(rows, proposals):
                drafts[i] = d
        return drafts, self.clock() - start

    @staticmethod
    def _limit(request: Request) -> int:
        # Never draft past the token limit: those drafts could not be used.
        return min(request.config.k, request.config.max_new_tokens - len(request.output_ids) - 1)

    def _decode(self, prefill_s: float) -> list[Request]:
        start = self.clock()
        drafts, draft_s = self._drafts()
        # A chain's verify length is the scheduler's; a tree is verified whole (its size is its drafter's choice).
        candidates = [Candidate(d, self._limit(r)) for d, r in zip(drafts, self.active) if d is not None and not d.is_tree]
        chosen = iter(self.scheduler.verify_lengths(candidates, self.costs, draft_s) if candidates else [])
        lengths = [0 if d is None else len(d.tokens) if d.is_tree else next(chosen) for d in drafts]
        rows = [[r.state.tokens[-1]] + (d.tokens[:n] if d else []) for r, d, n in zip(self.active, drafts, lengths)]
        trees = [row_parents(d.parents) if d is not None and d.is_tree else None for d in drafts]
        hidden_layers = tuple(sorted({layer for r in self.active if r.state.drafter for layer in r.state.drafter.hidden_layers}))
        forward_start = self.clock()
        with torch.inference_mode():
            logits, hidden = batch_forward(self.lm.model, self.cache, 0, rows, hidden_layers, trees=trees)
        synchronize(self.lm.device)
        verify_s = self.clock() - forward_start
        for slot, (request, draft, n) in enumerate(zip(self.active, drafts, lengths)):
            self._accept(slot, request, draft, n, logits[slot], hidden[slot], draft_s, verify_s)
        now = self.clock()
        for request in self.active:
            request.deliveries.append((now, request.records[-1].emitted))
        self.steps.append(StepStats(len(rows), sum(map(len, rows)), now - start, draft_s, prefill_s, lengths))
        return [r for r in self.active if r.done]

    def _accept(self, slot: int, request: Request, draft: Draft | None, n: int, logits: torch.Tensor,
                hidden: dict[int, torch.Tensor], draft_s: float, verify_s: float) -> None:
        """Verify one row with the one-request loop's own functions, then roll its cache back."""
        state = request.state
        context = state.tokens
        if draft is not None and draft.is_tree:
            verdict, p, choices = verify_tree(state, request.config.sampling, draft, logits)
            self.cache.keep(slot, n + 1, verdict.rows)  # the accepted path's keys/values, in order
            state.target_forwards += 1
            appended = commit_tree(state, request.stopper, draft, verdict, hidden)
            if request.events is not None:
                step = VerifiedStep(len(request.events), context, draft, draft.tokens, appended, draft_s, verify_s,
                                    state.target_forwards)
                request.events.append(tree_event(request.config, self.piecer, step, verdict, p, choices))
            request.records.append(StepRecord(n, n, len(verdict.path), len(appended), list(draft.confidence or []), -1))
            return
        drafted = draft.tokens[:n] if draft else []
        verdict = verify_row(state, request.config.sampling, draft, drafted, logits)
        self.cache.lengths[slot] -= len(drafted) - verdict.accepted  # rollback: forget the rejected drafts
        state.target_forwards += 1
        appended = commit(state, request.config, request.stopper, drafted, verdict, hidden)
        if request.events is not None:
            step = VerifiedStep(len(request.events), context, draft, drafted, appended, draft_s, verify_s,
                                state.target_forwards)
            request.events.append(step_event(request.config, self.piecer, step, verdict))
        # For the replay: how far the whole proposal matched the target (known where it was all verified).
        whole = draft is None or n == len(draft.tokens) or verdict.accepted < n
        survived = verdict.accepted if request.config.sampling.greedy and whole else -1
        request.records.append(StepRecord(len(draft.tokens) if draft else 0, n, verdict.accepted, len(appended),
                                          list(draft.confidence or []) if draft else [], survived))

    def _retire(self, done: list[Request]) -> list[Request]:
        """Free finished requests' slots: the last active request moves into each hole."""
        now = self.clock()
        for request in done:
            slot = self.active.index(request)
            last = len(self.active) - 1
            if slot != last:
                self.cache.move(last, slot)
                self.active[slot] = self.active[last]
            self.cache.lengths[last] = 0
            self.active.pop()
            request.finish_s = now
            if request.state.drafter:
                request.state.drafter.finish()
            self.finished.append(request)
        return done

    def run(self, progress=None) -> list[Request]:
        """Step until every submitted request has finished (sleeping until the next arrival when idle)."""
        while not self.idle:
            if not self.active and self.waiting:
                wait = min(r.arrival_s for r in self.waiting) - self.clock()
                if wait > 0:
                    time.sleep(wait)
            for request in self.step():
                if progress:
                    progress(request)
        return self.finished
