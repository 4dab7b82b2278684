"""`report`: turn a bench results.json (and optionally a cost model) into one offline HTML page (plotly.js
in a file beside it) plus a Markdown summary. Both are generated (`make report`), never committed."""
from __future__ import annotations

import html
import json
from pathlib import Path

from ..errors import SpecDecError
from .. import theory


def _load(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise SpecDecError(f"cannot read {path}: {err}")


def markdown_summary(results: dict) -> str:
    env = results["environment"]
    lines = [f"Environment: {env.get('cpu')} · {env.get('threads')} threads · {env.get('device')} {env.get('dtype')} · "
             f"torch {env.get('torch')} · transformers {env.get('transformers')} · {env.get('date')}"
             + (f" · commit {env['commit']}" if env.get("commit") else ""), "",
             "| mode | speedup vs ar | τ (mean accepted length) | α (acceptance) | identical to ar |",
             "|---|---|---|---|---|"]
    for label, s in results["summary"].items():
        tau = "–" if s["mean_accepted_length"] is None else f"{s['mean_accepted_length']:.2f}"
        alpha = "–" if s["acceptance_rate"] is None else f"{s['acceptance_rate']:.2f}"
        lines.append(f"| {label} | {s['speedup_vs_ar']:.2f}× | {tau} | {alpha} | {s['identical_to_ar'] or '–'} |")
    labels = list(results["summary"])
    lines += ["", "Speedup vs `ar` by category:", "", "| category | " + " | ".join(labels) + " |",
              "|---|" + "---|" * len(labels)]
    for category, row in results["by_category"].items():
        lines.append(f"| {category} | " + " | ".join(f"{row[l]['speedup_vs_ar']:.2f}×" if l in row else "–" for l in labels) + " |")
    spec_labels = [l for l in labels if results["summary"][l]["mean_accepted_length"] not in (None, 1.0)]
    if spec_labels:
        lines += ["", "τ (mean accepted length) by category:", "", "| category | " + " | ".join(spec_labels) + " |",
                  "|---|" + "---|" * len(spec_labels)]
        for category, row in results["by_category"].items():
            lines.append(f"| {category} | " + " | ".join(
                f"{row[l]['mean_accepted_length']:.2f}" if row.get(l, {}).get("mean_accepted_length") is not None else "–"
                for l in spec_labels) + " |")
    lines += ["", "| mode | tokens/s | median TTFT | peak KV cache | drafter memory | P(drafts 1..i all accepted), i = 1, 2, … |",
              "|---|---|---|---|---|---|"]
    for label, s in results["summary"].items():
        per_pos = s.get("acceptance_per_pos")
        tps = s.get("tokens_per_s")
        lines.append(f"| {label} | {'–' if tps is None else f'{tps:.1f}'} | {_ms(s.get('ttft_s'))} | {_mb(s.get('kv_cache_bytes'))} | "
                     f"{_mb(s.get('drafter_bytes'))} | {' '.join('–' if p is None else f'{p:.2f}' for p in per_pos) if per_pos else '–'} |")
    rss = max((r.get("peak_rss_bytes") or 0 for r in results["results"]), default=0)
    if rss:
        lines += ["", f"Peak resident memory of the whole bench process (all modes, model included): {rss / 2**20:.0f} MiB."]
    gpu = {label: s["peak_gpu_bytes"] for label, s in results["summary"].items() if s.get("peak_gpu_bytes")}
    if gpu:
        lines += ["", "Peak GPU memory per mode (weights, KV cache, drafter and activations): "
                  + " · ".join(f"{label} {_mb(nbytes)}" for label, nbytes in gpu.items()) + "."]
    return "\n".join(lines) + "\n"


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{1000 * seconds:.0f} ms"


def _mb(nbytes: int | None) -> str:
    return "–" if not nbytes else f"{nbytes / 2**20:.1f} MiB"


def _figures(results: dict, cost: dict | None) -> list:
    import plotly.graph_objects as go

    figures = []
    categories = list(results["by_category"])
    fig = go.Figure()
    for label in results["summary"]:
        if label == "ar":
            continue
        fig.add_bar(name=label, x=categories, y=[results["by_category"][c].get(label, {}).get("speedup_vs_ar") for c in categories])
    fig.add_hline(y=1.0, line_dash="dash", annotation_text="ar")
    fig.update_layout(title="Speedup vs ar per category (geometric mean over prompts)", barmode="group", yaxis_title="×")
    figures.append(fig)

    # Measured tau vs the i.i.d. theory at the measured acceptance rate.
    fig = go.Figure()
    for label, s in results["summary"].items():
        if s["acceptance_rate"] is None:
            continue
        fig.add_scatter(x=[s["acceptance_rate"]], y=[s["mean_accepted_length"]], mode="markers+text", text=[label],
                        textposition="top center", name=label)
    alphas = [i / 100 for i in range(100)]
    for k in sorted({r.get("draft_k") or r["k"] for r in results["results"] if r["mode"] != "ar"}):
        fig.add_scatter(x=alphas, y=[theory.expected_tokens_per_step(a, k) for a in alphas], name=f"theory k={k}", line_dash="dot")
    fig.update_layout(title="Measured τ vs (1−α^(k+1))/(1−α)", xaxis_title="α (acceptance rate)", yaxis_title="τ")
    figures.append(fig)

    # Per-position acceptance: P(the first i drafts all accepted | the step drafted >= i); i.i.d. theory alpha^i.
    fig = go.Figure()
    for label, s in results["summary"].items():
        per_pos = s.get("acceptance_per_pos")
        if per_pos:
            fig.add_scatter(x=list(range(1, len(per_pos) + 1)), y=per_pos, mode="lines+markers", name=label)
    if fig.data:
        fig.update_layout(title="Per-position acceptance: P(drafts 1..i all accepted)", xaxis_title="draft position i",
                          yaxis_title="P(accepted)", yaxis_range=[0, 1])
        figures.append(fig)

    # Speedup vs k, one line per mode and temperature (sweep runs only: labels MODE@k=K,t=T).
    config = results["config"]
    if len(config["k"]) > 1:
        fig = go.Figure()
        lines: dict[str, list] = {}
        for label in results["summary"]:
            mode, rest = label.rsplit("@k=", 1)
            k, t = rest.split(",t=")
            lines.setdefault(f"{mode} t={t}", []).append((int(k), results["summary"][label]["speedup_vs_ar"]))
        for name, points in lines.items():
            points.sort()
            fig.add_scatter(x=[k for k, _ in points], y=[v for _, v in points], mode="lines+markers", name=name)
        fig.add_hline(y=1.0, line_dash="dash")
        fig.update_layout(title="Speedup vs ar as a function of k", xaxis_title="k (max drafted tokens)", yaxis_title="×")
        figures.append(fig)

    if cost:
        fig = go.Figure()
        for batch in sorted({r["batch"] for r in cost["forward_s"]}):
            rows = sorted((r["tokens"], r["seconds"]) for r in cost["forward_s"] if r["batch"] == batch)
            fig.add_scatter(x=[t for t, _ in rows], y=[1000 * s for _, s in rows], name=f"batch {batch}")
        fig.update_layout(title="Cost model: one forward vs new tokens per sequence", xaxis_title="new tokens per forward",
                          yaxis_title="ms")
        figures.append(fig)
    return figures


PLOTLY_JS = "plotly.min.js"  # written beside the page from the installed plotly: offline, and out of git


def write_report(results_paths: list[Path], out: Path, cost_path: Path | None = None) -> None:
    """One page for one or more bench runs (e.g. the suite and a k sweep); the cost model once, at the end.
    The page loads plotly.js from a file beside it (written from the installed package, 4.8 MB) instead
    of inlining it, so pages stay small and the bundle is one generated file."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    cost = _load(cost_path) if cost_path else None
    sections, summaries = [], []
    for index, path in enumerate(results_paths):
        results = _load(path)
        summary = f"## {Path(path).name}\n\n" + markdown_summary(results)
        figures = _figures(results, cost if index == len(results_paths) - 1 else None)
        charts = [pio.to_html(fig, full_html=False, include_plotlyjs=False) for fig in figures]
        sections.append("<pre>" + html.escape(summary) + "</pre>" + "".join(charts))
        summaries.append(summary)
    bundle = out.parent / PLOTLY_JS
    script = get_plotlyjs()
    if not bundle.exists() or bundle.read_text(encoding="utf-8") != script:
        bundle.write_text(script, encoding="utf-8")
    page = ("<!doctype html><html><head><meta charset='utf-8'><title>specdec-lab benchmark report</title>"
            f"<script src='{PLOTLY_JS}'></script></head><body>"
            "<h1>specdec-lab benchmark report</h1>" + "".join(sections) + "</body></html>")
    out.write_text(page, encoding="utf-8")
    out.with_suffix(".md").write_text("\n".join(summaries), encoding="utf-8")
