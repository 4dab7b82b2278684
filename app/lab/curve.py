"""The scaling curve on the lab page: first-draft acceptance on real prompts against training data.

Reads the shipped result of `train-curve` (benchmarks/scaling-curve-cpu.json, `specdec_core.training.curve`):
one drafter kind trained from scratch, with the same steps, at several prefixes of the committed corpus
(sources "all") and once on the templates alone, each point scored on the target's own greedy answers
to the suite's chat, qa and story prompts (walked first-draft acceptance s₁ and τ at k). Training a
point takes tens of minutes, so the page only reads the file: a missing one is an st.info with the
command, an unreadable or malformed one an st.warning, never a traceback.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

from app import ROOT, charts, widgets
from app.charts import shown_path
from app.language import t

METRICS = ("s1", "tau")


def curve_path() -> Path:
    """The shipped curve (SPECDEC_APP_CURVE overrides it, e.g. in tests)."""
    return Path(os.environ.get("SPECDEC_APP_CURVE") or ROOT / "benchmarks" / "scaling-curve-cpu.json")


@st.cache_data(show_spinner=False, max_entries=4)
def _read_json(path: str, mtime: float) -> object:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def check_curve(data: object) -> dict:
    """The curve's setting and its points as {sources: [point, ...] by tokens}; ValueError on a malformed file."""
    if not isinstance(data, dict) or not isinstance(data.get("points"), dict) or not isinstance(data.get("setting"), dict):
        raise ValueError("not a train-curve result (no setting / points)")
    by_source: dict[str, list[dict]] = {}
    for name, point in data["points"].items():
        categories = point.get("categories") if isinstance(point, dict) else None
        if not isinstance(categories, dict) or not categories:
            raise ValueError(f"point {name!r} has no scores")
        for category, row in categories.items():
            for metric in METRICS:
                value = row.get(metric) if isinstance(row, dict) else None
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise ValueError(f"point {name!r}, {category}: {metric} is not a number")
        tokens = point.get("response_tokens")
        if not isinstance(tokens, int) or tokens < 1:
            raise ValueError(f"point {name!r} has no response_tokens")
        by_source.setdefault(str(point.get("sources", "all")), []).append(point)
    if not by_source:
        raise ValueError("the curve has no points yet")
    return {"setting": data["setting"], "sources": {s: sorted(p, key=lambda p: p["response_tokens"]) for s, p in by_source.items()}}


def curve_figure(curve: dict, metric: str) -> go.Figure:
    """One line per category over the corpus prefixes (log x); the templates-only point(s) as open markers
    of the same colour, so the gap between them at equal size is the prompt distribution's effect."""
    fig = go.Figure()
    points = curve["sources"]
    categories = sorted({c for pts in points.values() for p in pts for c in p["categories"]})
    for i, category in enumerate(categories):
        colour = charts.colour(i)
        for sources, pts in points.items():
            shown = [p for p in pts if category in p["categories"]]
            mixed = sources == "all"
            fig.add_scatter(
                x=[p["response_tokens"] for p in shown], y=[p["categories"][category][metric] for p in shown],
                mode="lines+markers" if mixed else "markers",
                name=f"{category} · {t('lab_curve_all') if mixed else t('lab_curve_only', source=sources)}",
                marker=dict(color=colour, size=9 if mixed else 13, symbol="circle" if mixed else "diamond-open",
                            line=dict(width=2, color=colour)),
                line=dict(color=colour))
    fig.update_layout(xaxis_title=t("lab_curve_x"), yaxis_title=t(f"lab_curve_y_{metric}"), xaxis_type="log",
                      height=420, margin=dict(t=30), legend=dict(orientation="h", y=-0.25))
    return fig


def curve_rows(curve: dict) -> list[dict]:
    """The table beside the chart: one row per point, a column per category for s₁ and τ."""
    rows = []
    for sources, pts in curve["sources"].items():
        for p in pts:
            row = {t("lab_curve_col_sources"): sources, t("lab_curve_col_tokens"): p["response_tokens"],
                   t("lab_curve_col_sequences"): p.get("sequences")}
            for category, scores in sorted(p["categories"].items()):
                row[f"{category} s₁"] = round(scores["s1"], 3)
                row[f"{category} τ"] = round(scores["tau"], 2)
            rows.append(row)
    return rows


def show() -> None:
    st.subheader(t("lab_curve_h"))
    st.markdown(t("lab_curve_intro"))
    path = curve_path()
    try:
        curve = check_curve(_read_json(str(path), path.stat().st_mtime))
    except FileNotFoundError:
        st.info(t("lab_curve_missing", path=shown_path(path)))
        return
    except (OSError, ValueError) as err:  # json.JSONDecodeError is a ValueError
        st.warning(t("lab_curve_unreadable", path=shown_path(path), cause=str(err) or type(err).__name__))
        return
    metric = widgets.choice(st.radio, t("lab_curve_metric"), METRICS, "lab_curve_metric",
                            lambda m: t(f"lab_curve_y_{m}"), horizontal=True)
    st.plotly_chart(curve_figure(curve, metric), width="stretch", key="lab_curve")
    st.dataframe(curve_rows(curve), hide_index=True, width="stretch")
    setting = curve["setting"]
    st.caption(t("lab_curve_note", kind=setting.get("kind", "?"), steps=setting.get("steps", "?"),
                 batch=setting.get("batch_size", "?"), k=setting.get("k", "?")))
