"""A draft tree step drawn: every node by depth, coloured by what verification made of it.

A node is *accepted* (on the path the target walked), *rejected* (verification reached its parent and
turned it down), or *never reached* (its parent was rejected, or — sampling — a sibling before it was
accepted, so it was never tried). The accepted path is drawn thick; hovering a node shows its token,
its rank among its siblings, q (the drafter's probability at its parent) and p (the target's).
"""
from __future__ import annotations

import plotly.graph_objects as go

from app import charts
from app.language import t
from app.tokens_html import ROLES, visible
from specdec_core.trees import sibling_ranks

STATE_COLOURS = {"accepted": ROLES["accepted"][0], "rejected": ROLES["rejected"][0], "unreached": charts.LIGHT_GREY}
STATE_SYMBOLS = {"accepted": "circle", "rejected": "x", "unreached": "circle-open"}  # a second cue beside colour


def node_states(parents: list[int], path: list[int], greedy: bool) -> list[str]:
    """accepted / rejected / unreached for every node of a verified tree (see the module's docstring)."""
    on_path = set(path)
    reached = {-1} | on_path
    accepted_rank = {parents[node]: rank for node, rank in zip(range(len(parents)), sibling_ranks(parents)) if node in on_path}
    states = []
    for node, (parent, rank) in enumerate(zip(parents, sibling_ranks(parents))):
        if node in on_path:
            states.append("accepted")
        elif parent in reached and (greedy or rank < accepted_rank.get(parent, len(parents))):
            states.append("rejected")
        else:
            states.append("unreached")
    return states


def layout(parents: list[int]) -> dict[int, tuple[int, float]]:
    """(depth, row) per node, -1 the root: children drawn in rank order within the span of their parent,
    so edges never cross; a parent sits at the middle of its span."""
    kids: dict[int, list[int]] = {}
    for node, parent in enumerate(parents):
        kids.setdefault(parent, []).append(node)
    leaves: dict[int, int] = {}

    def count(node: int) -> int:
        leaves[node] = sum(count(child) for child in kids.get(node, [])) or 1
        return leaves[node]

    count(-1)
    places: dict[int, tuple[int, float]] = {}

    def place(node: int, depth: int, top: float) -> None:
        for child in kids.get(node, []):
            places[child] = (depth + 1, top + (leaves[child] - 1) / 2)
            place(child, depth + 1, top)
            top += leaves[child]

    places[-1] = (0, (leaves[-1] - 1) / 2)
    place(-1, 0, 0.0)
    return places


def tree_figure(step, greedy: bool) -> go.Figure:
    """The step's tree: the root (the context's last token) at depth 0, then every drafted node."""
    parents, path = step.tree_parents, step.tree_path
    states = node_states(parents, path, greedy)
    ranks = sibling_ranks(parents)
    xy = layout(parents)
    root_row = xy[-1][1]
    fig = go.Figure()
    for node, parent in enumerate(parents):  # edges: the accepted path thick
        (x0, y0), (x1, y1) = xy[parent], xy[node]
        thick = node in path
        fig.add_scatter(x=[x0, x1], y=[y0, y1], mode="lines", hoverinfo="skip", showlegend=False,
                        line=dict(width=5 if thick else 1.2, color=STATE_COLOURS["accepted"] if thick else charts.GREY))
    fig.add_scatter(x=[0], y=[root_row], mode="markers+text", text=[t("tree_root")], textposition="middle left",
                    marker=dict(size=16, color=charts.SKY, symbol="square"), hoverinfo="skip", showlegend=False)
    for state in ("accepted", "rejected", "unreached"):
        nodes = [i for i, s in enumerate(states) if s == state]
        if not nodes:
            continue
        hover = [t("tree_hover", token=visible(step.drafted[i].piece), rank=ranks[i] + 1,
                   q=step.drafted[i].prob or 0.0, p=step.p_of_draft[i] if i < len(step.p_of_draft) else 0.0) for i in nodes]
        fig.add_scatter(x=[xy[i][0] for i in nodes], y=[xy[i][1] for i in nodes], mode="markers+text",
                        text=[visible(step.drafted[i].piece) for i in nodes], textposition="middle right",
                        hovertext=hover, hoverinfo="text", name=t(f"tree_{state}"),
                        marker=dict(size=14, color=STATE_COLOURS[state], symbol=STATE_SYMBOLS[state],
                                    line=dict(width=2, color=STATE_COLOURS[state])))
    depth = max(x for x, _ in xy.values())
    fig.update_layout(height=max(260, 34 * (2 * root_row + 1) + 80), margin=dict(t=30, b=10, l=10, r=10),
                      xaxis=dict(title=t("tree_depth"), tickmode="linear", dtick=1, range=[-0.6, depth + 0.9]),
                      yaxis=dict(visible=False, autorange="reversed"), legend=dict(orientation="h", y=1.08))
    return fig


def show_step(st, step, greedy: bool) -> None:
    """The inspector's view of one tree step: the tree, then the accepted path as a table."""
    import pandas as pd

    st.markdown(f"**{t('insp_tree_h', nodes=len(step.tree_parents), depth=step.draft_depth, accepted=step.accepted)}**")
    st.plotly_chart(tree_figure(step, greedy), width="stretch", key="insp_tree_chart")
    ranks = sibling_ranks(step.tree_parents)
    siblings = {parent: step.tree_parents.count(parent) for parent in set(step.tree_parents)}
    rows, parent = [], -1
    for depth, node in enumerate(step.tree_path, start=1):
        rows.append({t("tree_depth"): depth, t("col_draft"): visible(step.drafted[node].piece),
                     t("col_rank"): f"{ranks[node] + 1} / {siblings[parent]}", "q": round(step.drafted[node].prob or 0.0, 4),
                     "p": round(step.p_of_draft[node], 4)})
        parent = node
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    st.caption(t("insp_tree_rule_greedy") if greedy else t("insp_tree_rule_sampling"))
