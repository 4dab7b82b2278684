"""When does it pay? Forward time vs (batch × tokens per forward) on this machine, what that does to
the speedup of speculative decoding as the machine gets busier, and the serving load experiment:
per-user speed against aggregate throughput when many requests share each forward (`load_view.py`)."""
import dataclasses

import plotly.graph_objects as go
import streamlit as st

from app import charts, load_view, model_store, widgets
from app.language import t

import specdec_core as sd


st.title(t("pays_title"))
st.markdown(t("pays_intro"))


def forward_time_section() -> None:
    """Forward time vs (batch × tokens) measured here, and the speedup it predicts per batch size."""
    c = st.columns(3)
    batches = c[0].multiselect(t("pays_batches"), [1, 2, 4, 8, 16, 32], default=[1, 2, 4, 8], key="pays_batches")
    tokens = c[1].multiselect(t("pays_tokens"), [1, 2, 3, 4, 5, 8, 12, 16], default=[1, 2, 4, 8], key="pays_tokens")
    repeats = c[2].slider(t("pays_repeats"), 1, 7, 3, key="pays_repeats")
    batches, tokens = sorted(batches), sorted(tokens)
    ready = bool(batches) and bool(tokens) and 1 in tokens
    if not ready:
        st.caption(t("pays_need_one"))
    run = st.button(t("pays_run"), type="primary", disabled=not ready, key="pays_run")

    store = model_store.result_store()
    name = model_store.model_name()
    key = ("forward_times", name, tuple(batches), tuple(tokens), repeats)
    if run:
        lm = model_store.require_model()
        total = (repeats + 1) * len(batches) * len(tokens)
        bar = st.progress(0.0, text=t("pays_measuring", done=0, total=total))
        done = [0]

        def tick():
            done[0] += 1
            bar.progress(min(1.0, done[0] / total), text=t("pays_measuring", done=done[0], total=total))

        rows = model_store.call_model(sd.costmodel.measure_forward_times, lm, tokens=tuple(tokens),
                                      batch_sizes=tuple(batches), repeats=repeats, progress=tick)
        bar.empty()
        if rows is not None:
            store[key] = rows
            st.session_state.pays_key = key

    key = st.session_state.get("pays_key", key)
    rows = store.get(key)
    if rows is None:
        st.info(t("pays_press_run"))
        return

    lm = model_store.require_model()
    base = model_store.cost_model(lm)
    if base is None:
        return
    cm = dataclasses.replace(base, forward_s=rows)  # this machine's drafter costs, the batch timings just measured
    batches = sorted({r["batch"] for r in rows})
    st.caption(t("pays_measured_on", model=cm.model, device=cm.device, dtype=cm.dtype, threads=cm.threads,
                 repeats=key[-1]))

    # ------------------------------------------------------------------ forward time vs total tokens
    left, right = st.columns(2)
    fig_t, fig_per = go.Figure(), go.Figure()
    for i, b in enumerate(batches):
        mine = sorted((r for r in rows if r["batch"] == b), key=lambda r: r["tokens"])
        x = [b * r["tokens"] for r in mine]
        style = charts.series_style(i)
        label = t("pays_batch_label", b=b)
        fig_t.add_scatter(x=x, y=[1000 * r["seconds"] for r in mine], mode="lines+markers", name=label, **style,
                          text=[f"{r['tokens']} tok × {b}" for r in mine], hovertemplate="%{text}: %{y:.1f} ms<extra></extra>")
        fig_per.add_scatter(x=x, y=[1000 * r["seconds"] / (b * r["tokens"]) for r in mine], mode="lines+markers", name=label,
                            **style)
    totals = sorted({r["batch"] * r["tokens"] for r in rows})
    fig_t.update_layout(title=t("pays_time_title"), xaxis_title=t("pays_total_tokens"), yaxis_title="ms / forward",
                        xaxis=dict(type="log", tickvals=totals), height=380, margin=dict(t=50, b=10))
    fig_per.update_layout(title=t("pays_per_token_title"), xaxis_title=t("pays_total_tokens"), yaxis_title="ms / token",
                          xaxis=dict(type="log", tickvals=totals), yaxis_type="log", height=380, margin=dict(t=50, b=10))
    left.plotly_chart(fig_t, width="stretch", key="pays_time")
    right.plotly_chart(fig_per, width="stretch", key="pays_per_token")
    st.caption(t("pays_time_note"))
    kernel_table_section(lm, cm)

    # ------------------------------------------------------------------ what it does to the speedup
    st.subheader(t("pays_speedup_h"))
    max_tokens = max(r["tokens"] for r in rows)
    c = st.columns(3)
    drafter = widgets.selectbox(c[0], t("drafter"), widgets.drafter_options("ngram"), "pays_drafter", widgets.drafter_label)
    widgets.drafter_card(c[0], drafter)
    alpha = c[1].slider("α", 0.0, 0.99, 0.7, 0.01, key="pays_alpha", help=t("lab_alpha_help"))
    k = c[2].slider("k", 1, max(1, max_tokens - 1), min(4, max(1, max_tokens - 1)), key="pays_k",
                    help=t("pays_k_help", max=max_tokens - 1), disabled=max_tokens < 2)
    c_ratio = cm.c(drafter)

    fixed, best_curve, best_ks = [], [], []
    for b in batches:
        ratios = {j: cm.verify_ratio(j, b) for j in range(1, max(2, max_tokens))}
        fixed.append(sd.theory.walltime_speedup_with_verify_cost(alpha, k, c_ratio, cm.verify_ratio(k, b)))
        kb = sd.theory.best_k(alpha, c_ratio, max(1, max_tokens - 1), ratios)
        best_ks.append(kb)
        best_curve.append(sd.theory.walltime_speedup_with_verify_cost(alpha, kb, c_ratio, ratios[kb]))
    fig = go.Figure()
    fig.add_scatter(x=batches, y=fixed, mode="lines+markers", name=t("pays_fixed_k", k=k),
                    line=dict(color=charts.BLUE, width=3), marker=dict(size=9))
    fig.add_scatter(x=batches, y=best_curve, mode="lines+markers+text", name=t("pays_best_k"),
                    text=[f"k={kb}" for kb in best_ks], textposition="top center",
                    line=dict(color=charts.ORANGE, dash="dash"), marker=dict(symbol="diamond", size=9))
    fig.add_hline(y=1.0, line=dict(color=charts.DARK_GREY, dash="dash"), annotation_text=t("break_even"))
    fig.update_layout(title=t("pays_speedup_title", alpha=f"{alpha:.2f}", c=f"{c_ratio:.3f}"), xaxis_title=t("pays_batch"),
                      yaxis_title=t("speedup"), xaxis=dict(type="log", tickvals=batches), height=400, margin=dict(t=50, b=10),
                      legend=dict(orientation="h", y=-0.2))
    st.plotly_chart(fig, width="stretch", key="pays_speedup")
    st.dataframe([{t("col_batch"): b, t("pays_col_verify_ratio", k=k): round(cm.verify_ratio(k, b), 2),
                   t("pays_col_speedup", k=k): round(s, 2), t("pays_best_k"): kb, t("pays_col_best_speedup"): round(bs, 2)}
                  for b, s, kb, bs in zip(batches, fixed, best_ks, best_curve)], hide_index=True)
    st.markdown(t("pays_takeaway"))


def kernel_table_section(lm, cm) -> None:
    """The kernel table behind these timings, the raw r(k) of batch 1 beside the roofline, and the guard."""
    st.subheader(t("pays_kernels_h"))
    table = sd.kernels.kernel_table(lm.model)
    st.markdown(t("pays_kernels_intro", label=table.label() if table else "—"))
    if table is not None and table.ms:
        st.dataframe([{t("pays_col_candidate"): name, **{str(n): (round(ms, 1) if ms is not None else None)
                                                          for n, ms in enumerate(times, start=1)}}
                      for name, times in table.ms.items()], hide_index=True)
        st.caption(t("pays_kernels_ms_note"))
    ratios = sd.guard.raw_ratios(cm.forward_s)
    if ratios:
        st.dataframe([{"k": k, "r(k) = t(k+1) / t(1)": round(r, 2)} for k, r in ratios.items()], hide_index=True)
    roof = cm.roofline_tokens_per_s()
    if roof:
        one = cm.seconds(1)
        st.caption(t("pays_roofline", roof=f"{roof:.1f}", got=f"{1 / one:.1f}", pct=f"{100 / one / roof:.0f}",
                     bw=f"{cm.bandwidth_gb_s:.1f}"))
    for flag in sd.guard.ratio_flags(ratios, table.label() if table else None):
        st.warning(flag)


def load_section() -> None:
    """The load experiment: the shipped results, then a small live run on this machine."""
    st.divider()
    st.subheader(t("load_h"))
    st.markdown(t("load_intro"))
    path = load_view.results_path()
    results = load_view.load_results(path)
    if results is not None:
        st.caption(load_view.environment_label(results) + "  \n" + t("load_regenerate"))
        show_results(results, t("load_tp_title"), "load")
    live_run()


def show_results(results: dict, title: str, key: str) -> None:
    for line in load_view.findings(results):
        st.markdown(f"- {line}")
    left, right = st.columns(2)
    left.plotly_chart(load_view.throughput_figure(results, title), width="stretch", key=f"{key}_throughput")
    right.plotly_chart(load_view.verify_figure(results), width="stretch", key=f"{key}_verify")
    st.caption(t("load_charts_note"))
    decisions = load_view.decisions_figure(results)
    if decisions is not None:
        st.plotly_chart(decisions, width="stretch", key=f"{key}_decisions")
        st.caption(t("load_decisions_note"))
    with st.expander(t("load_table")):
        st.dataframe(load_view.runs_table(results), hide_index=True, width="stretch")


def live_run() -> None:
    st.markdown(f"#### {t('load_live_h')}")
    cfg = load_view.LIVE
    st.markdown(t("load_live_intro", schemes=", ".join(load_view.scheme_label(s) for s in cfg.schemes),
                  levels=", ".join(map(str, cfg.concurrency)), tokens=cfg.max_new_tokens))
    if st.button(t("load_live_run"), key="load_live_run"):
        lm = model_store.require_model()
        bar = st.progress(0.0, text=t("load_live_starting"))
        progress = load_view.Progress(bar, load_view.live_steps(cfg))
        results = model_store.call_model(load_view.run_live, lm, model_store.result_store(), progress)
        bar.empty()
        if results is not None:
            st.session_state.load_live = results
    results = st.session_state.get("load_live")
    if results is None:
        st.caption(t("load_live_press_run"))
        return
    st.caption(t("load_live_label", seconds=f"{results['live_s']:.0f}") + "  \n" + load_view.environment_label(results, took=False))
    show_results(results, t("load_live_tp_title"), "load_live")


forward_time_section()
load_section()
