"""Traces: every decoding step as plain data (dataclasses -> JSON), replayable without a model.

The app's animations and the notebooks only *read* traces; they never re-run the algorithm.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from .errors import SpecDecError
from .trees.shape import node_depths

SCHEMA_VERSION = 4  # 2: StepEvent.draft_source; 3: draft_confidence, draft_guess; 4: tree_parents, tree_path
READABLE_VERSIONS = (1, 2, 3, 4)  # older traces still load


@dataclass
class Token:
    """A token as the UI shows it: id, readable text piece, and a probability where one applies."""

    id: int
    piece: str
    prob: float | None = None


@dataclass
class StepEvent:
    """One step of one decoding mode.

    kind: "prefill" (first token from the prompt), "decode" (ar/spec step) or "iteration" (nar/jacobi).
    For spec steps: `drafted` carries q(x) of each drafted token, `target` the target's choice at each
    verified position with its p, `p_of_draft` p(x) of each drafted token, `accepted` the agreeing
    prefix length, then `extra` is the target's correction (after a rejection) or bonus token.
    """

    index: int
    mode: str
    kind: str
    emitted: list[Token] = field(default_factory=list)  # appended to the output (truncated at a stop)
    drafted: list[Token] = field(default_factory=list)
    target: list[Token] = field(default_factory=list)
    p_of_draft: list[float] = field(default_factory=list)
    accept_probs: list[float] = field(default_factory=list)  # sampling: min(1, p/q) per examined position
    accepted: int = 0
    extra: Token | None = None
    extra_kind: str | None = None  # "correction" | "bonus"
    p_top: list[list[Token]] = field(default_factory=list)  # top tokens of p per verified position
    q_top: list[list[Token]] = field(default_factory=list)  # top tokens of q per drafted position
    residual_top: list[Token] = field(default_factory=list)  # top of norm(max(0, p-q)) at the rejection
    draft_s: float = 0.0
    verify_s: float = 0.0
    overhead_s: float = 0.0  # time spent simulating a drafter (sim's oracle): not part of decoding
    target_forwards: int = 0  # cumulative decode forwards of the target (prefill excluded)
    draft_source: str | None = None  # which drafter proposed this step's drafts (`mix` picks one per step)
    draft_confidence: list[float] = field(default_factory=list)  # the drafter's survival estimate per drafted position
    draft_guess: list[Token] = field(default_factory=list)  # block drafters: the backbone's guess before the Markov head
    # A tree step: `drafted` holds every node, tree_parents[i] the node i continues (-1: the context), and
    # tree_path the accepted nodes root to leaf; `target` and `p_top` then follow that path's rows.
    tree_parents: list[int] = field(default_factory=list)
    tree_path: list[int] = field(default_factory=list)
    # nar / jacobi
    iteration: int | None = None
    window: list[Token] = field(default_factory=list)
    changed: list[int] = field(default_factory=list)  # window positions that changed this iteration
    converged: bool = False

    @property
    def draft_depth(self) -> int:
        """How deep the drafts reach: a chain's length, a tree's deepest node."""
        return max(node_depths(self.tree_parents)) if self.tree_parents else len(self.drafted)


@dataclass
class Trace:
    model: str
    mode: str
    drafter: str | None
    config: dict
    prompt: str
    prompt_ids: list[int]
    steps: list[StepEvent] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    stop_reason: str = ""
    timing: dict = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def replay(self) -> Iterator[list[int]]:
        """The output as it grew, step by step, from the recorded events alone (no model needed)."""
        output: list[int] = []
        for step in self.steps:
            output += [t.id for t in step.emitted]
            yield list(output)

    def to_dict(self) -> dict:
        return asdict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False))

    @classmethod
    def from_dict(cls, data: dict) -> "Trace":
        if data.get("schema_version") not in READABLE_VERSIONS:
            raise SpecDecError(f"trace schema version {data.get('schema_version')!r} is not one of {READABLE_VERSIONS}")
        steps = [_step_from_dict(s) for s in data["steps"]]
        return cls(**{**data, "steps": steps, "schema_version": SCHEMA_VERSION})  # upgraded on load

    @classmethod
    def load(cls, path: str | Path) -> "Trace":
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise SpecDecError(f"cannot read trace {path}: {err}") from err


def _tokens(items: list[dict]) -> list[Token]:
    return [Token(**t) for t in items]


def _step_from_dict(d: dict) -> StepEvent:
    d = dict(d)
    for key in ("emitted", "drafted", "target", "window", "residual_top", "draft_guess"):
        d[key] = _tokens(d.get(key, []))
    d["p_top"] = [_tokens(row) for row in d.get("p_top", [])]
    d["q_top"] = [_tokens(row) for row in d.get("q_top", [])]
    d["extra"] = Token(**d["extra"]) if d.get("extra") else None
    return StepEvent(**d)


class Piecer:
    """Readable text pieces for token ids that continue a context.

    Byte-level BPE splits a multi-byte character (e.g. Chinese) across tokens; decoding such a token
    alone gives U+FFFD. The piece of token i is the text that decoding context+new[:i+1] adds to
    context+new[:i], holding back an incomplete character until the token that completes it.
    """

    TAIL = 8  # tokens of left context enough to finish any partial character

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def _text(self, ids: list[int]) -> str:
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        return text.rstrip("\ufffd")

    def pieces(self, context: list[int], new: list[int]) -> list[str]:
        ids = list(context[-self.TAIL:])
        out: list[str] = []
        before = self._text(ids)
        for token in new:
            ids.append(token)
            after = self._text(ids)
            out.append(after[len(before):] if after.startswith(before) else self.tokenizer.decode([token]))
            before = after
        return out

    def tokens(self, context: list[int], new: list[int], probs: list[float] | None = None) -> list[Token]:
        pieces = self.pieces(context, new)
        probs = probs if probs is not None else [None] * len(new)
        return [Token(t, s, None if p is None else float(p)) for t, s, p in zip(new, pieces, probs)]
