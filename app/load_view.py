"""The serving load experiment on the "When does it pay?" page: read the shipped results, build the
charts, put the findings into words, and run a small live version on this machine.

Every number the page states is computed here from a results dict of `specdec_core.bench.loadtest`
(`run_load_test`'s output, shipped as benchmarks/load-cpu.json); none is written into the text.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

from app import ROOT, charts
from app.charts import shown_path
from app.language import t

from specdec_core.bench.loadtest import LoadConfig, run_load_test, serving_costs

KNOWN_SCHEMES = ("ar", "spec-fixed", "spec-confidence", "spec-hardware")

# The live run: short enough for a 2-core CPU (about 30 s with the cost table), big enough for a curve.
LIVE = LoadConfig(concurrency=(1, 2, 4), schemes=("ar", "spec-hardware"), requests_per_level=1, max_new_tokens=16)
LIVE_COSTS = {"rows": (1, 2, 4), "tokens_per_row": (1, 2, 5), "repeats": 1}


def results_path() -> Path:
    """The shipped results (SPECDEC_APP_LOAD_RESULTS overrides it, e.g. in tests)."""
    return Path(os.environ.get("SPECDEC_APP_LOAD_RESULTS") or ROOT / "benchmarks" / "load-cpu.json")


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------

RUN_KEYS = ("scheme", "concurrency", "per_user_tok_s", "aggregate_tok_s")


@st.cache_data(show_spinner=False, max_entries=8)
def _read(path: str, mtime: float) -> dict:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise ValueError("no list of runs")
    runs = [r for r in data["runs"] if isinstance(r, dict) and all(k in r for k in RUN_KEYS)]
    if not runs:
        raise ValueError("no run has scheme, concurrency, per-user and aggregate tokens/s")
    return {**data, "runs": runs}


def load_results(path: Path) -> dict | None:
    """The results, or None after a warning (missing, empty or unreadable file)."""
    try:
        return _read(str(path), path.stat().st_mtime)
    except FileNotFoundError:
        st.warning(t("load_missing", path=shown_path(path)))
    except (OSError, ValueError) as err:  # json.JSONDecodeError is a ValueError
        st.warning(t("load_unreadable", path=shown_path(path), cause=str(err) or type(err).__name__))
    return None


def schemes_of(results: dict) -> list[str]:
    """The schemes that were run, in the run's order."""
    seen = []
    for r in results["runs"]:
        if r["scheme"] not in seen:
            seen.append(r["scheme"])
    return seen


def runs_of(results: dict, scheme: str) -> list[dict]:
    return sorted((r for r in results["runs"] if r["scheme"] == scheme), key=lambda r: r["concurrency"])


def scheme_label(scheme: str) -> str:
    return t(f"load_scheme_{scheme.replace('-', '_')}") if scheme in KNOWN_SCHEMES else scheme


def environment_label(results: dict, took: bool = True) -> str:
    """Where and when the results were measured (from the results' own environment record)."""
    env = results.get("environment") or {}
    label = t("load_measured_on", machine=env.get("machine") or env.get("model", "?"), cpu=env.get("cpu", "?"),
              torch=env.get("torch", "?"), date=env.get("date", "?"),
              tokens=(results.get("config") or {}).get("max_new_tokens", "?"))
    if took and isinstance(env.get("wall_s"), (int, float)):
        label += " " + t("load_run_took", minutes=f"{env['wall_s'] / 60:.0f}")
    return label


# ---------------------------------------------------------------------------------------------
# Findings: what the numbers say, computed
# ---------------------------------------------------------------------------------------------

def first_fixed_below_ar(results: dict) -> dict | None | bool:
    """The concurrency from which spec-fixed's aggregate tokens/s stays below ar's at every higher level
    both ran (where it starts to lose for good: a dip at a low level that recovers is noise or the
    level's prompt mix), with both values there; None when it ends above ar; False when either scheme
    is missing."""
    ar = {r["concurrency"]: r["aggregate_tok_s"] for r in runs_of(results, "ar")}
    fixed = {r["concurrency"]: r["aggregate_tok_s"] for r in runs_of(results, "spec-fixed")}
    levels = sorted(set(ar) & set(fixed))
    if not levels:
        return False
    c = None
    for level in reversed(levels):
        if fixed[level] >= ar[level]:
            break
        c = level
    return None if c is None else {"concurrency": c, "fixed": fixed[c], "ar": ar[c]}


def at_top(results: dict, scheme: str = "spec-hardware") -> dict | None:
    """scheme vs ar aggregate tokens/s at the highest concurrency both ran."""
    ar = {r["concurrency"]: r for r in runs_of(results, "ar")}
    other = {r["concurrency"]: r for r in runs_of(results, scheme)}
    levels = set(ar) & set(other)
    if not levels:
        return None
    c = max(levels)
    a, s = ar[c]["aggregate_tok_s"], other[c]["aggregate_tok_s"]
    return {"concurrency": c, "ar": a, "scheme": s, "ratio": s / a if a else None}


def matched(results: dict) -> dict | None:
    """The matched-throughput comparison of spec-hardware with ar (loadtest.matched_throughput)."""
    m = results.get("matched_throughput")
    return m if isinstance(m, dict) and m.get("scheme") else None


def findings(results: dict) -> list[str]:
    """The findings as markdown lines, every number from `results`."""
    lines = []
    m = matched(results)
    if m is not None:
        speedup = m.get("per_user_speedup")
        if speedup is None:
            lines.append(t("load_find_matched_null", scheme=scheme_label(m["scheme"]), n=len(m.get("levels") or [])))
        else:
            lines.append(t("load_find_matched", scheme=scheme_label(m["scheme"]), ratio=f"{speedup:.2f}",
                           pct=f"{100 * (speedup - 1):+.0f}", n=len(m.get("levels") or [])))
            mean, by_category = m.get("per_user_mean_speedup"), m.get("per_user_speedup_by_category") or {}
            if mean and by_category:
                cats = ", ".join(f"{c} {x:.2f}×" if x else f"{c} –" for c, x in by_category.items())
                lines.append(t("load_find_spread", mean=f"{mean:.2f}", cats=cats))
    below = first_fixed_below_ar(results)
    if below is None:
        lines.append(t("load_find_fixed_never"))
    elif below is not False:
        lines.append(t("load_find_fixed_below", c=below["concurrency"], fixed=f"{below['fixed']:.1f}",
                       ar=f"{below['ar']:.1f}"))
    top = at_top(results)
    if top is not None and top["ratio"] is not None:
        lines.append(t("load_find_top", c=top["concurrency"], hw=f"{top['scheme']:.1f}", ar=f"{top['ar']:.1f}",
                       ratio=f"{top['ratio']:.2f}"))
    ident = [r for r in results["runs"] if isinstance(r.get("identical_to_ar"), str) and "/" in r["identical_to_ar"]]
    if ident:
        same = sum(int(r["identical_to_ar"].split("/")[0]) for r in ident)
        total = sum(int(r["identical_to_ar"].split("/")[1]) for r in ident)
        lines.append(t("load_find_identical", same=same, total=total))
    return lines


# ---------------------------------------------------------------------------------------------
# Charts
# ---------------------------------------------------------------------------------------------

def throughput_figure(results: dict, title: str) -> go.Figure:
    """Per-user tokens/s against aggregate tokens/s, one line per scheme, points labelled C=…"""
    fig = go.Figure()
    for i, scheme in enumerate(schemes_of(results)):
        runs = runs_of(results, scheme)
        fig.add_scatter(x=[r["aggregate_tok_s"] for r in runs], y=[r["per_user_tok_s"] for r in runs],
                        mode="lines+markers+text", name=scheme_label(scheme), **charts.series_style(i),
                        text=[f"C={r['concurrency']}" for r in runs], textposition="top center",
                        hovertemplate="%{text}: %{x:.1f} → %{y:.1f} tok/s<extra>" + scheme + "</extra>")
    # Log axes: concurrency doubles from point to point, and both speeds change by large factors.
    fig.update_layout(title=title, xaxis_title=t("load_axis_aggregate"), yaxis_title=t("load_axis_per_user"),
                      xaxis_type="log", yaxis_type="log", height=420, margin=dict(t=50, b=10),
                      legend=dict(orientation="h", y=-0.2))
    return fig


def verify_figure(results: dict) -> go.Figure:
    """Mean tokens verified per request per step against concurrency, one line per scheme."""
    fig = go.Figure()
    levels = sorted({r["concurrency"] for r in results["runs"]})
    for i, scheme in enumerate(schemes_of(results)):
        runs = [r for r in runs_of(results, scheme) if "mean_verify_tokens" in r]
        if runs:
            fig.add_scatter(x=[r["concurrency"] for r in runs], y=[r["mean_verify_tokens"] for r in runs],
                            mode="lines+markers", name=scheme_label(scheme), **charts.series_style(i))
    fig.update_layout(title=t("load_verify_title"), xaxis_title=t("load_axis_concurrency"),
                      yaxis_title=t("load_axis_verify"), xaxis=dict(type="log", tickvals=levels), height=380,
                      margin=dict(t=50, b=10), legend=dict(orientation="h", y=-0.25))
    return fig


def decisions_figure(results: dict, scheme: str = "spec-hardware") -> go.Figure | None:
    """Share of the scheduler's decisions (drafts verified per request per step) at each concurrency."""
    runs = [r for r in runs_of(results, scheme) if isinstance(r.get("scheduler_decisions"), dict)]
    if not runs:
        return None
    keys = sorted({int(k) for r in runs for k in r["scheduler_decisions"]})
    x = [f"C={r['concurrency']}" for r in runs]
    fig = go.Figure()
    for j, key in enumerate(keys):
        shares = []
        for r in runs:
            total = sum(r["scheduler_decisions"].values()) or 1
            shares.append(r["scheduler_decisions"].get(str(key), 0) / total)
        # Light (0 drafts) to dark (many): a sequential blue scale, readable without colour too (the legend order).
        shade = 0.15 + 0.85 * (j / max(1, len(keys) - 1))
        colour = f"rgba(0,114,178,{shade:.2f})"
        fig.add_bar(x=x, y=shares, name=t("load_decision", n=key), marker_color=colour,
                    marker_line=dict(color=charts.DARK_GREY, width=0.5))
    fig.update_layout(barmode="stack", title=t("load_decisions_title", scheme=scheme_label(scheme)),
                      xaxis_title=t("load_axis_concurrency"), yaxis_title=t("load_axis_share"), yaxis_tickformat=".0%",
                      height=380, margin=dict(t=50, b=10), legend=dict(traceorder="normal"))
    return fig


def runs_table(results: dict) -> list[dict]:
    rows = []
    for scheme in schemes_of(results):
        for r in runs_of(results, scheme):
            rows.append({
                t("load_col_scheme"): scheme_label(scheme), "C": r["concurrency"],
                t("load_col_per_user"): round(r["per_user_tok_s"], 2), t("load_col_aggregate"): round(r["aggregate_tok_s"], 2),
                t("load_col_ttft"): round(r["ttft_s"], 3) if "ttft_s" in r else None,
                t("load_col_p95_itl"): round(r["p95_itl_s"], 3) if "p95_itl_s" in r else None,
                t("load_col_verify"): round(r["mean_verify_tokens"], 2) if "mean_verify_tokens" in r else None,
                "τ": round(r["tau"], 2) if "tau" in r else None,
                t("load_col_identical"): r.get("identical_to_ar"),
            })
    return rows


# ---------------------------------------------------------------------------------------------
# The live run
# ---------------------------------------------------------------------------------------------

class Progress:
    """tqdm's `update(n)` on an st.progress bar."""

    def __init__(self, widget, total: int) -> None:
        self.widget, self.total, self.done = widget, max(1, total), 0
        self.start = time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.done += n
        self.widget.progress(min(1.0, self.done / self.total),
                             text=t("load_live_progress", done=self.done, total=self.total,
                                    seconds=f"{time.perf_counter() - self.start:.0f}"))


def live_steps(cfg: LoadConfig = LIVE) -> int:
    """Progress steps of a live run: the cost table's forwards (first run only) and the requests."""
    forwards = (LIVE_COSTS["repeats"] + 1) * len(LIVE_COSTS["rows"]) * len(LIVE_COSTS["tokens_per_row"])
    return forwards + cfg.requests_per_level * sum(cfg.concurrency) * len(cfg.schemes)


def run_live(lm, store: dict, bar: Progress, cfg: LoadConfig = LIVE) -> dict:
    """A small load test on this machine; the small cost table is measured once per server and model.
    Call it under the model lock. Returns run_load_test's results plus the live run's wall seconds."""
    start = time.perf_counter()
    key = ("load_costs", lm.name, tuple(sorted((k, tuple(v) if isinstance(v, tuple) else v) for k, v in LIVE_COSTS.items())))
    costs = store.get(key)
    if costs is None:
        costs = serving_costs(lm, progress=lambda: bar.update(1), **LIVE_COSTS)
        store[key] = costs
    else:
        bar.update((LIVE_COSTS["repeats"] + 1) * len(LIVE_COSTS["rows"]) * len(LIVE_COSTS["tokens_per_row"]))
    results = run_load_test(lm, replace(cfg), bar, costs=costs)
    results["live_s"] = time.perf_counter() - start
    return results
