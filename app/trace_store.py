"""The shipped example traces: app/traces/index.json + one sd.Trace JSON per lane (race and inspector)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import streamlit as st

from app import APP_DIR
from app.language import bi, t

import specdec_core as sd

LANES = ("ar", "nar", "jacobi", "spec")


def traces_dir() -> Path:
    """app/traces/ (tests: SPECDEC_APP_TRACES=...)."""
    return Path(os.environ.get("SPECDEC_APP_TRACES") or APP_DIR / "traces")


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
