"""The decode loops: AR, NAR (one shot), Jacobi (iterative refinement) and speculative (draft -> verify).

Read `speculative_step` next to lesson 3: draft k -> verify all k in one target forward -> accept the
agreeing prefix -> append the target's correction (or a bonus token when all k were accepted) ->
roll back the KV cache. AR is the same step with nothing drafted.

Invariant for ar / spec / jacobi: the target's KV cache holds every token except the last one
(the last token is fed at the start of the next forward). NAR commits guesses it never fed, so it
keeps a `cache_len` and catches up.

The loops take a built drafter (the `Drafter` interface, drafting.py) and never import the drafters:
`generation.py`, a layer up, turns a config's drafter name into one.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Iterator

import torch

from .drafting import Draft, Drafter
from .errors import SpecDecError
from .models import LoadedModel
from .sampling import SamplingParams, choose, logits_to_probs, process_logits, verify_greedy, verify_sampled
from .target import Target, timed
from .trace import Piecer, StepEvent, Token, Trace
from .trees import (TREES, TreeVerdict, children, path_tokens, process_tree_logits, row_parents, verify_tree_greedy,
                    verify_tree_sampled)

MODES = ("ar", "nar", "jacobi", "spec")
MAX_K = 16
MAX_TREE_NODES = 64
TOP_N = 5  # how many top tokens of p and q a step records for the inspector


@dataclass
class GenerationConfig:
    mode: str = "ar"
    drafter: str = "ngram"
    k: int = 4
    dynamic_k: float | None = None  # model drafters stop drafting when q's top probability falls below this
    tree: str = "chain"  # spec: the drafts as one chain, or a tree of the drafter's best guesses (trees/)
    tree_nodes: int = 0  # a tree's size (the drafts one verify forward reads); 0: what pays on this machine, each step
    window: int = 16  # nar / jacobi
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = 0
    stop: tuple[str, ...] = ()
    # The drafter's own knobs (e.g. {"hit_rate": 0.8} for sim), read by the drafter it names: this config
    # stays the same whichever drafters exist (drafters.OPTIONS lists them).
    drafter_options: dict[str, object] = field(default_factory=dict)

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p, self.repetition_penalty, self.seed)

    @property
    def sized_tree(self) -> bool:
        """Does it draft trees sized by the measured cost table (so its drafter is built with the costs)?"""
        return self.mode == "spec" and self.tree != "chain" and self.tree_nodes == 0

    @property
    def label(self) -> str:
        if self.mode != "spec":
            return self.mode
        return f"spec:{self.drafter}" + (f"@tree={self.tree}" if self.tree != "chain" else "")

    def validate(self, lm: LoadedModel, prompt_len: int) -> None:
        """Raise SpecDecError with a one-line message for any bad setting of the loop (the drafter's own
        name and options are checked where drafters are known: `generation.check`)."""
        if self.mode not in MODES:
            raise SpecDecError(f"unknown mode {self.mode!r}: choose one of {', '.join(MODES)}")
        if not 1 <= self.k <= MAX_K:
            raise SpecDecError(f"k must be between 1 and {MAX_K} (got {self.k})")
        if self.tree not in TREES:
            raise SpecDecError(f"unknown tree {self.tree!r}: choose one of {', '.join(TREES)}")
        if self.tree_nodes != 0 and not 2 <= self.tree_nodes <= MAX_TREE_NODES:
            raise SpecDecError(f"tree-nodes must be 0 (sized by this machine's costs) or between 2 and {MAX_TREE_NODES} "
                               f"(got {self.tree_nodes})")
        if self.dynamic_k is not None and not 0 < self.dynamic_k < 1:
            raise SpecDecError(f"dynamic-k threshold must be in (0, 1) (got {self.dynamic_k})")
        if not 1 <= self.window <= 64:
            raise SpecDecError(f"window must be between 1 and 64 (got {self.window})")
        self.sampling.validate()
        if self.mode in ("nar", "jacobi") and not self.sampling.greedy:
            raise SpecDecError(f"{self.mode} decodes greedily in this lab: use temperature 0")
        if self.max_new_tokens < 1:
            raise SpecDecError(f"max-new-tokens must be >= 1 (got {self.max_new_tokens})")
        if prompt_len + self.max_new_tokens + max(self.k, self.window, self.tree_nodes) + 1 > lm.context_length:
            if prompt_len >= lm.context_length:
                raise SpecDecError(f"the prompt has {prompt_len} tokens, more than the model's context of {lm.context_length}")
            raise SpecDecError(f"prompt ({prompt_len} tokens) + max-new-tokens ({self.max_new_tokens}) does not fit "
                               f"the model's context of {lm.context_length} tokens")


@dataclass
class DecodeState:
    """Everything one request owns: tokens, the target's KV cache, its drafter, its random stream.

    Self-contained on purpose, so a batch of requests is a list of states.
    """

    prompt_ids: list[int]
    cache: object
    generator: torch.Generator
    drafter: Drafter | None = None
    output_ids: list[int] = field(default_factory=list)
    target_forwards: int = 0  # decode forwards (prefill excluded)
    stop_reason: str = ""

    @property
    def tokens(self) -> list[int]:
        return self.prompt_ids + self.output_ids


class Stopper:
    """Decides after each appended token whether generation ends: EOS, a stop string, or the limit."""

    def __init__(self, lm: LoadedModel, config: GenerationConfig) -> None:
        self.eos = lm.eos_token_ids
        self.stop = tuple(s for s in config.stop if s)
        self.max_new_tokens = config.max_new_tokens
        self.decode = lm.decode

    def __call__(self, state: DecodeState) -> str:
        if state.output_ids[-1] in self.eos:
            return "eos"
        if self.stop and any(s in self.decode(state.output_ids) for s in self.stop):
            return "stop_string"
        if len(state.output_ids) >= self.max_new_tokens:
            return "max_new_tokens"
        return ""


def emit(state: DecodeState, tokens: list[int], stopper: Stopper) -> list[int]:
    """Append tokens one by one, truncating at the first stop: every mode stops at the same place."""
    appended = []
    for token in tokens:
        state.output_ids.append(token)
        appended.append(token)
        state.stop_reason = stopper(state)
        if state.stop_reason:
            break
    return appended


def _top(probs: torch.Tensor, piecer: Piecer, n: int = TOP_N) -> list[Token]:
    values, ids = torch.topk(probs, n)
    return [Token(int(i), piecer.tokenizer.decode([int(i)]), float(v)) for v, i in zip(values, ids)]


def prefill(target: Target, state: DecodeState, config: GenerationConfig, stopper: Stopper, piecer: Piecer) -> StepEvent:
    """Read the whole prompt in one forward and choose the first new token."""
    seconds: list[float] = []
    hidden_layers = state.drafter.hidden_layers if state.drafter else ()
    with timed(target.lm.device, seconds):
        out = target.forward(state.cache, state.prompt_ids, hidden_layers=hidden_layers, last_only=True)
        token, prob = first_token(state, config, out.logits)
    if hidden_layers:  # outside the timing: the prefill event times the target's forward
        state.drafter.prefill(out.hidden)
    emit(state, [token], stopper)
    return prefill_event(config, piecer, state.prompt_ids, token, prob, seconds[0])


def first_token(state: DecodeState, config: GenerationConfig, logits: torch.Tensor) -> tuple[int, float]:
    """The first new token chosen from the prompt's last logits (1, V), and its probability (for display)."""
    logits = process_logits(logits, state.prompt_ids, [], config.sampling)
    token = choose(logits[-1], config.sampling, state.generator)
    return token, float(logits_to_probs(logits[-1], config.sampling)[token])


def prefill_event(config: GenerationConfig, piecer: Piecer, prompt_ids: list[int], token: int, prob: float,
                  seconds: float) -> StepEvent:
    return StepEvent(index=0, mode=config.mode, kind="prefill", emitted=piecer.tokens(prompt_ids, [token], [prob]),
                     verify_s=seconds)


@dataclass
class Verdict:
    """What verifying one request's drafts decided (the inputs of its step event)."""

    accepted: int
    next_token: int  # correction (after a rejection) or bonus (after accepting all)
    p: torch.Tensor  # (n+1, V): sampling p, or the display softmax when greedy
    choices: list[int]  # the target's own pick per row (= argmax of p)
    q: torch.Tensor | None  # (n, V) the verified drafts' q, None for one-hot proposals
    accept_probs: list[float]
    residual: torch.Tensor | None


def verify_row(state: DecodeState, params: SamplingParams, draft: Draft | None, drafted: list[int],
               logits: torch.Tensor) -> Verdict:
    """Accept the agreeing prefix of `drafted` given the target's logits (n+1, V) over [last token] + drafted:
    greedy prefix match, or rejection sampling with the request's own random stream."""
    context = state.tokens
    logits = process_logits(logits, context, drafted, params)  # (n+1, V)
    p = logits_to_probs(logits, params)
    choices = torch.argmax(logits, dim=-1).tolist()
    q = draft.q[: len(drafted)] if draft is not None and draft.q is not None else None
    if params.greedy:
        accepted, next_token = verify_greedy(drafted, choices)
        return Verdict(accepted, next_token, p, choices, q, [], None)
    verdict = verify_sampled(drafted, q, p, state.generator)
    return Verdict(verdict.accepted, verdict.next_token, p, choices, q, verdict.accept_probs, verdict.residual)


def commit(state: DecodeState, config: GenerationConfig, stopper: Stopper, drafted: list[int], verdict: Verdict,
           hidden: dict[int, torch.Tensor]) -> list[int]:
    """Append the accepted drafts + the correction/bonus (truncated at a stop) and tell the drafter."""
    appended = emit(state, drafted[:verdict.accepted] + [verdict.next_token], stopper)
    if state.drafter:
        state.drafter.observe(verdict.accepted, appended, hidden, verified=len(drafted))
    return appended


@dataclass(frozen=True)
class VerifiedStep:
    """What one verified step did, as the event builders read it (the part vLLM's SpecDecodeMetadata plays):
    the same record from the one-request loop and from the serving engine's batched verify."""

    index: int  # the step's number in its request
    context: list[int]  # every token before the step
    draft: Draft | None  # the drafter's proposal (None: a plain AR step)
    drafted: list[int]  # the drafts verified: a chain's first k (a tree verifies all of draft.tokens)
    appended: list[int]  # the tokens the step committed (accepted drafts + correction or bonus)
    draft_s: float
    verify_s: float
    target_forwards: int  # the request's target forwards so far, this one included


def step_event(config: GenerationConfig, piecer: Piecer, step: VerifiedStep, verdict: Verdict) -> StepEvent:
    """The step as plain data for traces and the app (tokens with their p and q, the verdict, timings)."""
    index, context, drafted, appended, draft = step.index, step.context, step.drafted, step.appended, step.draft
    p, q, accepted, next_token = verdict.p, verdict.q, verdict.accepted, verdict.next_token
    extra_kind = None if not drafted else ("bonus" if accepted == len(drafted) else "correction")
    q_of_draft = [1.0] * len(drafted) if q is None else [float(q[i, t]) for i, t in enumerate(drafted)]
    return StepEvent(
        index=index, mode=config.mode, kind="decode",
        emitted=piecer.tokens(context, appended, [float(p[i, t]) for i, t in enumerate(appended)]),
        drafted=piecer.tokens(context, drafted, q_of_draft),
        target=piecer.tokens(context, verdict.choices, [float(p[i, t]) for i, t in enumerate(verdict.choices)]),
        p_of_draft=[float(p[i, t]) for i, t in enumerate(drafted)],
        accept_probs=verdict.accept_probs, accepted=accepted,
        extra=piecer.tokens(context + drafted[:accepted], [next_token], [float(p[accepted, next_token])])[0] if drafted else None,
        extra_kind=extra_kind,
        p_top=[_top(row, piecer) for row in p] if drafted else [],
        q_top=[_top(row, piecer) for row in q] if q is not None else [],
        residual_top=_top(verdict.residual, piecer) if verdict.residual is not None else [],
        draft_s=step.draft_s, verify_s=step.verify_s, overhead_s=draft.overhead_s if draft else 0.0,
        target_forwards=step.target_forwards, draft_source=draft.source if draft and drafted else None,
        draft_confidence=list(draft.confidence or [])[:len(drafted)] if draft else [],
        draft_guess=piecer.tokens(context, draft.guess[:len(drafted)]) if draft and draft.guess else [],
    )


def verify_tree(state: DecodeState, params: SamplingParams, draft: Draft, logits: torch.Tensor
                ) -> tuple[TreeVerdict, torch.Tensor, list[int]]:
    """Accept the longest agreeing root path of a draft tree given the target's logits (N+1, V) over
    [last token] + nodes (`trees/verify.py`). Returns the verdict, p (N+1, V) and the target's pick per row."""
    logits = process_tree_logits(logits, state.tokens, draft.tokens, draft.parents, params)
    p = logits_to_probs(logits, params)
    choices = torch.argmax(logits, dim=-1).tolist()
    if params.greedy:
        return verify_tree_greedy(draft.tokens, draft.parents, choices), p, choices
    return verify_tree_sampled(draft.tokens, draft.parents, p, state.generator), p, choices


def commit_tree(state: DecodeState, stopper: Stopper, draft: Draft, verdict: TreeVerdict,
                hidden: dict[int, torch.Tensor]) -> list[int]:
    """Append the accepted path + the correction/bonus; the drafter sees the path as a chain verified whole
    (its hidden rows: the root's and each accepted node's)."""
    path = [draft.tokens[node] for node in verdict.path]
    appended = emit(state, path + [verdict.next_token], stopper)
    if state.drafter:
        rows = verdict.rows
        state.drafter.observe(len(path), appended, {layer: h[rows] for layer, h in hidden.items()}, verified=len(path))
    return appended


def tree_event(config: GenerationConfig, piecer: Piecer, step: VerifiedStep, verdict: TreeVerdict, p: torch.Tensor,
               choices: list[int]) -> StepEvent:
    """A tree step as plain data: every node (its q in `drafted`), the accepted path, and the target's
    choice with p (N+1, V) along that path (`choices`: the target's pick per row)."""
    index, context, appended, draft = step.index, step.context, step.appended, step.draft
    tokens, parents = draft.tokens, draft.parents
    drafted = [piecer.tokens(context + path_tokens(tokens, parents, parent), [token], [q])[0]  # each after its own path
               for token, parent, q in zip(tokens, parents, draft.confidence or [1.0] * len(tokens))]
    rows = verdict.rows
    walked = [tokens[node] for node in verdict.path]
    leaf = not children(parents).get(verdict.path[-1] if verdict.path else -1)
    return StepEvent(
        index=index, mode=config.mode, kind="decode",
        emitted=piecer.tokens(context, appended, [float(p[rows[i], t]) for i, t in enumerate(appended)]),
        drafted=drafted, target=piecer.tokens(context, [choices[r] for r in rows], [float(p[r, choices[r]]) for r in rows]),
        p_of_draft=[float(p[parent + 1, token]) for token, parent in zip(tokens, parents)],
        accept_probs=verdict.accept_probs, accepted=len(verdict.path),
        extra=piecer.tokens(context + walked, [verdict.next_token], [float(p[rows[-1], verdict.next_token])])[0],
        extra_kind="bonus" if leaf else "correction",
        p_top=[_top(p[r], piecer) for r in rows],
        residual_top=_top(verdict.residual, piecer) if verdict.residual is not None else [],
        draft_s=step.draft_s, verify_s=step.verify_s, target_forwards=step.target_forwards,
        draft_confidence=list(draft.confidence or []), tree_parents=list(parents), tree_path=list(verdict.path),
    )


def tree_step(target: Target, state: DecodeState, config: GenerationConfig, stopper: Stopper, piecer: Piecer,
              index: int, draft: Draft, draft_s: float) -> StepEvent:
    """Verify a draft tree in one forward (ancestor mask, positions by depth), keep the accepted path's
    keys/values and forget every other branch's."""
    context = state.tokens
    verify_time: list[float] = []
    with timed(target.lm.device, verify_time):
        hidden_layers = state.drafter.hidden_layers if state.drafter else ()
        out = target.forward(state.cache, [context[-1]] + draft.tokens, hidden_layers=hidden_layers,
                             tree=row_parents(draft.parents))
        state.target_forwards += 1
        verdict, p, choices = verify_tree(state, config.sampling, draft, out.logits)
        target.keep(state.cache, len(draft.tokens) + 1, verdict.rows)
    appended = commit_tree(state, stopper, draft, verdict, out.hidden)
    step = VerifiedStep(index, context, draft, draft.tokens, appended, draft_s, verify_time[0], state.target_forwards)
    return tree_event(config, piecer, step, verdict, p, choices)


def speculative_step(target: Target, state: DecodeState, config: GenerationConfig, stopper: Stopper,
                     piecer: Piecer, index: int) -> StepEvent:
    """One draft -> verify -> accept -> correct/bonus -> rollback step. With no drafter: one AR step."""
    params = config.sampling
    context = state.tokens
    remaining = config.max_new_tokens - len(state.output_ids)
    k = min(config.k, remaining - 1)  # never draft past the token limit: those drafts could not be used
    draft_time: list[float] = []
    with timed(target.lm.device, draft_time):
        draft = state.drafter.propose(context, k, params, state.generator) if state.drafter and k > 0 else None
    if draft is not None and draft.is_tree:
        return tree_step(target, state, config, stopper, piecer, index, draft, draft_time[0])
    drafted = draft.tokens[:k] if draft else []

    verify_time: list[float] = []
    with timed(target.lm.device, verify_time):
        # Verify: the last token plus all drafts in ONE forward; row i predicts the token after drafted[:i].
        hidden_layers = state.drafter.hidden_layers if state.drafter else ()
        out = target.forward(state.cache, [context[-1]] + drafted, hidden_layers=hidden_layers)
        state.target_forwards += 1
        verdict = verify_row(state, params, draft, drafted, out.logits)
        # Rollback: the cache now holds the last token + all drafts; forget the rejected ones.
        target.rollback(state.cache, len(drafted) - verdict.accepted)

    appended = commit(state, config, stopper, drafted, verdict, out.hidden)
    draft_s = max(0.0, draft_time[0] - (draft.overhead_s if draft else 0.0))
    step = VerifiedStep(index, context, draft, drafted, appended, draft_s, verify_time[0], state.target_forwards)
    return step_event(config, piecer, step, verdict)


def _greedy_window(target: Target, state: DecodeState, config: GenerationConfig, catch_up: list[int],
                   guess: list[int]) -> tuple[list[int], int]:
    """One forward over catch_up + guess; return the target's greedy choice at each window position
    and at the position after the window (row i of the window continues catch_up + guess[:i])."""
    out = target.forward(state.cache, catch_up + guess)
    state.target_forwards += 1
    rows = out.logits[len(catch_up) - 1:]  # (len(guess)+1, V)
    rows = process_logits(rows, state.tokens, guess, config.sampling)
    choices = torch.argmax(rows, dim=-1).tolist()
    return choices[:-1], choices[-1]


def jacobi_steps(target: Target, state: DecodeState, config: GenerationConfig, stopper: Stopper,
                 piecer: Piecer, index: int) -> Iterator[StepEvent]:
    """Jacobi fixed-point iteration on one window: guess all n tokens, re-predict every position in
    parallel from the current guess, repeat until nothing changes, then commit the window + 1 token.

    Position i is right once positions < i are, so it converges in at most n+1 iterations, and the
    fixed point is exactly the greedy AR continuation.
    """
    n = min(config.window, config.max_new_tokens - len(state.output_ids))
    guess = [state.tokens[-1]] * n  # a deliberately poor initial guess: the last token repeated
    for iteration in range(n + 2):
        seconds: list[float] = []
        with timed(target.lm.device, seconds):
            new, after = _greedy_window(target, state, config, [state.tokens[-1]], guess)
        changed = [i for i in range(n) if new[i] != guess[i]]
        converged = not changed
        # Safety net for a float-level cycle (never expected): commit only what is proven right.
        proven = n if converged else (changed[0] + 1 if iteration == n + 1 else 0)
        event = StepEvent(index=index + iteration, mode="jacobi", kind="iteration", iteration=iteration,
                          window=piecer.tokens(state.tokens, new), changed=changed, converged=converged,
                          verify_s=seconds[0], target_forwards=state.target_forwards)
        if proven:
            keep = proven if converged else proven - 1  # cache rows of guess[:keep] were computed on right tokens
            target.rollback(state.cache, n - keep)
            context = state.tokens
            appended = emit(state, new[:proven] + ([after] if converged else []), stopper)
            event.emitted = piecer.tokens(context, appended)
            yield event
            return
        target.rollback(state.cache, n + 1)  # the last token too: the next iteration feeds it again
        guess = new
        yield event


def nar_step(target: Target, state: DecodeState, config: GenerationConfig, stopper: Stopper,
             piecer: Piecer, index: int, cache_len: int) -> tuple[StepEvent, int]:
    """One-shot parallel decoding: predict every position of a guessed window from ONE forward and
    commit all predictions. Positions after the first lack their true left context, so text garbles."""
    n = min(config.window, config.max_new_tokens - len(state.output_ids))
    tokens = state.tokens
    catch_up = tokens[cache_len:]  # committed tokens the cache has not seen (NAR commits unfed guesses)
    guess = [tokens[-1]] * n
    seconds: list[float] = []
    with timed(target.lm.device, seconds):
        new, _ = _greedy_window(target, state, config, catch_up, guess)
        target.rollback(state.cache, n)  # guesses are not what we commit: drop their keys/values
    appended = emit(state, new, stopper)
    event = StepEvent(index=index, mode="nar", kind="iteration", iteration=0, window=piecer.tokens(tokens, new),
                      changed=[i for i in range(n) if new[i] != guess[i]], converged=False,
                      emitted=piecer.tokens(tokens, appended), verify_s=seconds[0], target_forwards=state.target_forwards)
    return event, len(tokens)


def new_state(lm: LoadedModel, prompt_ids: list[int], config: GenerationConfig, drafter: Drafter | None) -> DecodeState:
    """A request's state: its own random stream and KV cache, and its drafter (None for every mode but spec)."""
    generator = torch.Generator(device="cpu").manual_seed(config.seed if config.seed is not None else torch.seed())
    if drafter:
        drafter.reset(prompt_ids)
    return DecodeState(prompt_ids=list(prompt_ids), cache=Target(lm).new_cache(), generator=generator, drafter=drafter)


def decode_events(lm: LoadedModel, state: DecodeState, config: GenerationConfig) -> Iterator[StepEvent]:
    """Yield step events until the state stops. The mode picks the step function."""
    target, stopper, piecer = Target(lm), Stopper(lm, config), Piecer(lm.tokenizer)
    yield prefill(target, state, config, stopper, piecer)
    index = 1
    cache_len = len(state.prompt_ids)
    while not state.stop_reason:
        if config.mode in ("ar", "spec"):
            yield speculative_step(target, state, config, stopper, piecer, index)
            index += 1
        elif config.mode == "jacobi":
            for event in jacobi_steps(target, state, config, stopper, piecer, index):
                index += 1
                yield event
        else:
            event, cache_len = nar_step(target, state, config, stopper, piecer, index, cache_len)
            index += 1
            yield event


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    trace: Trace
    metrics: dict


def run(lm: LoadedModel, prompt: str | list[int] | list[dict], state: DecodeState, config: GenerationConfig,
        progress=None) -> GenerationResult:
    """Decode a prepared state to the end; return text, token ids, the full trace and its metrics.

    `progress`, if given, is called with the number of new tokens after each step.
    """
    steps: list[StepEvent] = []
    start = time.perf_counter()
    for event in decode_events(lm, state, config):
        steps.append(event)
        if progress:
            progress(len(state.output_ids))
    wall = time.perf_counter() - start
    if state.drafter:
        state.drafter.finish()
    return result_of(lm, prompt, config, state, steps, wall, Target.cache_bytes(state.cache))


def result_of(lm: LoadedModel, prompt: str | list[int] | list[dict], config: GenerationConfig, state: DecodeState,
              steps: list[StepEvent], wall_s: float, kv_cache_bytes: int, ttft_s: float | None = None) -> GenerationResult:
    """Text, trace and metrics of a finished request (decoded here or by the serving engine)."""
    from .metrics import compute_metrics, peak_rss_bytes

    text = lm.decode(state.output_ids)
    trace = Trace(model=lm.name, mode=config.mode, drafter=config.drafter if config.mode == "spec" else None,
                  config={k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()},
                  prompt=prompt if isinstance(prompt, str) else lm.tokenizer.decode(state.prompt_ids),
                  prompt_ids=state.prompt_ids, steps=steps, output_ids=state.output_ids, text=text,
                  stop_reason=state.stop_reason,
                  timing={"wall_s": wall_s, "ttft_s": steps[0].verify_s if ttft_s is None else ttft_s,
                          "peak_rss_bytes": peak_rss_bytes(), "kv_cache_bytes": kv_cache_bytes,
                          "drafter_bytes": state.drafter.memory_bytes() if state.drafter else 0})
    return GenerationResult(text=text, token_ids=state.output_ids, trace=trace, metrics=compute_metrics(trace))
