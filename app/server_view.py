"""The "Your server" page: the lab's bench and load test pointed at an OpenAI-compatible server (and a
baseline with speculation off), then the lab's charts drawn from that server's own numbers.

The measuring is the CLI's `bench --endpoint` (`specdec_core.bench.remote`: `open_server`, `run_remote_bench` /
`summarise_remote`) and `load-test --endpoint` (`bench.remote_load`: `run_remote_load_test` / `remote_load_result`).
This module only picks the small run, reports progress, keeps what completed when a server fails, and
turns the results into charts, tables and sentences. Every number shown is read from the results dict.
"""
from __future__ import annotations

import threading
from dataclasses import asdict, dataclass

import plotly.graph_objects as go
import streamlit as st

from app import charts, load_view
from app.language import t

from specdec_core.bench import remote, remote_client, remote_load
from specdec_core.bench.loadtest import PROMPTS_FILE, LoadConfig, workload
from specdec_core.errors import SpecDecError

LABELS = ("endpoint", "baseline")
COLOURS = {"endpoint": charts.BLUE, "baseline": charts.ORANGE}
REQUESTS_PER_LEVEL = 2  # × C requests per level and server: a small run, as the live load test on "pays"
MAX_LEVEL = 32  # a concurrency level above this is not a "small" run from a browser page
MAX_LEVELS = 6


@dataclass(frozen=True)
class Settings:
    endpoint: str
    baseline: str = ""
    model: str = ""
    prompts: int = 4
    max_tokens: int = 32
    levels: tuple[int, ...] = (1, 2)
    no_prompt_cache: bool = False


# ---------------------------------------------------------------------------------------------
# Input checks: a warning text, or None when the settings can be run
# ---------------------------------------------------------------------------------------------

def parse_levels(text: str) -> tuple[int, ...] | None:
    """"1,2, 4" -> (1, 2, 4); None when it is not a short list of integers in 1..MAX_LEVEL."""
    try:
        levels = sorted({int(x) for x in text.replace(" ", "").split(",") if x})
    except ValueError:
        return None
    if not levels or len(levels) > MAX_LEVELS or levels[0] < 1 or levels[-1] > MAX_LEVEL:
        return None
    return tuple(levels)


def check_inputs(endpoint: str, baseline: str, levels_text: str) -> str | None:
    """The warning for inputs that cannot be run (nothing is sent then), or None."""
    if not endpoint.strip():
        return t("server_need_url")
    for url in (endpoint, baseline):
        if url.strip():
            try:
                remote_client.normalize_endpoint(url)
            except SpecDecError as err:
                return t("server_bad_url", cause=str(err))
    if parse_levels(levels_text) is None:
        return t("server_bad_levels", text=levels_text, max=MAX_LEVEL, n=MAX_LEVELS)
    return None


def suite_size() -> int:
    return len(workload(PROMPTS_FILE))


def small_run_cases(n: int) -> list:
    """The first n prompts of the load test's workload: the suite's single-turn chat / qa / copy prompts
    in its seeded order, which spreads the categories evenly (the file lists its copy prompts first)."""
    return workload(PROMPTS_FILE)[:n]


def total_steps(s: Settings) -> int:
    servers = 2 if s.baseline.strip() else 1
    return servers * (s.prompts + REQUESTS_PER_LEVEL * sum(s.levels))


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------

class Progress:
    """A callable for run_remote_bench (no argument) and run_remote_load_test (one, from its slot
    threads): counts and moves an st.progress bar. A slot thread gets the page's script context so
    that it may update the bar."""

    def __init__(self, bar, total: int) -> None:
        from streamlit.runtime.scriptrunner import get_script_run_ctx

        self.bar, self.total, self.done = bar, max(1, total), 0
        self.ctx = get_script_run_ctx(suppress_warning=True)
        self.lock = threading.Lock()

    def __call__(self, *_) -> None:
        from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

        if self.ctx is not None and get_script_run_ctx(suppress_warning=True) is None:
            add_script_run_ctx(threading.current_thread(), self.ctx)
        with self.lock:
            self.done += 1
            if self.bar is not None:
                self.bar.progress(min(1.0, self.done / self.total), text=t("server_progress", done=self.done, total=self.total))


def _bench_counters(servers: list, records: dict) -> dict:
    """Each server's speculative figures over the bench, as `bench --endpoint` computes them
    (remote.server_figures); a server that no longer answers keeps its completed requests."""
    return {server.label: remote.server_figures(server, records[server.label]) for server in servers}


def run(s: Settings, progress=None) -> dict:
    """The small run: every prompt on each server, interleaved (bench), then the closed-loop load test
    at each level. Returns {"settings", "servers", "bench", "load", "error"}; "error" is the one-line
    SpecDecError text (nothing measured when the server cannot be reached) or the partial-run line, with
    whatever completed kept in "bench" / "load"."""
    out: dict = {"settings": asdict(s), "servers": {}, "bench": None, "load": None, "error": ""}
    cases = small_run_cases(s.prompts)
    extra = dict(remote_client.NO_PROMPT_CACHE) if s.no_prompt_cache else {}
    servers: list = []
    try:
        servers.append(remote.open_server("endpoint", s.endpoint, s.model.strip() or None))
        if s.baseline.strip():
            servers.append(remote.open_server("baseline", s.baseline, s.model.strip() or None))
        out["servers"] = {srv.label: {"url": srv.url, "model": srv.model} for srv in servers}
        rows, records = remote.run_remote_bench(servers, cases, s.max_tokens, 0.0, 0, progress=progress, extra=extra)
        out["bench"] = {"rows": rows, "summary": remote.summarise_remote(rows, records, _bench_counters(servers, records), 0.0)}
        first = {srv.label: remote_load.fetch_metrics_or_none(srv) if srv.before is not None and not srv.failed else None
                 for srv in servers}
        cfg = LoadConfig(concurrency=s.levels, requests_per_level=REQUESTS_PER_LEVEL, max_new_tokens=s.max_tokens)
        load_rows, load_records = remote_load.run_remote_load_test(servers, cases, cfg.concurrency, cfg.requests_per_level,
                                                                   cfg.max_new_tokens, 0.0, cfg.seed, extra, progress=progress)
        out["load"] = remote_load.remote_load_result(servers, load_rows, load_records, first, cfg, PROMPTS_FILE, extra)
    except SpecDecError as err:  # before anything was measured: the message alone; later: what completed stays
        out["error"] = str(err) if out["bench"] is None else t("server_stopped", cause=str(err))
    finally:
        for srv in servers:
            srv.client.close()
    if not out["error"]:
        out["error"] = partial_line(out)
    return out


def partial_line(result: dict) -> str:
    """'k of n requests failed or were not run (first error)', or '' when everything completed."""
    bench = (result.get("bench") or {}).get("rows") or []
    load = (result.get("load") or {}).get("runs") or []
    failed = sum(not r["ok"] for r in bench) + sum(r["failed"] + r["not_run"] for r in load)
    total = len(bench) + sum(r["completed"] + r["failed"] + r["not_run"] for r in load)
    if not failed:
        return ""
    cause = next((f"{r['url']}: {r['error']}" for r in [*bench, *load] if r.get("error") and r["error"] != "not run"),
                 next((r["error"] for r in [*bench, *load] if r.get("error")), ""))
    return t("server_partial", failed=failed, total=total, cause=cause)


# ---------------------------------------------------------------------------------------------
# What the results say
# ---------------------------------------------------------------------------------------------

def label(server: str) -> str:
    return t(f"server_label_{server}") if server in LABELS else server


def _fmt(x, spec: str = ".2f") -> str:
    return "–" if x is None else format(x, spec)


def findings(result: dict) -> list[str]:
    """Markdown lines: the interleaved ratio (overall and per category), identical outputs, matched throughput."""
    lines = []
    summary = (result.get("bench") or {}).get("summary") or {}
    end = summary.get("endpoint") or {}
    if end.get("speedup_vs_baseline") is not None:
        cats = ", ".join(f"{c} {_fmt(e.get('speedup_vs_baseline'))}×" for c, e in end.get("by_category", {}).items())
        lines.append(t("server_find_ratio", ratio=_fmt(end["speedup_vs_baseline"]), cats=cats))
    if end.get("identical_to_baseline"):
        same, total = end["identical_to_baseline"].split("/")
        lines.append(t("server_find_identical", same=same, total=total))
    load = result.get("load") or {}
    ident = [r["identical_to_baseline"] for r in load.get("runs", []) if r.get("identical_to_baseline")]
    if ident:
        same = sum(int(x.split("/")[0]) for x in ident)
        total = sum(int(x.split("/")[1]) for x in ident)
        lines.append(t("server_find_identical_load", same=same, total=total))
    m = load.get("matched_throughput")
    if m:
        if m.get("per_user_speedup") is None:
            lines.append(t("server_find_matched_null", n=len(m.get("levels") or [])))
        else:
            lines.append(t("server_find_matched", ratio=_fmt(m["per_user_speedup"]), n=len(m.get("levels") or [])))
    return lines


def category_figure(summary: dict, metric: str, title: str, axis: str) -> go.Figure:
    """One bar per server and prompt category: `metric` of summarise_remote's by_category."""
    categories = sorted({c for entry in summary.values() for c in entry.get("by_category", {})})
    fig = go.Figure()
    for server, entry in summary.items():
        by = entry.get("by_category", {})
        fig.add_bar(x=categories, y=[(by.get(c) or {}).get(metric) for c in categories], name=label(server),
                    marker_color=COLOURS.get(server, charts.GREEN),
                    marker_pattern_shape="/" if server == "baseline" else "")
    fig.update_layout(barmode="group", title=title, xaxis_title=t("server_axis_category"), yaxis_title=axis,
                      height=380, margin=dict(t=50, b=10), legend=dict(orientation="h", y=-0.25))
    return fig


def speculative_phases(result: dict) -> list[tuple[str, str, dict]]:
    """(server, phase, speculative figures) for the bench and the load test, where they were measured."""
    out = []
    for server, entry in ((result.get("bench") or {}).get("summary") or {}).items():
        if entry.get("speculative"):
            out.append((server, "bench", entry["speculative"]))
    for server, spec in ((result.get("load") or {}).get("speculative") or {}).items():
        out.append((server, "load", spec))
    return out


def speculative_table(result: dict) -> list[dict]:
    rows = []
    for server, phase, spec in speculative_phases(result):
        rows.append({t("server_col_server"): label(server), t("server_col_phase"): t(f"server_phase_{phase}"),
                     t("server_col_source"): " + ".join(spec.get("source") or []) or "–",
                     t("server_col_drafted"): spec.get("num_draft_tokens"), t("server_col_accepted"): spec.get("num_accepted_tokens"),
                     "ᾱ": _round(spec.get("draft_acceptance_rate"), 3), "τ": _round(spec.get("mean_acceptance_length"), 2),
                     t("server_col_tau_step"): _round(spec.get("tau_per_drafting_step"), 2)})
    return rows


def _round(x, digits: int):
    return None if x is None else round(x, digits)


def per_position_figure(result: dict) -> go.Figure | None:
    """s_i (the share of drafting steps whose i-th draft was accepted) as bars, per server and phase;
    None when no server exposed it."""
    phases = [(s, p, spec) for s, p, spec in speculative_phases(result) if spec.get("acceptance_per_pos")]
    if not phases:
        return None
    fig = go.Figure()
    for server, phase, spec in phases:
        survival = spec["acceptance_per_pos"]
        fig.add_bar(x=[f"s{i + 1}" for i in range(len(survival))], y=survival,
                    name=f"{label(server)} · {t(f'server_phase_{phase}')}", marker_color=COLOURS.get(server, charts.GREEN),
                    marker_pattern_shape="" if phase == "bench" else ".")
    fig.update_layout(barmode="group", title=t("server_per_pos_title"), xaxis_title=t("server_axis_position"),
                      yaxis_title="s_i", yaxis_range=[0, 1], height=380, margin=dict(t=50, b=10),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def not_exposed(result: dict) -> dict[str, list[str]]:
    """Per server: the figures it did not expose (the engine's own wording) and metrics errors, deduplicated."""
    out: dict[str, list[str]] = {}
    for server, _, spec in speculative_phases(result):
        items = out.setdefault(server, [])
        for item in [*(spec.get("not_exposed") or []), *([spec["metrics_error"]] if spec.get("metrics_error") else [])]:
            if item not in items:
                items.append(item)
    return {s: items for s, items in out.items() if items}


def load_for_charts(load: dict) -> dict:
    """The remote load result in the shape load_view's figures read: levels that completed requests,
    the servers' labels in the current language as scheme names, no None figures."""
    runs = [{**{k: v for k, v in r.items() if v is not None}, "scheme": label(r["scheme"])}
            for r in load.get("runs", []) if r.get("completed") and "per_user_tok_s" in r]
    return {**load, "runs": runs}


def load_table(load: dict) -> list[dict]:
    return [{t("server_col_server"): label(r["scheme"]), "C": r["concurrency"], t("server_col_completed"): r["completed"],
             t("server_col_failed"): r["failed"] + r["not_run"],
             t("load_col_per_user"): _round(r.get("per_user_tok_s"), 2), t("load_col_aggregate"): _round(r.get("aggregate_tok_s"), 2),
             t("load_col_ttft"): _round(r.get("ttft_s"), 3), t("load_col_p95_itl"): _round(r.get("p95_itl_s"), 3),
             t("server_col_drafted"): r.get("num_draft_tokens"), t("server_col_accepted"): r.get("num_accepted_tokens"),
             "τ": _round(r.get("tau"), 2), t("server_col_identical"): r.get("identical_to_baseline")}
            for r in load.get("runs", [])]


# ---------------------------------------------------------------------------------------------
# Drawing
# ---------------------------------------------------------------------------------------------

def show(result: dict) -> None:
    """The results of a run (from session state: a rerun redraws without sending anything)."""
    if result["error"]:
        st.error(result["error"])
    if result["bench"] is None and result["load"] is None:
        return
    s = result["settings"]
    servers = ", ".join(f"{label(k)}: `{v['url']}` ({t('server_model')} `{v['model']}`)" for k, v in result["servers"].items())
    st.caption(t("server_ran", servers=servers, prompts=s["prompts"], tokens=s["max_tokens"],
                 levels=", ".join(map(str, s["levels"])), per_level=REQUESTS_PER_LEVEL)
               + (" " + t("server_ran_no_cache") if s["no_prompt_cache"] else ""))
    for line in findings(result):
        st.markdown(f"- {line}")

    bench = result["bench"]
    if bench is not None:
        st.subheader(t("server_bench_h"))
        left, right = st.columns(2)
        left.plotly_chart(category_figure(bench["summary"], "tokens_per_s", t("server_tps_title"), t("server_axis_tps")),
                          width="stretch", key="server_tps")
        right.plotly_chart(category_figure(bench["summary"], "ttft_s", t("server_ttft_title"), t("server_axis_ttft")),
                           width="stretch", key="server_ttft")
        st.caption(t("server_bench_note"))

    st.subheader(t("server_spec_h"))
    table = speculative_table(result)
    if table:
        st.dataframe(table, hide_index=True, width="stretch")
    st.caption(t("server_spec_note"))
    fig = per_position_figure(result)
    if fig is not None:
        st.plotly_chart(fig, width="stretch", key="server_per_pos")
    else:
        st.info(t("server_no_per_pos"))
    missing = not_exposed(result)
    if missing:
        st.markdown(f"**{t('server_not_exposed_h')}**")
        for server, items in missing.items():
            st.markdown(f"- {label(server)}: " + "; ".join(f"`{x}`" for x in items))
        st.caption(t("server_not_exposed_note"))

    load = result["load"]
    if load is not None:
        st.subheader(t("server_load_h"))
        charts = load_for_charts(load)
        if charts["runs"]:
            verify = any("mean_verify_tokens" in r for r in charts["runs"])  # llama.cpp's timings only
            left, right = st.columns(2) if verify else (st.container(), None)
            left.plotly_chart(load_view.throughput_figure(charts, t("server_tp_title")), width="stretch",
                              key="server_throughput")
            if verify:
                right.plotly_chart(load_view.verify_figure(charts), width="stretch", key="server_verify")
            st.caption(t("server_load_note"))
        with st.expander(t("load_table")):
            st.dataframe(load_table(load), hide_index=True, width="stretch")
