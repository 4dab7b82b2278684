"""Widgets the pages share: choice widgets with translated labels that survive a language switch, the
drafter choice with its model card, and the empty-prompt hint."""
from __future__ import annotations

import streamlit as st

from app.language import t


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


def drafter_options(first: str) -> tuple[str, ...]:
    """Every drafter of the engine's registry (the app keeps no list of its own), `first` first: the
    page's default. Imported on first use, so pages that never draft do not pay for torch."""
    from specdec_core.drafters import DRAFTERS

    return (first, *(d for d in DRAFTERS if d != first))


def tree_picker(where, drafter: str, key: str) -> tuple[str, int]:
    """Chain or tree (only the kinds `drafter` can draft) and the tree's size (0: what pays on this
    machine's measured costs, chosen each step)."""
    from specdec_core.drafters import TREE_DRAFTERS

    kinds = ("chain", *(kind for kind, names in TREE_DRAFTERS.items() if drafter in names))
    tree = selectbox(where, t("tree"), kinds, f"{key}_tree", lambda kind: t(f"tree_{kind}"), help=t("tree_help"))
    nodes = where.select_slider(t("tree_nodes"), (0, 2, 4, 6, 8, 12, 16, 24, 32), value=0, key=f"{key}_tree_nodes",
                                format_func=lambda n: t("tree_auto") if n == 0 else str(n), help=t("tree_nodes_help"),
                                disabled=tree == "chain")
    return tree, nodes


def drafter_label(name: str) -> str:
    return t(f"drafter_{name.replace('-', '_')}")


def drafter_card(where, drafter: str, model: str = "smollm2-135m") -> None:
    """A trained drafter's model card (how its shipped weights were made: data, sources, steps across
    sittings, offline acceptance) in an expander under the picker; nothing for drafters without weights."""
    from specdec_core.drafters.weights import WEIGHTS_DIR

    card = WEIGHTS_DIR / model / f"{drafter}.md"
    if card.is_file():
        with where.expander(t("model_card")):
            st.markdown(card.read_text(encoding="utf-8"))


def prompt_hint(prompt: str) -> bool:
    """True when the prompt is empty; then show the hint under the disabled button."""
    empty = not prompt.strip()
    if empty:
        st.caption(t("empty_prompt_hint"))
    return empty
