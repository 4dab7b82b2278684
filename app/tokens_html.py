"""Tokens as HTML inside Streamlit markdown: a colour (Okabe–Ito) plus a second cue for every role, a
draft–verify step as spans, and the legend."""
from __future__ import annotations

import html

import streamlit as st

from app.charts import BLUE, DARK_YELLOW, GREEN, GREY, ORANGE, PURPLE, SKY, VERMILLION, YELLOW
from app.language import t

# role -> (colour, css of the second cue)
ROLES = {
    "ar": (SKY, f"border:1px solid {SKY};"),                                                    # thin box
    "accepted": (GREEN, f"border-bottom:3px solid {GREEN};"),                                   # solid underline
    "rejected": (VERMILLION, f"text-decoration:line-through 2px;border:1px dashed {VERMILLION};opacity:.8;"),  # struck
    "correction": (BLUE, f"border-bottom:4px double {BLUE};font-weight:600;"),                  # double underline
    "bonus": (ORANGE, f"border-bottom:3px dotted {ORANGE};font-weight:600;"),                   # dotted underline
    "changing": (YELLOW, f"text-decoration:underline wavy {DARK_YELLOW};"),                     # wavy underline
    "window": (GREY, f"border:1px dashed {GREY};opacity:.75;"),                                 # dashed box
    "nar_diff": (PURPLE, f"border-bottom:3px dashed {PURPLE};"),                                # dashed underline
}
LEGEND_ROLES = ("ar", "accepted", "rejected", "correction", "bonus", "changing", "nar_diff")


def _hex_rgba(colour: str, alpha: float) -> str:
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


_MD_ESCAPES = {"$": "&#36;", "*": "&#42;", "_": "&#95;", "`": "&#96;", "\\": "&#92;", "~": "&#126;",
               "[": "&#91;", "]": "&#93;", "#": "&#35;", "|": "&#124;"}


def escape_piece(piece: str) -> str:
    """Token text as inert HTML inside markdown: no math, no emphasis; newlines shown as ↵."""
    out = html.escape(piece, quote=True)
    out = "".join(_MD_ESCAPES.get(ch, ch) for ch in out)
    out = out.replace("\n", "↵<br>").replace("\r", "")
    return out or "&#8203;"


def token_span(piece: str, role: str, title: str = "") -> str:
    colour, cue = ROLES[role]
    style = (f"background:{_hex_rgba(colour, 0.28)};{cue}border-radius:3px;padding:0 1px;margin:0 1px 2px 0;"
             "white-space:pre-wrap;line-height:1.9;")
    tip = f' title="{html.escape(title, quote=True)}"' if title else ""
    return f'<span class="sd-tok sd-{role}" style="{style}"{tip}>{escape_piece(piece)}</span>'


def plain_span(text: str) -> str:
    """Context text (not a token role): muted, no colour."""
    return f'<span class="sd-ctx" style="opacity:.6;white-space:pre-wrap">{escape_piece(text)}</span>'


def token_line(spans: list[str], extra_style: str = "") -> str:
    """One single-line HTML block (a blank line would end the HTML block inside markdown)."""
    return f'<div class="sd-lane" style="font-family:ui-monospace,monospace;font-size:0.92em;{extra_style}">' \
           + "".join(spans) + "</div>"


def legend_html() -> str:
    items = [token_span(t(f"role_{r}"), r).replace('style="', 'style="display:inline-block;white-space:nowrap;', 1)
             for r in LEGEND_ROLES]
    return '<div class="sd-legend" style="font-size:0.85em">' + " ".join(items) + "</div>"


def show_legend(where=None) -> None:
    (where or st).markdown(legend_html(), unsafe_allow_html=True)


def visible(piece: str) -> str:
    """Token text for tables and chart axes: spaces and newlines made visible."""
    return piece.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"


def token_tip(tok, name: str = "p", prob: float | None = None) -> str:
    """A token span's tooltip: the piece and its probability (`name`: p of the target, q of a drafter)."""
    prob = tok.prob if prob is None else prob
    return f"{tok.piece!r}" + (f"  {name}={prob:.3f}" if prob is not None else "")


def tree_step_spans(step, show_rejected: bool) -> list[str]:
    """A tree step: its accepted path, the children of the path's last node the target turned down, then
    the correction or bonus (the other branches are drawn by the inspector's tree view)."""
    spans = [token_span(step.drafted[node].piece, "accepted", token_tip(step.drafted[node], "q")) for node in step.tree_path]
    if show_rejected:
        last = step.tree_path[-1] if step.tree_path else -1
        spans += [token_span(d.piece, "rejected", token_tip(d, "q")) for d, parent in zip(step.drafted, step.tree_parents)
                  if parent == last]
    if len(step.emitted) > len(step.tree_path):  # the correction or bonus (unless a stop came first)
        spans.append(token_span(step.emitted[-1].piece, step.extra_kind or "correction", token_tip(step.emitted[-1])))
    return spans


def spec_step_spans(step, show_rejected: bool = True) -> list[str]:
    """A spec/ar decode step as spans: accepted drafts, (struck) rejected drafts, correction/bonus."""
    if step.kind == "prefill" or not step.drafted:
        return [token_span(tok.piece, "ar", token_tip(tok)) for tok in step.emitted]
    if step.tree_parents:
        return tree_step_spans(step, show_rejected)
    spans = []
    for i, tok in enumerate(step.emitted):
        if i < step.accepted:
            spans.append(token_span(tok.piece, "accepted", token_tip(tok, "q", step.drafted[i].prob)))
        else:
            if show_rejected:
                spans += [token_span(d.piece, "rejected", token_tip(d, "q")) for d in step.drafted[step.accepted:]]
            spans.append(token_span(tok.piece, step.extra_kind or "correction", token_tip(tok)))
    return spans
