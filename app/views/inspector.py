"""Draft–verify inspector: step through one speculative run, position by position."""
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app import charts, model_store, tokens_html, trace_store, tree_view, widgets
from app.language import t
from app.tokens_html import visible

import specdec_core as sd

st.title(t("insp_title"))
st.markdown(t("insp_intro"))

ss = st.session_state
SOURCES = ("example", "live")
source = st.radio(t("insp_source"), SOURCES, horizontal=True, key="insp_source",
                  format_func=widgets.labels(SOURCES, lambda s: t(f"insp_source_{s}")))

trace = None
if source == "example":
    index = [e for e in trace_store.load_index() if e.get("lanes", {}).get("spec")]
    if not index:
        st.info(t("insp_no_examples"))
    else:
        by_id = {e["id"]: e for e in index}
        chosen = widgets.selectbox(st, t("race_example"), by_id, "insp_example",
                                   lambda i: trace_store.example_title(by_id[i]))
        try:
            trace = trace_store.load_trace(trace_store.traces_dir() / by_id[chosen]["lanes"]["spec"])
        except sd.SpecDecError as err:
            st.warning(t("bad_trace", lane=t("lane_spec"), cause=str(err)))
else:
    ss.setdefault("insp_prompt", t("insp_default_prompt"))
    prompt = st.text_area(t("race_prompt"), key="insp_prompt", height=80)
    c = st.columns(5)
    drafter = widgets.selectbox(c[0], t("drafter"), widgets.drafter_options("sim"), "insp_drafter", widgets.drafter_label)
    widgets.drafter_card(c[0], drafter)
    tree, nodes = widgets.tree_picker(c[0], drafter, "insp")
    k = c[1].slider("k", 1, 16, 4, key="insp_k", help=t("k_help"))
    temperature = c[2].slider(t("temperature"), 0.0, 1.5, 0.8, 0.05, key="insp_temp", help=t("temperature_help"))
    hit_rate = c[3].slider(t("hit_rate"), 0.0, 1.0, 0.6, 0.05, key="insp_hit", help=t("hit_rate_help"),
                           disabled=drafter != "sim")
    max_new = c[4].slider(t("max_new_tokens"), 8, 96, 32, 8, key="insp_max_new")
    seed = st.number_input(t("seed"), 0, 10_000, 0, key="insp_seed")
    empty = widgets.prompt_hint(prompt)
    if st.button(t("insp_run"), type="primary", disabled=empty, key="insp_run"):
        lm = model_store.require_model()
        if model_store.check_prompt(lm, prompt) is not None:
            cfg = sd.GenerationConfig(mode="spec", drafter=drafter, k=k, temperature=temperature, tree=tree, tree_nodes=nodes,
                                      drafter_options={"hit_rate": hit_rate}, max_new_tokens=max_new, seed=int(seed))
            result = model_store.generate(lm, prompt, cfg)
            if result is not None:
                ss.insp_trace = result.trace
                ss.insp_step = 1
    trace = ss.get("insp_trace")

if trace is None:
    st.stop()

where = [i for i, s in enumerate(trace.steps) if s.kind == "decode"]  # index in trace.steps
steps = [trace.steps[i] for i in where]
if not steps:
    st.info(t("insp_no_steps"))
    st.stop()

greedy = float(trace.config.get("temperature", 0.0)) == 0.0
st.caption(t("insp_run_cfg", drafter=widgets.drafter_label(trace.drafter or "?"), k=trace.config.get("k"),
             temperature=trace.config.get("temperature"), model=trace.model, steps=len(steps)))
if trace.config.get("tree", "chain") != "chain":
    nodes = trace.config.get("tree_nodes") or t("tree_auto")
    st.caption(t("tree_run_cfg", tree=t(f"tree_{trace.config['tree']}"), nodes=nodes))
sources = {}  # `mix`: which drafter proposed how many steps (None: a plain step, no drafts)
for s in steps:
    if s.draft_source and trace.drafter == "mix":
        name = s.draft_source.split(":")[0]  # a recalled draft's source also says where from
        sources[name] = sources.get(name, 0) + 1
if sources:
    plain = sum(not s.drafted for s in steps)
    counts = ", ".join(f"{widgets.drafter_label(name)}: {n}" for name, n in sources.items())
    st.caption(t("insp_mix_sources", sources=counts, plain=plain))

# ------------------------------------------------------------------ step navigation
key = ("insp", id(trace) if source == "live" else trace.prompt, len(steps))
if ss.get("insp_key") != key:
    ss.insp_key = key
    ss.insp_step = 1
ss.insp_step = max(1, min(ss.get("insp_step", 1), len(steps)))


def _move(delta: int):
    ss.insp_step = max(1, min(ss.insp_step + delta, len(steps)))


def _first_rejection():
    for i, s in enumerate(steps, start=1):
        if s.drafted and s.accepted < len(s.drafted):
            ss.insp_step = i
            return


nav = st.columns([1.3, 1.3, 1.7, 5])
nav[0].button("◀ " + t("prev"), on_click=_move, args=(-1,), key="insp_prev")
nav[1].button(t("next") + " ▶", on_click=_move, args=(1,), key="insp_next")
nav[2].button(t("insp_first_reject"), on_click=_first_rejection, key="insp_jump_reject")
if len(steps) > 1:
    nav[3].slider(t("insp_step"), 1, len(steps), key="insp_step", label_visibility="collapsed")
step = steps[ss.insp_step - 1]
st.markdown(f"### {t('insp_step_h', i=ss.insp_step, n=len(steps), forwards=step.target_forwards)}")

# The text so far (prefill + earlier steps), then this step's drafts, verdicts and extra token.
before = [tok for s in trace.steps[: where[ss.insp_step - 1]] for tok in s.emitted]
context = "".join(tok.piece for tok in before[-60:])
spans = [tokens_html.plain_span(("…" if len(before) > 60 else "") + context)] if context else []
spans += tokens_html.spec_step_spans(step, show_rejected=True)
st.markdown(tokens_html.token_line(spans), unsafe_allow_html=True)

if (step.draft_source or "").startswith("suffix:"):  # the recipe book: where it recalled this draft from
    _, index, match, seen = step.draft_source.split(":")
    st.caption(t(f"insp_suffix_{index}", match=match, seen=seen))
if not step.drafted:
    st.info(t("insp_no_draft_mix") if sources else t("insp_no_draft"))
elif step.tree_parents:
    tree_view.show_step(st, step, greedy)
    if step.extra is not None:
        kind = step.extra_kind or "correction"
        st.markdown(t(f"insp_extra_{kind}", token=tokens_html.token_span(step.extra.piece, kind), p=f"{step.extra.prob or 0:.3f}"),
                    unsafe_allow_html=True)
else:
    chosen = (step.draft_source or "").split(":")[0]
    if chosen and chosen != trace.drafter:  # `mix` chose this step's drafter
        st.caption(t("insp_draft_source", source=widgets.drafter_label(chosen)))
    n = len(step.drafted)

    def verdict(i: int) -> str:
        """What the target made of position i (0-based; i = n is the bonus position)."""
        if i < step.accepted:
            return "✅ " + t("verdict_accepted")
        if i == step.accepted and i < n:
            return "❌ " + t("verdict_rejected")
        if i == step.accepted == n:
            return "★ " + t("verdict_bonus_pos")
        return "— " + t("verdict_unchecked")

    def percent(values: list[float], i: int) -> str:
        return f"{100 * values[i]:.0f} %" if i < len(values) else ""

    # A block drafter's confidence has its own table below, beside the guesses it was computed for.
    confidence = step.draft_confidence if not step.draft_guess else []
    rows = []
    for i in range(n + 1):
        drafted = step.drafted[i] if i < n else None
        target = step.target[i] if i < len(step.target) else None
        rows.append({
            t("col_pos"): i + 1,
            t("col_draft"): visible(drafted.piece) if drafted else "",
            "q(draft)": round(drafted.prob, 4) if drafted and drafted.prob is not None else None,
            t("col_confidence"): percent(confidence, i),
            "p(draft)": round(step.p_of_draft[i], 4) if i < len(step.p_of_draft) else None,
            "min(1, p/q)": round(step.accept_probs[i], 4) if i < len(step.accept_probs) else None,
            t("col_target_argmax"): visible(target.piece) if target else "",
            "p(argmax)": round(target.prob, 4) if target and target.prob is not None else None,
            t("col_verdict"): verdict(i),
        })
    table = pd.DataFrame(rows)
    if greedy:  # min(1, p/q) is the sampling rule only
        table = table.drop(columns=["min(1, p/q)"])
    if not confidence:  # a drafter without an estimate (or a block drafter: see its own table)
        table = table.drop(columns=[t("col_confidence")])
    st.dataframe(table, hide_index=True, width="stretch")
    extra = step.extra
    if extra is not None:
        kind = step.extra_kind or "correction"
        st.markdown(t(f"insp_extra_{kind}", token=tokens_html.token_span(extra.piece, kind), p=f"{extra.prob or 0:.3f}"),
                    unsafe_allow_html=True)
    st.caption(t("insp_rule_greedy") if greedy else t("insp_rule_sampling"))

    # ------------------------------------------------------------------ block drafters: the parallel guess, then the Markov head
    if step.draft_guess:
        st.markdown(f"**{t('insp_block_h')}**")
        st.dataframe(pd.DataFrame([{
            t("col_pos"): i + 1,
            t("col_block_guess"): visible(step.draft_guess[i].piece) if i < len(step.draft_guess) else "",
            t("col_block_markov"): visible(step.drafted[i].piece),
            t("col_block_confidence"): percent(step.draft_confidence, i),
            t("col_verdict"): verdict(i),
        } for i in range(n)]), hide_index=True, width="stretch")
        changed = sum(g.id != d.id for g, d in zip(step.draft_guess, step.drafted))
        st.caption(t("insp_block_note", changed=changed, n=n))

    # ------------------------------------------------------------------ p vs q at every drafting step; sampling: residual
    rejected = step.accepted if step.accepted < n else None
    positions = list(range(1, n + 1))
    default = (rejected + 1) if rejected is not None else n
    pos = st.select_slider(t("insp_position"), positions, value=default, key=f"insp_pos_{ss.insp_step}") \
        if n > 1 else 1
    i = pos - 1
    p_top = step.p_top[i] if i < len(step.p_top) else []
    q_top = step.q_top[i] if i < len(step.q_top) else []
    drafted = step.drafted[i]
    labels, p_vals, q_vals = [], [], []
    seen = {}
    for tok in [*p_top, *q_top, drafted]:
        if tok.id not in seen:
            seen[tok.id] = len(labels)
            labels.append(visible(tok.piece))
            p_vals.append(None)
            q_vals.append(None)
    for tok in p_top:
        p_vals[seen[tok.id]] = tok.prob
    for tok in q_top:
        q_vals[seen[tok.id]] = tok.prob
    if i < len(step.p_of_draft):
        p_vals[seen[drafted.id]] = step.p_of_draft[i]
    if not q_top:  # a deterministic drafter: q is one-hot on its token
        q_vals[seen[drafted.id]] = drafted.prob
    labels = [f"{lab} ({tid})" if labels.count(lab) > 1 else lab for lab, tid in zip(labels, seen)]
    fig = go.Figure()
    fig.add_bar(x=labels, y=p_vals, name=t("p_target"), marker_color=charts.BLUE)
    fig.add_bar(x=labels, y=q_vals, name=t("q_draft"), marker_color=charts.ORANGE, marker_pattern_shape="/")
    fig.update_layout(barmode="group", height=320, margin=dict(t=40, b=10),
                      title=t("insp_pq_title", pos=pos, token=visible(drafted.piece)),
                      yaxis_title=t("probability"))
    a, b = st.columns([2, 1])
    a.plotly_chart(fig, width="stretch", key="insp_pq")
    with b:
        if greedy:
            examined = i <= step.accepted
            st.caption(t("insp_pq_greedy") if examined else t("insp_not_examined"))
        elif i < len(step.accept_probs):
            st.metric(t("insp_accept_prob"), f"{step.accept_probs[i]:.3f}")
            st.caption(t("insp_accept_prob_note"))
        else:
            st.caption(t("insp_not_examined"))
        if not q_top:
            st.caption(t("insp_q_onehot"))
    if not greedy and rejected is not None and step.residual_top:
        st.markdown(f"**{t('insp_residual_h', pos=rejected + 1)}**")
        res = go.Figure()
        res.add_bar(x=[visible(tok.piece) for tok in step.residual_top], y=[tok.prob for tok in step.residual_top],
                    marker_color=charts.GREEN, name="norm(max(0, p−q))")
        res.update_layout(height=280, margin=dict(t=10, b=10), yaxis_title=t("probability"))
        st.plotly_chart(res, width="stretch", key="insp_residual")
        st.caption(t("insp_residual_note", token=visible(step.extra.piece) if step.extra else "?"))

tokens_html.show_legend()
