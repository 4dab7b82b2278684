"""Acceptance & speedup lab: measured τ, α and speedup vs k on the real model, next to the theory."""
import math

import plotly.graph_objects as go
import streamlit as st

from app import charts, model_store, widgets
from app.lab import calibration, curve, survival, trees
from app.lab.prompts import prompts_by_category
from app.language import t

import specdec_core as sd

K_MAX = 16
# One colour per survival curve (Okabe–Ito; a single i.i.d. curve is black): the most curves kept at once.
SURVIVAL_COLOURS = (charts.VERMILLION, charts.GREEN, charts.PURPLE, charts.BLUE, charts.ORANGE, charts.SKY)
ALPHA_SOURCES = ("fit", "rate", "slider")
ss = st.session_state

st.title(t("lab_title"))
st.markdown(t("lab_intro"))
st.caption(t("lab_benchmarks"))

prompts = prompts_by_category()
categories = sorted(prompts)

# ------------------------------------------------------------------ settings
c = st.columns(4)
drafter = widgets.selectbox(c[0], t("drafter"), widgets.drafter_options("sim"), "lab_drafter", widgets.drafter_label)
widgets.drafter_card(c[0], drafter)
category = c[1].selectbox(t("lab_category"), categories, key="lab_category")
temperature = c[2].slider(t("temperature"), 0.0, 1.5, 0.0, 0.05, key="lab_temp", help=t("temperature_help"))
max_new = c[3].slider(t("max_new_tokens"), 16, 96, 32, 8, key="lab_max_new")
c = st.columns(4)
ks = c[0].multiselect(t("lab_ks"), list(range(1, K_MAX + 1)), default=[1, 2, 4, 8], key="lab_ks")
hit_rate = c[1].slider(t("hit_rate"), 0.0, 1.0, 0.7, 0.05, key="lab_hit", help=t("hit_rate_help"),
                       disabled=drafter != "sim")
n_available = len(prompts.get(category, []))
n_prompts = c[2].slider(t("lab_n_prompts"), 1, max(2, n_available), min(2, max(1, n_available)), key="lab_n_prompts",
                        disabled=n_available <= 1)
sim_alpha = drafter == "sim" and temperature == 0.0
if sim_alpha:
    alpha = hit_rate
    c[3].caption(t("lab_alpha_is_hit_rate", alpha=f"{alpha:.2f}"))
else:
    ss.setdefault("lab_alpha", 0.6)
    alpha = c[3].slider(t("lab_alpha"), 0.0, 0.99, key="lab_alpha", help=t("lab_alpha_help"))

quant_bits, quant_depth = 4, 1.0
if drafter == "quant":  # the quantised self-draft's precision and depth: cheaper drafts against acceptance
    c = st.columns(4)
    quant_bits = c[0].radio(t("quant_bits"), (4, 8), horizontal=True, key="lab_quant_bits", help=t("quant_bits_help"))
    quant_depth = c[1].select_slider(t("quant_depth"), (0.25, 0.5, 0.75, 1.0), value=1.0, key="lab_quant_depth",
                                     format_func=lambda f: f"{f:.0%}", help=t("quant_depth_help"))
if drafter == "suffix":  # the recipe book recalls earlier answers: whose, and how many it holds now
    c = st.columns([1, 3])
    c[0].toggle(t("suffix_classroom"), key="classroom", help=t("suffix_classroom_help"))
    held = model_store.suffix_history()
    c[1].caption(t("suffix_history_state", shared=t("suffix_shared") if ss.get("classroom") else t("suffix_own"),
                   tokens=held.size, kb=f"{held.nbytes() / 1024:.0f}"))


    for p in prompts.get(category, [])[:n_prompts]:
        st.code(p, language=None, wrap_lines=True)

if not ks:
    st.caption(t("lab_need_k"))
run = st.button(t("lab_run"), type="primary", disabled=not ks or not n_available, key="lab_run")

lm = model_store.require_model()
cm = model_store.cost_model(lm)
if cm is None:
    st.stop()
c_ratio = cm.c(drafter)
needed = sd.drafters.MIX_MODELS if drafter == "mix" else (drafter,)  # mix runs its model drafters too
problem = next(filter(None, (model_store.drafter_problem(lm, name) for name in needed)), None)
if problem:  # a trained drafter whose weights are not there yet
    st.warning(t("drafter_unavailable", drafter=widgets.drafter_label(drafter), cause=problem))
    run = False


def verify_ratio(k: int) -> float:
    return cm.verify_ratio(k)


# ------------------------------------------------------------------ a run: AR + spec at each k, per prompt
if run:
    chosen = prompts[category][:n_prompts]
    total = len(chosen) * (len(ks) + 1)
    bar = st.progress(0.0, text=t("lab_running", done=0, total=total))
    layers = lm.model.config.num_hidden_layers
    options = {"hit_rate": hit_rate, "quant_bits": quant_bits,
               "quant_layers": None if quant_depth == 1.0 else max(1, round(quant_depth * layers))}
    per_k = {k: {"tokens": 0.0, "forwards": 0, "accepted": 0, "drafted": 0, "spec_s": 0.0, "ar_s": 0.0,
                 "survival": survival.Survival(), "hist": [0] * (k + 1), "drafts": 0} for k in sorted(ks)}
    done, failed = 0, False
    for prompt in chosen:
        ar = model_store.generate(lm, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=max_new, temperature=temperature))
        done += 1
        bar.progress(done / total, text=t("lab_running", done=done, total=total))
        if ar is None:
            failed = True
            break
        for k in sorted(ks):
            cfg = sd.GenerationConfig(mode="spec", drafter=drafter, k=k, max_new_tokens=max_new, temperature=temperature,
                                      drafter_options=options)
            res = model_store.generate(lm, prompt, cfg)
            done += 1
            bar.progress(done / total, text=t("lab_running", done=done, total=total))
            if res is None:
                failed = True
                break
            m, agg = res.metrics, per_k[k]
            # Pool over prompts: sums of tokens, forwards, drafts and seconds, then ratios.
            agg["tokens"] += m["mean_acceptance_length"] * m["target_forwards"]
            agg["forwards"] += m["target_forwards"]
            agg["accepted"] += m["num_accepted_tokens"]
            agg["drafted"] += m["num_draft_tokens"]
            agg["drafts"] += m["num_drafts"]
            agg["spec_s"] += m["wall_s"]
            agg["ar_s"] += ar.metrics["wall_s"]
            agg["survival"] += survival.Survival.from_metrics(m)  # pooled counts, not per-prompt ratios
            agg["hist"] = [a + b for a, b in zip(agg["hist"], m["accepted_length_hist"])]
        if failed:
            break
    bar.empty()
    if not failed:
        ss.lab_result = {"drafter": drafter, "temperature": temperature, "hit_rate": hit_rate,
                         "quant": (quant_bits, quant_depth), "category": category,
                         "prompts": len(chosen), "max_new": max_new, "per_k": per_k}
        # One survival curve per drafter (and category, temperature, hit rate) run in this session.
        run_key = (drafter, category, temperature, hit_rate if drafter == "sim" else None,
                   (quant_bits, quant_depth) if drafter == "quant" else None)
        curves = ss.setdefault("lab_survival", {})
        curves.pop(run_key, None)  # a re-run replaces its curve and moves it to the end
        curves[run_key] = sum((agg["survival"] for agg in per_k.values()), survival.Survival())
        while len(curves) > len(SURVIVAL_COLOURS):
            curves.pop(next(iter(curves)))

result = ss.get("lab_result")
measured = {}
if result:
    for k, agg in result["per_k"].items():
        measured[k] = {
            "tau": agg["tokens"] / agg["forwards"] if agg["forwards"] else 0.0,
            "alpha": agg["accepted"] / agg["drafted"] if agg["drafted"] else 0.0,
            "speedup": agg["ar_s"] / agg["spec_s"] if agg["spec_s"] else 0.0,
            "alpha_fit": agg.get("survival", survival.Survival()).alpha, "hist": agg["hist"], "drafts": agg["drafts"],
        }
    pooled_drafted = sum(a["drafted"] for a in result["per_k"].values())
    pooled_alpha = sum(a["accepted"] for a in result["per_k"].values()) / pooled_drafted if pooled_drafted else 0.0
    st.success(t("lab_result_h", drafter=widgets.drafter_label(result["drafter"]), category=result["category"],
                 prompts=result["prompts"], temperature=result["temperature"], alpha=f"{pooled_alpha:.3f}"))
    if not sim_alpha and abs(pooled_alpha - alpha) > 1e-9:
        def _use_measured():
            ss.lab_alpha = round(min(0.99, pooled_alpha), 2)
        st.button(t("lab_use_measured_alpha", alpha=f"{pooled_alpha:.2f}"), on_click=_use_measured, key="lab_use_alpha")
    if result["drafter"] != drafter or result["temperature"] != temperature or \
            (drafter == "sim" and result["hit_rate"] != hit_rate) or \
            (drafter == "quant" and result.get("quant") != (quant_bits, quant_depth)):
        st.caption(t("lab_result_stale"))

# ------------------------------------------------------------------ cost model summary
m = st.columns(4)
m[0].metric(t("lab_c"), f"{c_ratio:.3f}", help=t("lab_c_help"))
k_show = max(ks) if ks else 4
m[1].metric(t("lab_verify_ratio", k=k_show), f"{verify_ratio(k_show):.2f}", help=t("lab_verify_ratio_help"))
ratios = {k: verify_ratio(k) for k in range(1, K_MAX + 1)}
best = sd.theory.best_k(alpha, c_ratio, K_MAX, ratios)
m[2].metric(t("lab_best_k"), best,
            help=t("lab_best_k_help"))
m[3].metric(t("lab_best_speedup"), f"{sd.theory.walltime_speedup_with_verify_cost(alpha, best, c_ratio, ratios[best]):.2f}×")
if drafter == "sim":
    st.caption(t("lab_sim_c_note"))
with st.expander(t("lab_costs_table")):
    st.dataframe([{t("col_tokens"): r["tokens"], t("col_batch"): r["batch"], "ms": round(1000 * r["seconds"], 2),
                   t("col_ratio_1"): round(r["seconds"] / cm.seconds(1), 2)} for r in cm.forward_s], hide_index=True)
    st.caption(t("lab_costs_note", device=cm.device, dtype=cm.dtype, threads=cm.threads,
                 drafts=", ".join(f"{d}: {1000 * s:.2f} ms" for d, s in cm.draft_step_s.items())))

# ------------------------------------------------------------------ τ and speedup vs k
ks_axis = list(range(1, K_MAX + 1))
left, right = st.columns(2)
fig = go.Figure()
fig.add_scatter(x=ks_axis, y=[sd.theory.expected_tokens_per_step(alpha, k) for k in ks_axis], mode="lines",
                name=t("lab_theory_exact"), line=dict(color=charts.BLUE, width=3))
fig.add_scatter(x=ks_axis, y=[sd.theory.approx_tokens_per_step(alpha, k) for k in ks_axis], mode="lines",
                name=t("lab_theory_approx"), line=dict(color=charts.ORANGE, dash="dash"))
if measured:
    fig.add_scatter(x=list(measured), y=[v["tau"] for v in measured.values()], mode="markers+lines",
                    name=t("lab_measured_tau"), marker=dict(color=charts.VERMILLION, size=11, symbol="diamond"),
                    line=dict(color=charts.VERMILLION, dash="dot"))
fig.update_layout(title=t("lab_tau_title", alpha=f"{alpha:.2f}"), xaxis_title="k", yaxis_title="τ",
                  height=380, margin=dict(t=50, b=10), legend=dict(orientation="h", y=-0.2))
left.plotly_chart(fig, width="stretch", key="lab_tau")

fig = go.Figure()
fig.add_scatter(x=ks_axis, y=[sd.theory.walltime_speedup_with_verify_cost(alpha, k, c_ratio, ratios[k]) for k in ks_axis],
                mode="lines", name=t("lab_theory_speedup_measured"), line=dict(color=charts.BLUE, width=3))
fig.add_scatter(x=ks_axis, y=[sd.theory.walltime_speedup(alpha, k, c_ratio) for k in ks_axis], mode="lines",
                name=t("lab_theory_speedup_free"), line=dict(color=charts.GREEN, dash="dot"))
if measured:
    fig.add_scatter(x=list(measured), y=[v["speedup"] for v in measured.values()], mode="markers+lines",
                    name=t("lab_measured_speedup"), marker=dict(color=charts.VERMILLION, size=11, symbol="diamond"),
                    line=dict(color=charts.VERMILLION, dash="dot"))
fig.add_hline(y=1.0, line=dict(color=charts.DARK_GREY, dash="dash"), annotation_text=t("break_even"))
fig.update_layout(title=t("lab_speedup_title", alpha=f"{alpha:.2f}", c=f"{c_ratio:.3f}"), xaxis_title="k",
                  yaxis_title=t("speedup"), height=380, margin=dict(t=50, b=10), legend=dict(orientation="h", y=-0.2))
right.plotly_chart(fig, width="stretch", key="lab_speedup")

# ------------------------------------------------------------------ survival per position, every drafter run
curves = ss.get("lab_survival") or {}
if curves:
    st.subheader(t("lab_survival_h"))
    c = st.columns([4, 1])
    alpha_source = c[0].radio(t("lab_survival_alpha"), ALPHA_SOURCES, horizontal=True, key="lab_survival_alpha",
                              format_func=widgets.labels(ALPHA_SOURCES, lambda a: t(f"lab_survival_alpha_{a}",
                                                                                    alpha=f"{alpha:.2f}")))

    def _clear_curves():
        ss.lab_survival = {}

    c[1].button(t("lab_survival_clear"), on_click=_clear_curves, key="lab_survival_clear")
    fig = go.Figure()
    longest, idle = [], []
    for (run_key, sv), colour in zip(curves.items(), SURVIVAL_COLOURS):
        name, cat, temp, hit, quant_setting = run_key
        label = t("lab_survival_run", drafter=widgets.drafter_label(name), category=cat, temperature=temp)
        label += t("lab_survival_run_hit", hit=hit) if hit is not None else ""
        label += f", int{quant_setting[0]}, {quant_setting[1]:.0%}" if quant_setting is not None else ""
        pos = sv.positions
        if not pos:  # the drafter never proposed anything (every step was a plain one)
            idle.append(label)
            continue
        longest = max(longest, pos, key=len)
        fig.add_scatter(x=pos, y=sv.s, mode="lines+markers", name=t("lab_survival_measured", run=label),
                        customdata=[sv.offered[i - 1] for i in pos], line=dict(color=colour, width=3),
                        marker=dict(size=9), legendgroup=label,
                        hovertemplate="i=%{x}<br>s_i=%{y:.3f}<br>" + t("lab_survival_offered", n="%{customdata}")
                        + "<extra></extra>")
        if alpha_source != "slider":
            a = sv.alpha if alpha_source == "fit" else sv.acceptance_rate
            fig.add_scatter(x=pos, y=[sd.theory.prob_all_accepted(a, i) for i in pos], mode="lines",
                            name=t("lab_iid_prefix", alpha=f"{a:.2f}"), legendgroup=label,
                            line=dict(color=colour, dash="dash"))
    if alpha_source == "slider" and longest:
        fig.add_scatter(x=longest, y=[sd.theory.prob_all_accepted(alpha, i) for i in longest], mode="lines",
                        name=t("lab_iid_prefix", alpha=f"{alpha:.2f}"), line=dict(color=charts.BLACK, dash="dash", width=2))
    fig.update_layout(title=t("lab_survival_title"), xaxis_title=t("lab_draft_position"),
                      yaxis_title=t("lab_accept_rate"), yaxis_range=[0, 1.05], xaxis=dict(dtick=1), height=420,
                      margin=dict(t=50, b=10), legend=dict(orientation="h", y=-0.2))
    st.plotly_chart(fig, width="stretch", key="lab_survival")
    if idle:
        st.caption(t("lab_survival_no_steps", runs="; ".join(idle)))
    st.caption(t("lab_survival_note"))

# ------------------------------------------------------------------ accepted-length histogram, one k
if measured:
    k_detail = st.select_slider(t("lab_k_detail"), list(measured), value=max(measured), key="lab_k_detail")
    v = measured[k_detail]
    a_fit = v["alpha_fit"]
    fig = go.Figure()
    lengths = list(range(k_detail + 1))
    fig.add_bar(x=lengths, y=v["hist"], name=t("lab_measured"), marker_color=charts.SKY)
    fig.add_scatter(x=lengths, y=[v["drafts"] * p for p in sd.theory.accepted_length_pmf(a_fit, k_detail)],
                    mode="lines+markers", name=t("lab_iid_hist", alpha=f"{a_fit:.2f}"),
                    line=dict(color=charts.BLUE, dash="dash"))
    fig.update_layout(title=t("lab_hist_title", k=k_detail), xaxis_title=t("lab_accepted_length"),
                      yaxis_title=t("lab_steps"), height=360, margin=dict(t=50, b=10), legend=dict(orientation="h", y=-0.25))
    st.plotly_chart(fig, width="stretch", key="lab_hist")
    st.caption(t("lab_per_pos_note"))

# ------------------------------------------------------------------ α–k heatmap of theoretical speedup
st.subheader(t("lab_heatmap_h"))
alphas = [i / 100 for i in range(0, 100)]
speedups = [[sd.theory.walltime_speedup_with_verify_cost(a, k, c_ratio, ratios[k]) for k in ks_axis] for a in alphas]
# Colour on a log2 scale centred on 1×: 0.5× and 2× are equally far from break-even.
z = [[max(-2.0, min(2.0, math.log2(max(s, 1e-9)))) for s in row] for row in speedups]
fig = go.Figure(go.Heatmap(x=ks_axis, y=alphas, z=z, customdata=speedups, colorscale="RdBu", zmin=-2, zmax=2,
                           colorbar=dict(title=t("speedup"), tickvals=[-2, -1, 0, 1, 2],
                                         ticktext=["≤ 0.25×", "0.5×", "1×", "2×", "≥ 4×"]),
                           hovertemplate="k=%{x}<br>α=%{y:.2f}<br>" + t("speedup") + "=%{customdata:.2f}×<extra></extra>"))
fig.add_scatter(x=ks_axis, y=[sd.theory.break_even_alpha(k, c_ratio, ratios[k]) for k in ks_axis], mode="lines",
                name=t("lab_break_even_line"), line=dict(color=charts.BLACK, width=3))
rule = []
for k in ks_axis:  # the seed's rule of thumb kα > 1 + k·c_q/c_p: the first α on the grid where it says "profitable"
    rule.append(next((a for a in alphas if sd.theory.rule_of_thumb_profitable(a, k, c_ratio)), None))
fig.add_scatter(x=ks_axis, y=rule, mode="lines", name=t("lab_rule_line"), line=dict(color=charts.BLACK, dash="dash", width=2))
if measured:
    fig.add_scatter(x=list(measured), y=[v["alpha"] for v in measured.values()], mode="markers+text",
                    text=[f"{v['speedup']:.2f}×" for v in measured.values()], textposition="top center",
                    name=t("lab_measured_point"),
                    marker=dict(symbol="star", size=16, color=charts.YELLOW, line=dict(color=charts.BLACK, width=1.5)))
fig.update_layout(xaxis_title="k", yaxis_title="α", height=520, margin=dict(t=30, b=10),
                  legend=dict(orientation="h", y=-0.15))
st.plotly_chart(fig, width="stretch", key="lab_heatmap")
st.caption(t("lab_heatmap_note", c=f"{c_ratio:.3f}"))

# ------------------------------------------------------------------ trees: τ and speed against tree size, beside the cost curve
trees.section(st, lm, cm, drafter, prompts.get(category, [])[:n_prompts], 4, max_new)

# ------------------------------------------------------------------ trained drafters: acceptance against training data
curve.show()

# ------------------------------------------------------------------ the block drafter: calibration and acceptance per position
calibration.show()
