"""The lab's prompts by category: specdec_core/prompts/quick.jsonl, or a few built-ins."""
from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from app import ROOT
from app.language import t

import specdec_core as sd

FALLBACK_PROMPTS = (
    ("copy", "Repeat the following sentence exactly: The quick brown fox jumps over the lazy dog near the river bank."),
    ("copy", "Rewrite this list in the same order, one item per line: apples, bread, milk, eggs, rice, tea."),
    ("chat", "What are three tips for staying focused while studying?"),
    ("chat", "Explain why the sky is blue in simple words."),
    ("story", "Write a short story about a lighthouse keeper who finds a bottle on the beach."),
    ("code", "Write a Python function that returns the factorial of n."),
)


def prompts_file() -> Path:
    """quick.jsonl (tests: SPECDEC_APP_PROMPTS=...)."""
    return Path(os.environ.get("SPECDEC_APP_PROMPTS") or ROOT / "specdec_core" / "prompts" / "quick.jsonl")


@st.cache_data(show_spinner=False)
def _read_prompts(path: str, mtime: float) -> dict[str, list[str]]:
    from specdec_core.suite import load_prompts
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
