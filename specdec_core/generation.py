"""The front door: `generate` and `stream` by drafter name.

decode.py's loops take a built drafter; the drafters need this machine's measured costs when they
weigh proposals (n-gram lookup, mix). This layer joins the two: it checks the config against the
drafter it names, measures the costs that drafter needs (once per process, `costmodel.draft_costs`),
builds it with them and hands the state to the loop.

    result = generate(lm, "Rewrite: ...", GenerationConfig(mode="spec", drafter="ngram", k=4))
    for event in stream(lm, prompt, config): ...
"""
from __future__ import annotations

from typing import Callable, Iterator, Mapping

from .costmodel import DraftCosts, draft_costs
from .decode import DecodeState, GenerationConfig, GenerationResult, decode_events, new_state, run
from .drafters import SuffixHistory, check_drafter, costs_needed, make_drafter
from .drafting import Drafter
from .errors import SpecDecError
from .models import LoadedModel
from .trace import StepEvent

Prompt = str | list[int] | list[dict]


def check(config: GenerationConfig, lm: LoadedModel, prompt_len: int) -> None:
    """Raise SpecDecError with a one-line message for any bad setting, the drafter's own included."""
    config.validate(lm, prompt_len)
    if config.mode == "spec" and lm.weights != "fp32":
        raise SpecDecError(f"spec verifies with the fp32 target, not {lm.weights} weights: draft with "
                           f"the quantised copy instead (drafter quant)")
    if config.mode == "spec":
        check_drafter(config.drafter, config.drafter_options, lm, config.tree)


def drafter_factory(lm: LoadedModel, name: str) -> Callable[[], Drafter]:
    """Fresh `name` drafters as the cost model times them (greedy, k = 4, 8 new tokens; a cost-aware one
    with the costs it weighs, measured first)."""
    config = GenerationConfig(mode="spec", drafter=name, k=4, max_new_tokens=8)
    return lambda: make_drafter(name, lm, config, drafter_costs(lm, name))


def drafter_costs(lm: LoadedModel, name: str, sized_tree: bool = False,
                  options: Mapping[str, object] | None = None) -> DraftCosts | None:
    """The measured costs drafter `name` is built with under the config's drafter `options` (None if it
    weighs nothing), measured the first time a process asks and reused after that."""
    needed = costs_needed(name, sized_tree, options)
    if needed is None:
        return None
    return draft_costs(lm, {other: drafter_factory(lm, other) for other in needed})


def build_drafter(lm: LoadedModel, config: GenerationConfig, costs: DraftCosts | None = None,
                  history: SuffixHistory | None = None) -> Drafter | None:
    """The request's drafter (None unless the mode is spec), with the costs it needs: `costs` when given
    (e.g. a recorded profile's, `costmodel.profile_costs`), else measured on this machine; `history`:
    the suffix drafter's shared history of earlier outputs (None: an empty one of its own)."""
    if config.mode != "spec":
        return None
    if costs is None:
        costs = drafter_costs(lm, config.drafter, config.sized_tree, config.drafter_options)
    return make_drafter(config.drafter, lm, config, costs, history)


def prepare(lm: LoadedModel, prompt: Prompt, config: GenerationConfig, raw: bool = False,
            costs: DraftCosts | None = None, history: SuffixHistory | None = None) -> DecodeState:
    """Tokenise (chat template unless raw; token ids pass through), validate, and build the state (its
    drafter weighs `costs` and recalls `history` when given, see build_drafter)."""
    prompt_ids = list(prompt) if isinstance(prompt, list) and prompt and isinstance(prompt[0], int) else lm.encode(prompt, raw)
    if not prompt_ids:
        raise SpecDecError("the prompt is empty")
    check(config, lm, len(prompt_ids))
    return new_state(lm, prompt_ids, config, build_drafter(lm, config, costs, history))


def stream(lm: LoadedModel, prompt: Prompt, config: GenerationConfig, raw: bool = False,
           history: SuffixHistory | None = None) -> Iterator[StepEvent]:
    """Decode and yield each StepEvent as it happens (for live UIs); `history` as for `generate`, which
    the finished output joins once the last event has been read."""
    state = prepare(lm, prompt, config, raw, history=history)
    yield from decode_events(lm, state, config)
    if state.drafter:
        state.drafter.finish()


def generate(lm: LoadedModel, prompt: Prompt, config: GenerationConfig | None = None, raw: bool = False,
             progress=None, costs: DraftCosts | None = None, history: SuffixHistory | None = None) -> GenerationResult:
    """Decode one prompt; return text, token ids, the full trace and its metrics.

    `progress`, if given, is called with the number of new tokens after each step; `costs`, if given, is
    what a cost-aware drafter weighs instead of this machine's costs measured now; `history`, if given,
    is the suffix drafter's shared history: it recalls earlier outputs and this one joins it at the end.
    """
    config = config or GenerationConfig()
    return run(lm, prompt, prepare(lm, prompt, config, raw, costs, history), config, progress)
