"""The block drafter on the lab page: how far its confidence can be trusted, and what its Markov head
buys per draft position.

Two shipped files, read here and never recomputed (a learner's CPU could not redo either in a page run):
- the calibration report (benchmarks/block-calibration-cpu.json: `eval-draft --kind block --calibration`,
  `specdec_core.training.calibration`): per regime and draft position j, the reliability tables of the
  prefix survival S_j = c_1 ⋯ c_j before (T = 1) and after temperature scaling, with their ECE;
- a bench result (benchmarks/block-tau-cpu.json: `bench`'s output) whose summary holds the pooled survival
  s_i (`acceptance_per_pos`) of block, block-parallel and, where present, eagle at k = 5 and 7.
A missing file is an st.info (not measured yet), an unreadable one an st.warning: never a traceback.
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

from app import ROOT, charts, widgets
from app.charts import shown_path
from app.language import t
from specdec_core.metrics import conditional_acceptance

REGIMES = ("greedy", "sampled")
TAU_DRAFTERS = ("block", "block-parallel", "eagle")  # eagle: the serial reference, when the file has it
TAU_COLOURS = {"block": charts.VERMILLION, "block-parallel": charts.BLUE, "eagle": charts.GREEN}
TAU_K_DEFAULT = 7
# A bench summary label of a greedy spec run at one k (bench.label_for with sweep=True).
TAU_LABEL = re.compile(r"spec:(?P<drafter>[a-z-]+)@k=(?P<k>\d+),t=0")


def calibration_path() -> Path:
    """The shipped calibration report (SPECDEC_APP_CALIBRATION overrides it, e.g. in tests)."""
    return Path(os.environ.get("SPECDEC_APP_CALIBRATION") or ROOT / "benchmarks" / "block-calibration-cpu.json")


def tau_path() -> Path:
    """The shipped block vs block-parallel bench result (SPECDEC_APP_BLOCK_TAU overrides it)."""
    return Path(os.environ.get("SPECDEC_APP_BLOCK_TAU") or ROOT / "benchmarks" / "block-tau-cpu.json")


# ---------------------------------------------------------------------------------------------
# Reading and checking (pure but for the cache: a malformed file raises ValueError with the reason)
# ---------------------------------------------------------------------------------------------

@st.cache_data(show_spinner=False, max_entries=8)
def _read_json(path: str, mtime: float) -> object:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} is not a number")
    return float(value)


def _check_table(rows, what: str) -> None:
    if not isinstance(rows, list):
        raise ValueError(f"{what} is not a list of bins")
    for row in rows:
        if not isinstance(row, dict):
            raise ValueError(f"{what} holds a bin that is not an object")
        for key in ("predicted", "observed", "count"):
            _number(row.get(key), f"{what}: {key}")


def check_calibration(data) -> dict:
    """The report, checked: an object with at least one regime of REGIMES whose positions hold what the
    page reads (ValueError naming the first thing missing)."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    for regime in REGIMES:
        if regime not in data:
            continue
        positions = data[regime].get("positions") if isinstance(data[regime], dict) else None
        if not isinstance(positions, list) or not positions:
            raise ValueError(f"{regime}: no list of positions")
        for p in positions:
            if not isinstance(p, dict):
                raise ValueError(f"{regime}: a position is not an object")
            for key in ("position", "temperature", "survival", "ece_before", "ece_after"):
                _number(p.get(key), f"{regime} position {p.get('position')}: {key}")
            for key in ("reliability_before", "reliability_after"):
                _check_table(p.get(key), f"{regime} position {p['position']}: {key}")
    if not any(regime in data for regime in REGIMES):
        raise ValueError(f"neither {' nor '.join(REGIMES)} results")
    return data


def check_tau(data) -> dict[int, dict[str, dict]]:
    """{k: {drafter: summary entry}} of the greedy spec runs of TAU_DRAFTERS that have per-position
    acceptance; ValueError if malformed or without any block run."""
    if not isinstance(data, dict) or not isinstance(data.get("summary"), dict):
        raise ValueError("no summary object")
    runs: dict[int, dict[str, dict]] = {}
    for label, entry in data["summary"].items():
        match = TAU_LABEL.fullmatch(label)
        if not match or match["drafter"] not in TAU_DRAFTERS:
            continue
        per_pos = entry.get("acceptance_per_pos") if isinstance(entry, dict) else None
        if not isinstance(per_pos, list) or not per_pos:
            raise ValueError(f"{label}: no acceptance_per_pos")
        for s in per_pos:
            if s is not None:
                _number(s, f"{label}: acceptance_per_pos")
        runs.setdefault(int(match["k"]), {})[match["drafter"]] = entry
    runs = {k: by for k, by in sorted(runs.items()) if "block" in by or "block-parallel" in by}
    if not runs:
        raise ValueError("no greedy spec:block or spec:block-parallel run")
    return runs


def _load(path: Path, check, missing_key: str, unreadable_key: str):
    """check(the file's JSON), or None after an st.info (missing) or st.warning (unreadable, malformed)."""
    try:
        return check(_read_json(str(path), path.stat().st_mtime))
    except FileNotFoundError:
        st.info(t(missing_key, path=shown_path(path)))
    except (OSError, ValueError) as err:  # json.JSONDecodeError is a ValueError
        st.warning(t(unreadable_key, path=shown_path(path), cause=str(err) or type(err).__name__))
    return None


# ---------------------------------------------------------------------------------------------
# Charts
# ---------------------------------------------------------------------------------------------

def reliability_figure(p: dict) -> go.Figure:
    """Observed vs predicted S_j per bin, before and after scaling, with the diagonal. A marker's area
    follows its bin's count: a sparse bin's distance from the diagonal is mostly noise."""
    fig = go.Figure()
    fig.add_scatter(x=[0, 1], y=[0, 1], mode="lines", name=t("lab_calib_diagonal"),
                    line=dict(color=charts.BLACK, dash="dash", width=1.5))
    most = max([row["count"] for key in ("reliability_before", "reliability_after") for row in p[key]], default=1)
    shown = (("reliability_before", t("lab_calib_before", ece=f"{p['ece_before']:.3f}"), charts.ORANGE, "circle-open"),
             ("reliability_after", t("lab_calib_after", temperature=f"{p['temperature']:.2f}", ece=f"{p['ece_after']:.3f}"),
              charts.BLUE, "diamond"))
    for key, name, colour, symbol in shown:
        rows = p[key]
        fig.add_scatter(x=[r["predicted"] for r in rows], y=[r["observed"] for r in rows], mode="lines+markers",
                        name=name, customdata=[r["count"] for r in rows], line=dict(color=colour),
                        marker=dict(color=colour, symbol=symbol, line=dict(width=2, color=colour),
                                    size=[6 + 16 * math.sqrt(r["count"] / most) for r in rows]),
                        hovertemplate=t("lab_calib_hover", predicted="%{x:.2f}", observed="%{y:.2f}", n="%{customdata}")
                        + "<extra></extra>")
    fig.update_layout(title=t("lab_calib_title", j=p["position"]), xaxis_title=t("lab_calib_predicted"),
                      yaxis_title=t("lab_calib_observed"), xaxis_range=[0, 1], yaxis_range=[0, 1.02], height=420,
                      margin=dict(t=50, b=10), legend=dict(orientation="h", y=-0.2))
    return fig


def ece_rows(positions: list[dict]) -> list[dict]:
    """One row per position: its temperature, observed survival, ECE before and after, AUC (greedy)."""
    with_auc = any(p.get("auc") is not None for p in positions)
    rows = []
    for p in positions:
        row = {"j": p["position"], t("col_calib_temperature"): round(p["temperature"], 3),
               t("col_calib_survival"): round(p["survival"], 3), t("col_calib_ece_before"): round(p["ece_before"], 4),
               t("col_calib_ece_after"): round(p["ece_after"], 4)}
        if with_auc:
            row["AUC"] = round(p["auc"], 3) if isinstance(p.get("auc"), (int, float)) else None
        rows.append(row)
    return rows


def tau_figure(runs: dict[str, dict], k: int) -> go.Figure:
    """a_i per position for each drafter of `runs` ({drafter: summary entry} at one k), τ in its name."""
    fig = go.Figure()
    for drafter in TAU_DRAFTERS:
        if drafter not in runs:
            continue
        entry = runs[drafter]
        a = conditional_acceptance(entry["acceptance_per_pos"])
        tau = entry.get("mean_accepted_length")
        name = widgets.drafter_label(drafter) + (t("lab_block_tau_suffix", tau=f"{tau:.2f}")
                                                 if isinstance(tau, (int, float)) else "")
        fig.add_scatter(x=list(range(1, len(a) + 1)), y=a, mode="lines+markers", name=name,
                        line=dict(color=TAU_COLOURS[drafter], width=3, dash="dot" if drafter == "eagle" else "solid"),
                        marker=dict(size=9), hovertemplate="i=%{x}<br>aᵢ=%{y:.3f}<extra></extra>")
    fig.update_layout(title=t("lab_block_tau_title", k=k), xaxis_title=t("lab_draft_position"),
                      yaxis_title=t("lab_block_tau_axis"), yaxis_range=[0, 1.05], xaxis=dict(dtick=1), height=400,
                      margin=dict(t=50, b=10), legend=dict(orientation="h", y=-0.2))
    return fig


# ---------------------------------------------------------------------------------------------
# The lab's section
# ---------------------------------------------------------------------------------------------

def show_calibration() -> None:
    """Reliability diagram of the block drafter's confidence, one regime and position at a time."""
    st.markdown(f"#### {t('lab_calib_h')}")
    report = _load(calibration_path(), check_calibration, "lab_calib_missing", "lab_calib_unreadable")
    if report is None:
        return
    c = st.columns([2, 3])
    regimes = tuple(r for r in REGIMES if r in report)
    # Translated labels: `widgets.choice` keeps a stale label from before a language switch out of the value.
    regime = widgets.choice(c[0].radio, t("lab_calib_regime"), regimes, "lab_calib_regime",
                            lambda r: t(f"lab_calib_regime_{r}"), horizontal=True)
    positions = report[regime]["positions"]
    by_j = {p["position"]: p for p in positions}
    j = c[1].select_slider(t("lab_calib_position"), list(by_j), key="lab_calib_position") if len(by_j) > 1 \
        else next(iter(by_j))
    left, right = st.columns([3, 2])
    left.plotly_chart(reliability_figure(by_j[j]), width="stretch", key="lab_calib_reliability")
    right.dataframe(ece_rows(positions), hide_index=True, width="stretch")
    st.caption(t(f"lab_calib_note_{regime}", blocks=report[regime].get("blocks", "?"),
                 fit=report.get("fit_sequences", "?"), test=report.get("test_sequences", "?")))


def show_tau() -> None:
    """Conditional acceptance per position: block vs block-parallel (and eagle), at a chosen k."""
    st.markdown(f"#### {t('lab_block_tau_h')}")
    runs = _load(tau_path(), check_tau, "lab_block_tau_missing", "lab_block_tau_unreadable")
    if runs is None:
        return
    ks = list(runs)
    k = st.radio("k", ks, index=ks.index(TAU_K_DEFAULT) if TAU_K_DEFAULT in ks else len(ks) - 1, horizontal=True,
                 key="lab_block_tau_k")
    st.plotly_chart(tau_figure(runs[k], k), width="stretch", key="lab_block_tau")
    st.caption(t("lab_block_tau_note"))


def show() -> None:
    st.subheader(t("lab_block_h"))
    st.markdown(t("lab_block_intro"))
    show_calibration()
    show_tau()
