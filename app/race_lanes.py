"""The race page's lanes: a lane is the list of StepEvents of one mode, shown as far as `n` steps on
one of two clocks, and replayed frame by frame."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from app.language import t
from app.tokens_html import spec_step_spans, token_line, token_span, token_tip

QUANT_LANE = "ar_quant"  # the live race's AR lane on a quantised copy of the target


@dataclass
class LaneView:
    """What a lane shows after its first n steps."""

    html: str
    tokens: int
    forwards: int  # target forwards including the prefill
    seconds: float
    done: bool
    ids: list[int] = field(default_factory=list)


def step_seconds(step) -> float:
    """Decode time of one step (drafting + verifying; a simulated drafter's oracle is excluded)."""
    return step.draft_s + step.verify_s


def lane_clocks(steps, clock: str) -> list[float]:
    """Cumulative clock after each step: seconds, or target forwards (the prefill counts as one)."""
    if clock == "forwards":
        return [float(s.target_forwards + 1) for s in steps]
    total, out = 0.0, []
    for s in steps:
        total += step_seconds(s)
        out.append(total)
    return out


def render_lane(mode: str, steps, n: int, reference_ids: list[int] | None = None,
                show_rejected: bool = True) -> LaneView:
    """One lane's text after its first n steps. Lanes whose text may leave AR's (NAR, AR on a quantised
    copy) mark each token that differs from AR's at the same position."""
    shown = steps[:n]
    spans: list[str] = []
    ids: list[int] = []
    if mode in ("ar", "spec"):
        for s in shown:
            spans += spec_step_spans(s, show_rejected)
            ids += [tok.id for tok in s.emitted]
    elif mode in ("nar", QUANT_LANE):
        for s in shown:
            for tok in s.emitted:
                pos = len(ids)
                same = reference_ids is not None and pos < len(reference_ids) and reference_ids[pos] == tok.id
                role = "ar" if same or reference_ids is None else "nar_diff"
                spans.append(token_span(tok.piece, role, token_tip(tok)))
                ids.append(tok.id)
    else:  # jacobi: committed text, then the window still settling
        for s in shown:
            spans += [token_span(tok.piece, "ar", token_tip(tok)) for tok in s.emitted]
            ids += [tok.id for tok in s.emitted]
        last = shown[-1] if shown else None
        if last is not None and last.kind == "iteration" and not last.emitted and last.window:
            changed = set(last.changed)
            spans.append(f'<span style="font-size:0.75em;opacity:.7"> ⟨{t("iteration_short", i=last.iteration)}⟩ </span>')
            spans += [token_span(tok.piece, "changing" if i in changed else "window") for i, tok in enumerate(last.window)]
    forwards = shown[-1].target_forwards + 1 if shown else 0
    seconds = sum(step_seconds(s) for s in shown)
    return LaneView(token_line(spans), len(ids), forwards, seconds, n >= len(steps), ids)


def animation_delay() -> float:
    """Seconds per animation frame at speed 1× (tests: SPECDEC_ANIMATION_DELAY=0)."""
    try:
        return max(0.0, float(os.environ.get("SPECDEC_ANIMATION_DELAY", "0.06")))
    except ValueError:
        return 0.06


def sleep_frame(speed: float) -> None:
    delay = animation_delay() / max(speed, 1e-3)
    if delay > 0:
        time.sleep(delay)
