"""The UI language: one JSON file of UI strings per language (app/i18n/); the choice lives in ?lang=
and the session."""
from __future__ import annotations

import json
from functools import lru_cache

import streamlit as st

from app import APP_DIR

LANGS = ("zh", "en")
DEFAULT_LANG = "zh"
LANG_NAMES = {"zh": "中文", "en": "English"}


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
