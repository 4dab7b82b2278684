"""What every page shares: language, token rendering, trace loading and the prompt list. (The model
and its locks live in `model_store.py`, the course's lesson files in `course.py`.)

Pages stay thin: layout and widgets. Every number they show comes from `specdec_core`; this module
only turns engine data into HTML, tables and Streamlit state.
"""
from __future__ import annotations

import html
import json
import os
import sys
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import streamlit as st

APP_DIR = Path(__file__).resolve().parent
ROOT = APP_DIR.parent
if str(ROOT) not in sys.path:  # `streamlit run app/streamlit_app.py` from anywhere finds specdec_core
    sys.path.insert(0, str(ROOT))

import specdec_core as sd  # noqa: E402  (after the path fix)

LANGS = ("zh", "en")
DEFAULT_LANG = "zh"
LANG_NAMES = {"zh": "中文", "en": "English"}
LANES = ("ar", "nar", "jacobi", "spec")


# ---------------------------------------------------------------------------------------------
# Settings from the environment (tests: SPECDEC_ANIMATION_DELAY=0, SPECDEC_APP_TRACES=...)
# ---------------------------------------------------------------------------------------------

def animation_delay() -> float:
    """Seconds per animation frame at speed 1×."""
    try:
        return max(0.0, float(os.environ.get("SPECDEC_ANIMATION_DELAY", "0.06")))
    except ValueError:
        return 0.06


def traces_dir() -> Path:
    return Path(os.environ.get("SPECDEC_APP_TRACES") or APP_DIR / "traces")


def prompts_file() -> Path:
    return Path(os.environ.get("SPECDEC_APP_PROMPTS") or ROOT / "specdec_core" / "prompts" / "quick.jsonl")


# ---------------------------------------------------------------------------------------------
# Language: one JSON file of UI strings per language; the choice lives in ?lang= and the session
# ---------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def strings(lang: str) -> dict[str, str]:
    return json.loads((APP_DIR / "i18n" / f"{lang}.json").read_text(encoding="utf-8"))


def lang() -> str:
    value = st.session_state.get("lang")
    return value if value in LANGS else DEFAULT_LANG


def t(key: str, **kwargs) -> str:
    """The UI string `key` in the current language (falls back to English, then to the key)."""
    text = strings(lang()).get(key) or strings("en").get(key) or key
    return text.format(**kwargs) if kwargs else text


def bi(texts: dict[str, str]) -> str:
    """Pick the current language from a {"zh": ..., "en": ...} dict of engine or bank data."""
    return texts.get(lang()) or texts.get("en") or next(iter(texts.values()), "")


def init_lang() -> str:
    """Resolve the language: ?lang= wins, then the session, then the default. Keep it in the URL."""
    wanted = st.query_params.get("lang")
    current = wanted if wanted in LANGS else st.session_state.get("lang", DEFAULT_LANG)
    if current not in LANGS:
        current = DEFAULT_LANG
    st.session_state["lang"] = current
    if st.query_params.get("lang") != current:
        st.query_params["lang"] = current
    return current


def _on_lang_change() -> None:
    chosen = st.session_state["lang_widget"]
    st.session_state["lang"] = chosen
    st.query_params["lang"] = chosen


def language_switch(where=None) -> None:
    """The 中文 / English switch (the sidebar's; every page has it)."""
    where = where or st.sidebar
    st.session_state["lang_widget"] = lang()
    where.radio("🌐 语言 / Language", LANGS, key="lang_widget", format_func=LANG_NAMES.get,
                horizontal=True, on_change=_on_lang_change)


# ---------------------------------------------------------------------------------------------
# Tokens: colour (Okabe–Ito) plus a second cue for every role, and a legend
# ---------------------------------------------------------------------------------------------

# role -> (colour, css of the second cue)
ROLES = {
    "ar": ("#56B4E9", "border:1px solid #56B4E9;"),                                   # sky blue, thin box
    "accepted": ("#009E73", "border-bottom:3px solid #009E73;"),                      # bluish green, solid underline
    "rejected": ("#D55E00", "text-decoration:line-through 2px;border:1px dashed #D55E00;opacity:.8;"),  # vermillion, struck
    "correction": ("#0072B2", "border-bottom:4px double #0072B2;font-weight:600;"),   # blue, double underline
    "bonus": ("#E69F00", "border-bottom:3px dotted #E69F00;font-weight:600;"),        # orange, dotted underline
    "changing": ("#F0E442", "text-decoration:underline wavy #9a8f00;"),              # yellow, wavy underline
    "window": ("#999999", "border:1px dashed #999999;opacity:.75;"),                  # grey, dashed box
    "nar_diff": ("#CC79A7", "border-bottom:3px dashed #CC79A7;"),                     # reddish purple, dashed underline
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


# ---------------------------------------------------------------------------------------------
# Lanes: a lane is the list of StepEvents of one mode; render it as far as `n` steps
# ---------------------------------------------------------------------------------------------

def spec_step_spans(step, show_rejected: bool = True) -> list[str]:
    """A spec/ar decode step as spans: accepted drafts, (struck) rejected drafts, correction/bonus."""
    if step.kind == "prefill" or not step.drafted:
        return [token_span(tok.piece, "ar", _tip(tok)) for tok in step.emitted]
    spans = []
    for i, tok in enumerate(step.emitted):
        if i < step.accepted:
            spans.append(token_span(tok.piece, "accepted", _tip(tok, "q", step.drafted[i].prob)))
        else:
            if show_rejected:
                spans += [token_span(d.piece, "rejected", _tip(d, "q")) for d in step.drafted[step.accepted:]]
            spans.append(token_span(tok.piece, step.extra_kind or "correction", _tip(tok)))
    return spans


def _tip(tok, name: str = "p", prob: float | None = None) -> str:
    prob = tok.prob if prob is None else prob
    return f"{tok.piece!r}" + (f"  {name}={prob:.3f}" if prob is not None else "")


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
    shown = steps[:n]
    spans: list[str] = []
    ids: list[int] = []
    if mode in ("ar", "spec"):
        for s in shown:
            spans += spec_step_spans(s, show_rejected)
            ids += [tok.id for tok in s.emitted]
    elif mode == "nar":
        for s in shown:
            for tok in s.emitted:
                pos = len(ids)
                same = reference_ids is not None and pos < len(reference_ids) and reference_ids[pos] == tok.id
                role = "ar" if same or reference_ids is None else "nar_diff"
                spans.append(token_span(tok.piece, role, _tip(tok)))
                ids.append(tok.id)
    else:  # jacobi: committed text, then the window still settling
        for s in shown:
            spans += [token_span(tok.piece, "ar", _tip(tok)) for tok in s.emitted]
            ids += [tok.id for tok in s.emitted]
        last = shown[-1] if shown else None
        if last is not None and last.kind == "iteration" and not last.emitted and last.window:
            changed = set(last.changed)
            spans.append(f'<span style="font-size:0.75em;opacity:.7"> ⟨{t("iteration_short", i=last.iteration)}⟩ </span>')
            spans += [token_span(tok.piece, "changing" if i in changed else "window") for i, tok in enumerate(last.window)]
    forwards = shown[-1].target_forwards + 1 if shown else 0
    seconds = sum(step_seconds(s) for s in shown)
    return LaneView(token_line(spans), len(ids), forwards, seconds, n >= len(steps), ids)


# ---------------------------------------------------------------------------------------------
# Shipped traces: app/traces/index.json + one sd.Trace JSON per lane
# ---------------------------------------------------------------------------------------------

@st.cache_data(show_spinner=False, max_entries=64)
def _load_trace(path: str, mtime: float):
    return sd.Trace.load(path)


def load_trace(path: Path):
    """sd.Trace or raises sd.SpecDecError (missing or corrupted file)."""
    try:
        mtime = path.stat().st_mtime
    except OSError as err:
        raise sd.SpecDecError(f"cannot read trace {path}: {err.strerror or err}") from err
    return _load_trace(str(path), mtime)


def load_index() -> list[dict]:
    """The examples listed in index.json (a warning and [] when it is missing or broken)."""
    path = traces_dir() / "index.json"
    if not path.is_file():
        st.warning(t("no_traces", path=str(path)))
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise ValueError("index.json must be a list")
        good = [e for e in data if isinstance(e, dict) and isinstance(e.get("lanes"), dict) and e.get("id")]
    except (OSError, ValueError) as err:
        st.warning(t("bad_index", path=str(path), cause=str(err)))
        return []
    return good


def example_title(entry: dict) -> str:
    title = entry.get("title")
    return bi(title) if isinstance(title, dict) and title else str(entry.get("id"))


def load_example(entry: dict) -> dict:
    """lane -> sd.Trace for one example; a corrupted lane file is skipped with a warning."""
    traces = {}
    for lane in LANES:
        rel = entry["lanes"].get(lane)
        if not rel:
            continue
        try:
            traces[lane] = load_trace(traces_dir() / rel)
        except sd.SpecDecError as err:
            st.warning(t("bad_trace", lane=t(f"lane_{lane}"), cause=str(err)))
    return traces


# ---------------------------------------------------------------------------------------------
# Prompts for the lab: specdec_core/prompts/quick.jsonl, or a few built-ins
# ---------------------------------------------------------------------------------------------

FALLBACK_PROMPTS = (
    ("copy", "Repeat the following sentence exactly: The quick brown fox jumps over the lazy dog near the river bank."),
    ("copy", "Rewrite this list in the same order, one item per line: apples, bread, milk, eggs, rice, tea."),
    ("chat", "What are three tips for staying focused while studying?"),
    ("chat", "Explain why the sky is blue in simple words."),
    ("story", "Write a short story about a lighthouse keeper who finds a bottle on the beach."),
    ("code", "Write a Python function that returns the factorial of n."),
)


@st.cache_data(show_spinner=False)
def _read_prompts(path: str, mtime: float) -> dict[str, list[str]]:
    from specdec_core.bench import load_prompts
    by_category: dict[str, list[str]] = {}
    for case in load_prompts(Path(path)):
        by_category.setdefault(case.category, []).append(case.turns[0])  # multi-turn: its first turn
    return by_category


def prompts_by_category() -> dict[str, list[str]]:
    path = prompts_file()
    try:
        return _read_prompts(str(path), path.stat().st_mtime)
    except (OSError, ImportError, sd.SpecDecError) as err:
        st.warning(t("prompts_fallback", path=str(path), cause=str(err)))
    fallback: dict[str, list[str]] = {}
    for category, prompt in FALLBACK_PROMPTS:
        fallback.setdefault(category, []).append(prompt)
    return fallback


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------

def prompt_hint(prompt: str) -> bool:
    """True when the prompt is empty; then show the hint under the disabled button."""
    empty = not prompt.strip()
    if empty:
        st.caption(t("empty_prompt_hint"))
    return empty


def sleep_frame(speed: float) -> None:
    delay = animation_delay() / max(speed, 1e-3)
    if delay > 0:
        time.sleep(delay)


def drafter_options(first: str) -> tuple[str, ...]:
    """Every drafter of the engine's registry (the app keeps no list of its own), `first` first: the
    page's default. Imported on first use, so pages that never draft do not pay for torch."""
    from specdec_core.drafters import DRAFTERS

    return (first, *(d for d in DRAFTERS if d != first))


def drafter_label(name: str) -> str:
    return t(f"drafter_{name.replace('-', '_')}")


def labels(options, label) -> callable:
    """A format_func with the labels computed now, in this run's language (AppTest and widgets may
    call format_func outside the script run, where the session — and so the language — is unknown)."""
    table = {option: label(option) for option in options}
    return lambda option: table.get(option, str(option))


def selectbox(where, text: str, options, key: str, label=str, **kwargs):
    """st.selectbox over `options` with translated labels that always returns one of `options` (`choice`)."""
    return choice(where.selectbox, text, options, key, label, **kwargs)


def choice(widget, text: str, options, key: str, label=str, **kwargs):
    """A choice widget (`where.selectbox`, `where.radio`) over `options` with translated labels that
    always returns one of `options`.

    After a language switch the browser may send back the label of the old language, which is no
    option at all (Streamlit then hands the label itself back as the value): fall back to the last
    valid choice (or the first option) instead of crashing."""
    options = list(options)
    valid_key = f"{key}__valid"
    fallback = st.session_state.get(valid_key)
    fallback = fallback if fallback in options else options[0]
    if key in st.session_state and st.session_state[key] not in options:
        st.session_state[key] = fallback
    value = widget(text, options, key=key, format_func=labels(options, label), **kwargs)
    value = value if value in options else fallback
    st.session_state[valid_key] = value
    return value
