"""Decoding race: one prompt, four lanes (AR, NAR, Jacobi, draft→verify), replayed from traces
recorded with the real model, or decoded live; live, a fifth lane can run AR on the target's int8 or
int4 copy (faster, but its text may leave fp32's)."""
from bisect import bisect_right

import pandas as pd
import streamlit as st

from app import model_store, race_lanes, tokens_html, trace_store, widgets
from app.language import t
from app.race_lanes import QUANT_LANE
from app.trace_store import LANES

import specdec_core as sd

TIME_FRAMES = 100  # frames of a replay on the time clock
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0)

st.title(t("race_title"))
st.markdown(t("race_intro"))

ss = st.session_state
ss.setdefault("race_frame", 0)
ss.setdefault("race_playing", False)
ss.setdefault("race_source", None)

# ------------------------------------------------------------------ where the lanes come from
live = st.toggle(t("race_live_toggle"), key="race_live", help=t("race_live_help"))
lanes: dict[str, list] = {}
configs: dict[str, dict] = {}
prompt = ""
source = None
run_live = False
quant_weights = "none"  # live: run a fifth lane, AR on the target's int8 / int4 copy

if not live:
    index = trace_store.load_index()
    if not index:
        st.info(t("race_no_examples"))
    else:
        ids = [e["id"] for e in index]
        by_id = {e["id"]: e for e in index}
        chosen = widgets.selectbox(st, t("race_example"), ids, "race_example",
                                   lambda i: f"{trace_store.example_title(by_id[i])}  ·  {by_id[i].get('category', '')}")
        entry = by_id[chosen]
        traces = trace_store.load_example(entry)
        lanes = {lane: tr.steps for lane, tr in traces.items() if tr.steps}
        configs = {lane: tr.config for lane, tr in traces.items()}
        prompt = entry.get("prompt") or next((tr.prompt for tr in traces.values()), "")
        source = ("example", chosen)
        models = sorted({tr.model for tr in traces.values()})
        if models:
            st.caption(t("race_recorded", model=", ".join(models)))
else:
    default_prompt = ss.get("race_last_prompt") or t("race_default_prompt")
    ss.setdefault("race_prompt", default_prompt)
    prompt = st.text_area(t("race_prompt"), key="race_prompt", height=90)
    c1, c2, c3, c4, c5 = st.columns(5)
    max_new = c1.slider(t("max_new_tokens"), 8, 128, 64, 8, key="race_max_new")
    drafter = widgets.selectbox(c2, t("drafter"), widgets.drafter_options("ngram"), "race_drafter", widgets.drafter_label)
    widgets.drafter_card(c2, drafter)
    tree, tree_nodes = widgets.tree_picker(c2, drafter, "race")
    k = c3.slider("k", 1, 8, 4, key="race_k", help=t("k_help"))
    window = c4.slider(t("window"), 4, 32, 16, 4, key="race_window", help=t("window_help"))
    quant_weights = widgets.selectbox(c5, t("race_quant_lane"), ("none", "int8", "int4"), "race_quant_weights",
                                      widgets.labels(("none", "int8", "int4"), lambda w: t("race_quant_none") if w == "none" else w),
                                      help=t("race_quant_lane_help"))
    empty = widgets.prompt_hint(prompt)
    run_live = st.button(t("race_run_live"), type="primary", disabled=empty, key="race_run")
    result = ss.get("race_live_result")
    if result:
        lanes, configs, prompt = result["lanes"], result["configs"], result["prompt"]
        source = ("live", result["run"])

if prompt and not live:
    with st.expander(t("race_prompt_shown"), expanded=False):
        st.code(prompt, language=None, wrap_lines=True)

# ------------------------------------------------------------------ replay controls
CLOCKS = ("time", "forwards")
clock = st.radio(t("race_clock"), CLOCKS, horizontal=True, key="race_clock",
                 format_func=widgets.labels(CLOCKS, lambda c: t(f"race_clock_{c}")), help=t("race_clock_help"))
clocks = {lane: race_lanes.lane_clocks(steps, clock) for lane, steps in lanes.items()}
end_clock = max((c[-1] for c in clocks.values() if c), default=0.0)
n_frames = max(1, int(round(end_clock))) if clock == "forwards" else TIME_FRAMES

if ss.race_source != (source, clock):
    ss.race_source = (source, clock)
    ss.race_frame = 0
    first_visit = not ss.get("race_autoplayed")
    ss.race_playing = bool(lanes) and first_visit and not live  # the first race starts by itself
    ss.race_autoplayed = True
ss.race_frame = min(ss.race_frame, n_frames)


def _play():
    if ss.race_frame >= n_frames:
        ss.race_frame = 0
    ss.race_playing = True


def _pause():
    ss.race_playing = False


def _step():
    ss.race_playing = False
    ss.race_frame = min(ss.race_frame + 1, n_frames)


def _end():
    ss.race_playing = False
    ss.race_frame = n_frames


def _reset():
    ss.race_playing = False
    ss.race_frame = 0


b = st.columns([1, 1, 1, 1.3, 1, 3])
b[0].button("▶ " + t("play"), on_click=_play, key="race_play", disabled=not lanes)
b[1].button("⏸ " + t("pause"), on_click=_pause, key="race_pause", disabled=not lanes)
b[2].button("⏭ " + t("step"), on_click=_step, key="race_step", disabled=not lanes)
b[3].button("⏩ " + t("jump_end"), on_click=_end, key="race_end", disabled=not lanes)
b[4].button("⏮ " + t("reset"), on_click=_reset, key="race_reset", disabled=not lanes)
speed = b[5].select_slider(t("speed"), SPEEDS, value=1.0, key="race_speed", format_func=lambda s: f"{s:g}×")
show_rejected = st.checkbox(t("race_show_rejected"), value=True, key="race_show_rejected")

# ------------------------------------------------------------------ the lanes
# The quantised AR lane shows when this run asks for it (live) or the shown result has it.
quant_asked = live and quant_weights != "none"
shown_weights = quant_weights if quant_asked else (configs.get(QUANT_LANE) or {}).get("weights")
lane_names = (*LANES, QUANT_LANE) if (quant_asked or QUANT_LANE in lanes) else LANES
progress = st.empty()
cols = st.columns(len(lane_names), gap="small")
slots = {}
for lane, col in zip(lane_names, cols):
    with col:
        st.markdown(f"#### {t('lane_' + lane, weights=shown_weights)}")
        st.caption(t(f"lane_{lane}_desc"))
        cfg = configs.get(lane) or {}
        if lane == "spec" and cfg:
            st.caption(t("race_spec_cfg", drafter=widgets.drafter_label(cfg.get("drafter", "?")), k=cfg.get("k", "?")))
            if cfg.get("tree", "chain") != "chain":
                st.caption(t("tree_run_cfg", tree=t(f"tree_{cfg['tree']}"), nodes=cfg.get("tree_nodes") or t("tree_auto")))
        elif lane in ("nar", "jacobi") and cfg:
            st.caption(t("race_window_cfg", window=cfg.get("window", "?")))
        slots[lane] = (st.empty(), st.empty(), st.empty())  # stats, tokens, extra (NAR vs AR)


def ar_ids(steps) -> list[int]:
    return [tok.id for s in steps for tok in s.emitted]


reference = ar_ids(lanes["ar"]) if "ar" in lanes else None


def draw_lane(lane: str, steps, n: int) -> race_lanes.LaneView:
    stats, body, extra = slots[lane]
    view = race_lanes.render_lane(lane, steps, n, reference_ids=reference, show_rejected=show_rejected)
    per_fwd = view.tokens / view.forwards if view.forwards else 0.0
    flag = " 🏁" if view.done else ""
    stats.markdown(t("lane_stats", forwards=view.forwards, tokens=view.tokens, seconds=f"{view.seconds:.2f}",
                     per_fwd=f"{per_fwd:.2f}") + flag)
    body.markdown(view.html, unsafe_allow_html=True)
    if lane in ("nar", QUANT_LANE) and reference is not None and view.ids:
        ref = reference[: len(view.ids)]
        same = sd.metrics.positional_matches(view.ids, ref)
        ar_pieces = [tok.piece for s in lanes["ar"] for tok in s.emitted][: len(view.ids)]
        extra.markdown(f"**{t('race_nar_vs_ar', same=same, total=len(view.ids))}**  \n"
                       + tokens_html.token_line([tokens_html.token_span(p, "ar") for p in ar_pieces], "opacity:.85"),
                       unsafe_allow_html=True)
    return view


def draw(frame: int) -> dict:
    now = end_clock * frame / n_frames if clock == "time" else float(frame)
    views = {}
    for lane, steps in lanes.items():
        n = bisect_right(clocks[lane], now + 1e-9)
        views[lane] = draw_lane(lane, steps, n)
    unit = t("race_unit_s") if clock == "time" else t("race_unit_fwd")
    shown = f"{now:.2f}" if clock == "time" else f"{int(now)}"
    progress.progress(frame / n_frames, text=t("race_progress", now=shown, unit=unit, frame=frame, frames=n_frames))
    return views


for lane in lane_names:
    if lane not in lanes:
        slots[lane][1].info(t("race_live_press_run") if live else t("race_lane_missing"))

if run_live:
    lm = model_store.require_model()
    if model_store.check_prompt(lm, prompt) is None:
        st.stop()
    cfgs = {
        "ar": sd.GenerationConfig(mode="ar", max_new_tokens=max_new),
        "nar": sd.GenerationConfig(mode="nar", window=window, max_new_tokens=max_new),
        "jacobi": sd.GenerationConfig(mode="jacobi", window=window, max_new_tokens=max_new),
        "spec": sd.GenerationConfig(mode="spec", drafter=drafter, k=k, tree=tree, tree_nodes=tree_nodes, max_new_tokens=max_new),
    }
    models = dict.fromkeys(cfgs, lm)
    if quant_asked:
        cfgs[QUANT_LANE] = sd.GenerationConfig(mode="ar", max_new_tokens=max_new)
        with st.spinner(t("race_quant_building", weights=quant_weights)):
            models[QUANT_LANE] = sd.quant.with_weights(lm, quant_weights)  # seconds, once per server
    events: dict[str, list] = {lane: [] for lane in cfgs}
    lanes, reference = events, None
    for lane in cfgs:
        slots[lane][1].empty()
    error = None
    try:
        with model_store.live_decoding(progress):
            # ar and spec: the server's shared batch (batched mode); nar, jacobi and the quantised ar:
            # loops of their own.
            streams = {lane: model_store.stream(models[lane], prompt, cfg) for lane, cfg in cfgs.items()}
            elapsed = dict.fromkeys(cfgs, 0.0)
            # Interleave the four decoders by their own measured clocks: the lane that has spent the
            # least decode time so far takes the next step, so the live view is a fair race.
            while streams:
                lane = min(streams, key=elapsed.get)
                try:
                    event = model_store.next_event(streams[lane], models[lane], cfgs[lane], progress)
                except StopIteration:
                    del streams[lane]
                    continue
                events[lane].append(event)
                elapsed[lane] += race_lanes.step_seconds(event)
                if lane == "ar":
                    reference = ar_ids(events["ar"])
                draw_lane(lane, events[lane], len(events[lane]))
    except sd.SpecDecError as err:
        error = t("err_input", cause=str(err))
    except Exception as err:  # a model failure must not show a traceback
        error = t("err_model", cause=f"{type(err).__name__}: {err}")
    if error:
        st.error(error)
        st.stop()
    run_id = ss.get("race_live_run", 0) + 1
    ss.race_live_run = run_id
    ss.race_last_prompt = prompt
    configs = {lane: vars(cfg) for lane, cfg in cfgs.items()}
    if quant_asked:
        configs[QUANT_LANE] = {**configs[QUANT_LANE], "weights": quant_weights}
    ss.race_live_result = {"lanes": events, "prompt": prompt, "run": run_id, "configs": configs}
    st.rerun()  # redraw through the replay path: controls, summary

if lanes:
    views = draw(ss.race_frame)
    if ss.race_playing:
        frame = ss.race_frame
        while frame < n_frames:
            race_lanes.sleep_frame(speed)
            frame += 1
            ss.race_frame = frame
            views = draw(frame)
        ss.race_playing = False

    if ss.race_frame >= n_frames:
        st.subheader(t("race_summary_h"))
        ar_s = views["ar"].seconds if "ar" in views else None
        rows = []
        for lane, v in views.items():
            rows.append({
                t("col_lane"): t("lane_" + lane, weights=shown_weights),
                t("col_tokens"): v.tokens,
                t("col_forwards"): v.forwards,
                t("col_seconds"): round(v.seconds, 3),
                t("col_tokens_per_fwd"): round(v.tokens / v.forwards, 2) if v.forwards else 0.0,
                t("col_vs_ar"): round(ar_s / v.seconds, 2) if ar_s and v.seconds else None,
                t("col_same_as_ar"): (sd.metrics.matching_prefix(v.ids, reference) == len(reference) == len(v.ids))
                if reference is not None else None,
            })
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
        st.caption(t("race_summary_note"))

st.divider()
tokens_html.show_legend()
st.caption(t("race_legend_note"))
