"""The lab's tree section: τ and speed against tree size, chain / static / dynamic, beside the cost curve.

One run decodes each prompt with plain AR, the drafter's chain, and each tree kind it can draft at each
size, greedy and interleaved per prompt (so the machine's drift hits every variant alike); τ and the
speedup over AR are pooled over the prompts. The cost curve is the measured price of verifying n drafts
in plain steps: a tree pays where its τ grows faster than that curve.
"""
from __future__ import annotations

import plotly.graph_objects as go

from app import charts, model_store, widgets
from app.language import t

SIZES = (2, 4, 8, 16)
COLOURS = {"chain": charts.BLACK, "static": charts.BLUE, "dynamic": charts.VERMILLION}


def variants(drafter: str) -> list[tuple[str, int]]:
    """(tree, nodes) to run: the chain (nodes 0), then every size of every tree kind `drafter` can draft."""
    from specdec_core.drafters import TREE_DRAFTERS

    kinds = [kind for kind, names in TREE_DRAFTERS.items() if drafter in names]
    return [("chain", 0)] + [(kind, n) for kind in kinds for n in SIZES]


def run(lm, drafter: str, prompts: list[str], k: int, max_new: int, progress) -> dict | None:
    """{(tree, nodes): {"tau", "speedup"}} pooled over `prompts` (None when a run failed: model_store said why)."""
    import specdec_core as sd

    todo = variants(drafter)
    sums = {v: {"tokens": 0, "forwards": 0, "seconds": 0.0, "ar_s": 0.0} for v in todo}
    total, done = len(prompts) * (len(todo) + 1), 0
    for prompt in prompts:
        ar = model_store.generate(lm, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=max_new))
        done += 1
        progress(done, total)
        if ar is None:
            return None
        for tree, nodes in todo:
            cfg = sd.GenerationConfig(mode="spec", drafter=drafter, k=k, tree=tree, tree_nodes=nodes, max_new_tokens=max_new)
            res = model_store.generate(lm, prompt, cfg)
            done += 1
            progress(done, total)
            if res is None:
                return None
            m, agg = res.metrics, sums[(tree, nodes)]
            agg["tokens"] += round(m["mean_acceptance_length"] * m["target_forwards"])
            agg["forwards"] += m["target_forwards"]
            agg["seconds"] += m["wall_s"]
            agg["ar_s"] += ar.metrics["wall_s"]
    return {v: {"tau": s["tokens"] / s["forwards"] if s["forwards"] else 0.0,
                "speedup": s["ar_s"] / s["seconds"] if s["seconds"] else 0.0} for v, s in sums.items()}


def figure(result: dict, key: str, title: str) -> go.Figure:
    """`key` (tau or speedup) against tree size, one line per tree kind; the chain as a flat reference."""
    fig = go.Figure()
    chain = result[("chain", 0)][key]
    fig.add_scatter(x=[SIZES[0], SIZES[-1]], y=[chain, chain], mode="lines", name=t("tree_chain"),
                    line=dict(color=COLOURS["chain"], dash="dash"))
    for kind in ("static", "dynamic"):
        points = [(n, result[(kind, n)][key]) for n in SIZES if (kind, n) in result]
        if points:
            fig.add_scatter(x=[n for n, _ in points], y=[v for _, v in points], mode="lines+markers",
                            name=t(f"tree_{kind}"), line=dict(color=COLOURS[kind]))
    if key == "speedup":
        fig.add_hline(y=1.0, line_dash="dot", annotation_text="AR")
    fig.update_layout(title=title, height=320, margin=dict(t=40, b=10), xaxis=dict(title=t("tree_nodes"), type="log",
                      tickvals=list(SIZES)), yaxis_title="τ" if key == "tau" else t("lab_speedup_axis"))
    return fig


def cost_figure(cm) -> go.Figure:
    """The measured cost of verifying n drafts in one forward, in plain steps (the cost model)."""
    sizes = list(range(1, 33))
    fig = go.Figure()
    fig.add_scatter(x=sizes, y=[cm.verify_ratio(n) for n in sizes], mode="lines", name=t("tree_cost_curve"),
                    line=dict(color=charts.GREEN))
    fig.update_layout(title=t("tree_cost_title"), height=320, margin=dict(t=40, b=10),
                      xaxis=dict(title=t("tree_nodes"), type="log", tickvals=[1, 2, 4, 8, 16, 32]),
                      yaxis_title=t("tree_cost_axis"))
    return fig


def section(st, lm, cm, drafter: str, prompts: list[str], k: int, max_new: int) -> None:
    """The lab's tree section for the picked drafter and prompts (greedy: τ and identity are exact)."""
    st.subheader(t("lab_trees_h"))
    st.markdown(t("lab_trees_intro", k=k))
    if len(variants(drafter)) == 1:
        st.info(t("lab_trees_no_tree", drafter=widgets.drafter_label(drafter)))
        return
    ss = st.session_state
    if st.button(t("lab_trees_run", runs=len(prompts) * len(variants(drafter)) + len(prompts)), key="lab_trees_run",
                 disabled=not prompts):
        bar = st.progress(0.0, text=t("lab_running", done=0, total=1))
        result = run(lm, drafter, prompts, k, max_new,
                     lambda done, total: bar.progress(done / total, text=t("lab_running", done=done, total=total)))
        bar.empty()
        if result is not None:
            ss.lab_trees = {"drafter": drafter, "k": k, "prompts": len(prompts), "result": result}
    shown = ss.get("lab_trees")
    a, b, c = st.columns(3)
    c.plotly_chart(cost_figure(cm), width="stretch", key="lab_trees_cost")
    if not shown:
        return
    if shown["drafter"] != drafter:
        st.caption(t("lab_result_stale"))
    a.plotly_chart(figure(shown["result"], "tau", t("lab_trees_tau", drafter=widgets.drafter_label(shown["drafter"]))),
                   width="stretch", key="lab_trees_tau_chart")
    b.plotly_chart(figure(shown["result"], "speedup", t("lab_trees_speed")), width="stretch", key="lab_trees_speed_chart")
    st.caption(t("lab_trees_note", prompts=shown["prompts"], k=shown["k"]))
