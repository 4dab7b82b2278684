"""The lab's methodology pointed at any OpenAI-compatible server: `bench --endpoint URL [--baseline-endpoint URL]`,
every prompt on the server (and its baseline) interleaved, and `load-test --endpoint` (`remote_load.py`: the
local load test's workload, closed loop and metrics). A request is `remote_client.py`'s streamed request,
timed on the client's clock; the server's own speculative counters are read by `remote_counters.py`.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from ..errors import SpecDecError, ensure_writable
from ..metrics import geomean
from ..suite import PromptCase, load_prompts, only_categories
from .remote_client import (NO_PROMPT_CACHE, RemoteRequest, make_client, normalize_endpoint, request_figures,
                            served_models, stream_chat)
from .remote_counters import Snapshot, counter_delta, fetch_metrics, fetch_server_info, speculative_figures


# --- bench against one server or two, interleaved ------------------------------------------------


@dataclass
class Server:
    label: str  # "endpoint" or "baseline"
    url: str
    model: str
    client: httpx.Client
    before: Snapshot | None = None
    failed: str = ""  # the first failure: later prompts are not sent to a server that failed


def open_server(label: str, url: str, model: str | None) -> Server:
    """Check the server answers like an OpenAI one and pick the model name: the one asked for when
    the server serves it (or serves anything: llama-server answers to any name), else its first."""
    url = normalize_endpoint(url)
    client = make_client()
    models = served_models(client, url)
    if model and model not in models and len(models) > 1:
        raise SpecDecError(f"{url} does not serve model {model!r} (it serves: {', '.join(models[:5])})")
    chosen = model if model and (model in models or not models) else (models[0] if models else "default")
    return Server(label, url, chosen, client, fetch_metrics(client, url))


@dataclass(frozen=True)
class RemoteSettings:
    """The servers a run goes to, and what each of its requests asks for."""

    endpoint: str
    baseline: str | None = None  # a second server (speculation off) to compare with
    model: str | None = None  # the served model's name; None: the server's own (see open_server)
    max_tokens: int = 64
    seed: int = 0
    no_prompt_cache: bool = False  # send NO_PROMPT_CACHE in every request

    @property
    def extra(self) -> dict:
        """Server-specific fields every request of the run carries."""
        return dict(NO_PROMPT_CACHE) if self.no_prompt_cache else {}

    def open(self) -> list[Server]:
        """The endpoint and, if given, its baseline, each checked to answer like an OpenAI server."""
        servers = [open_server("endpoint", self.endpoint, self.model)]
        if self.baseline:
            servers.append(open_server("baseline", self.baseline, self.model))
        return servers


def run_case(server: Server, case: PromptCase, first_id: int, max_tokens: int, temperature: float,
             seed: int, extra: dict | None = None) -> list[RemoteRequest]:
    """One prompt, every turn, on one server (a later turn sees that server's own earlier answers)."""
    messages: list[dict] = []
    out = []
    for turn in case.turns:
        messages.append({"role": "user", "content": turn})
        record = stream_chat(server.client, server.url, messages, model=server.model, max_tokens=max_tokens,
                             temperature=temperature, seed=seed, id=first_id + len(out), label=case.id, extra=extra)
        out.append(record)
        if not record.ok:
            break
        messages.append({"role": "assistant", "content": record.text})
    return out


def case_row(server: Server, case: PromptCase, records: list[RemoteRequest]) -> dict:
    """One prompt on one server, like a local bench row: wall_s and tokens over its turns, TTFT of the first."""
    ok = all(r.ok for r in records) and len(records) == len(case.turns)
    figures = [request_figures(r) for r in records if r.ok]
    speeds = [f["tokens_per_s"] for f in figures if f["tokens_per_s"] is not None]
    return {"prompt_id": case.id, "category": case.category, "endpoint": server.label, "url": server.url,
            "ok": ok, "error": next((r.error for r in records if r.error), "" if ok else "not run"),
            "text": "".join(r.text for r in records), "new_tokens": sum(r.completion_tokens for r in records),
            "wall_s": sum(f["wall_s"] for f in figures), "ttft_s": figures[0]["ttft_s"] if figures else None,
            "tokens_per_s": statistics.median(speeds) if speeds else None,  # per-user decode speed (request_speed)
            "itl_s": [g for f in figures for g in f["itl_s"]],
            "finish_reasons": [r.finish_reason for r in records],
            "timings": [r.timings for r in records if r.timings]}


def run_remote_bench(servers: list[Server], cases: list[PromptCase], max_tokens: int, temperature: float,
                     seed: int, repeats: int = 1, progress=None,
                     extra: dict | None = None) -> tuple[list[dict], dict[str, list[RemoteRequest]]]:
    """Every prompt on every server, interleaved per prompt (the order rotates each prompt, as the local
    bench does). A server that fails is not asked again; its remaining prompts are rows marked 'not run'."""
    rows, records = [], {s.label: [] for s in servers}
    for index, case in enumerate(cases):
        for repeat in range(repeats):
            shift = (index + repeat) % len(servers)
            for server in servers[shift:] + servers[:shift]:
                if server.failed:
                    done: list[RemoteRequest] = []
                else:
                    done = run_case(server, case, len(records[server.label]), max_tokens, temperature, seed, extra)
                    records[server.label] += done
                    failure = next((r.error for r in done if r.error), "")
                    if failure and not any(r.ok for r in records[server.label]):
                        # Nothing ever worked: not a mid-run failure but a wrong server or setting.
                        raise SpecDecError(f"{server.url}: {failure}")
                    server.failed = failure
                rows.append({**case_row(server, case, done), "repeat": repeat})
                if progress:
                    progress()
    return rows, records


def summarise_remote(rows: list[dict], records: dict[str, list[RemoteRequest]], counters: dict[str, dict],
                     temperature: float) -> dict:
    """Per server and category: median per-user tokens/s and TTFT over completed prompts, end-to-end
    tokens/s (tokens / wall), and with a baseline the interleaved per-prompt ratio (geometric mean of
    baseline / endpoint wall per token) and, greedy, how many outputs are identical to the baseline's."""
    out: dict = {}
    for label in dict.fromkeys(r["endpoint"] for r in rows):
        mine = [r for r in rows if r["endpoint"] == label and r["ok"]]
        entry = {"completed": len(mine), "failed": sum(r["endpoint"] == label and not r["ok"] for r in rows),
                 **_speed_summary(mine), "by_category": {}, "speculative": counters.get(label)}
        for category in sorted({r["category"] for r in mine}):
            entry["by_category"][category] = _speed_summary([r for r in mine if r["category"] == category])
        out[label] = entry
    if "baseline" in out and "endpoint" in out:
        pairs = _paired(rows)
        ratios = [(c, (b["wall_s"] / max(1, b["new_tokens"])) / (e["wall_s"] / max(1, e["new_tokens"]))) for c, b, e in pairs]
        out["endpoint"]["speedup_vs_baseline"] = _mean_ratio([x for _, x in ratios])
        for category, entry in out["endpoint"]["by_category"].items():
            entry["speedup_vs_baseline"] = _mean_ratio([x for c, x in ratios if c == category])
        if temperature == 0:
            out["endpoint"]["identical_to_baseline"] = f"{sum(b['text'] == e['text'] for _, b, e in pairs)}/{len(pairs)}"
    return out


def _mean_ratio(ratios: list[float]) -> float | None:
    """The local bench's geometric mean (metrics.geomean, one definition); null, not its 0.0, without a pair."""
    return geomean(ratios) if ratios else None


def _paired(rows: list[dict]) -> list[tuple[str, dict, dict]]:
    """(category, baseline row, endpoint row) for every prompt and repeat both servers completed."""
    ok = {(r["endpoint"], r["prompt_id"], r["repeat"]): r for r in rows if r["ok"]}
    return [(r["category"], ok[("baseline", p, k)], r) for (e, p, k), r in ok.items()
            if e == "endpoint" and ("baseline", p, k) in ok]


def _speed_summary(rows: list[dict]) -> dict:
    speeds = [r["tokens_per_s"] for r in rows if r["tokens_per_s"] is not None]
    ttfts = [r["ttft_s"] for r in rows if r["ttft_s"] is not None]
    wall = sum(r["wall_s"] for r in rows)
    return {"tokens_per_s": statistics.median(speeds) if speeds else None,
            "end_to_end_tokens_per_s": sum(r["new_tokens"] for r in rows) / wall if wall else None,
            "ttft_s": statistics.median(ttfts) if ttfts else None}


def remote_bench(settings: RemoteSettings, prompts: Path, out: Path, categories: str | None = None, limit: int = 0,
                 repeats: int = 1, temperature: float = 0.0) -> dict:
    """`bench --endpoint URL [--baseline-endpoint URL]`: the prompts of `prompts` on a server (and its
    baseline), its speculative counters differenced over the run, the report written to `out`; a partial
    report and exit 2 when a server fails mid-run."""
    from tqdm import tqdm

    cases = only_categories(load_prompts(prompts), categories, prompts)
    if limit:
        cases = cases[:limit]
    if repeats < 1:
        raise SpecDecError(f"repeats must be >= 1 (got {repeats})")
    ensure_writable(out)
    servers = settings.open()
    started = time.time()
    with tqdm(total=len(cases) * repeats * len(servers), desc="bench --endpoint", unit="run") as bar:
        rows, records = run_remote_bench(servers, cases, settings.max_tokens, temperature, settings.seed, repeats,
                                         progress=bar.update, extra=settings.extra)
    counters = {server.label: server_figures(server, records[server.label]) for server in servers}
    summary = summarise_remote(rows, records, counters, temperature)
    report = {"environment": {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
                              "httpx": httpx.__version__},
              "config": {"prompts": str(prompts), "categories": categories, "servers": {s.label: {"url": s.url, "model": s.model} for s in servers},
                         "max_tokens": settings.max_tokens, "temperature": temperature, "seed": settings.seed,
                         "repeats": repeats, "request_extra": settings.extra},
              "results": rows, "summary": summary,
              "requests": {label: [_request_json(r) for r in rs] for label, rs in records.items()}}
    out.write_text(json.dumps(report, ensure_ascii=False, indent=1))
    print(format_summary(summary))
    failed = [r for r in rows if not r["ok"]]
    if failed:
        raise SpecDecError(f"{len(failed)} of {len(rows)} prompt runs failed ({failed[0]['endpoint']}: {failed[0]['error']}); "
                           f"the partial report with {len(rows) - len(failed)} completed is in {out}")
    return report


def server_figures(server: Server, records: list[RemoteRequest]) -> dict:
    """A server's speculative figures over a bench run: its /metrics now, differenced against the run's
    start (gauges read as they are now), its server info (SGLang), its responses' timings."""
    info = fetch_server_info(server.client, server.url)
    try:
        after = fetch_metrics(server.client, server.url) if server.before is not None else None
        delta = counter_delta(server.before, after) if after is not None else None
        return speculative_figures(delta, records, after, info)
    except SpecDecError as err:  # e.g. the server died: its figures are lost, its completed requests are not
        return {**speculative_figures(None, records, None, info), "metrics_error": str(err)}


def _request_json(r: RemoteRequest) -> dict:
    d = asdict(r)
    start = r.arrival_s
    d["deliveries"] = [[round(t - start, 4), n] for t, n in r.deliveries]  # seconds from the request's arrival
    d["finish_s"] = round(r.finish_s - start, 4) if r.finish_s is not None else None
    d["arrival_s"] = 0.0
    return d


def figure_text(x: float | None, spec: str = ".2f") -> str:
    """A figure for the printed tables: '-' where the server gave none."""
    return "-" if x is None else format(x, spec)


def sglang_line(label: str, spec: dict) -> str | None:
    """SGLang's tau per drafting step, printed with what it is: the server's own average, not this run's."""
    if not spec.get("tau_per_drafting_step_basis"):
        return None
    return (f"  {label} speculative ({' + '.join(spec['source'])}): tau per drafting step "
            f"{figure_text(spec['tau_per_drafting_step'])}, {spec['tau_per_drafting_step_basis']}")


def format_summary(summary: dict) -> str:
    lines = [f"{'server':10s} {'category':12s} {'tok/s':>7s} {'e2e tok/s':>9s} {'TTFT s':>7s} {'speedup':>8s}"]
    for label, s in summary.items():
        lines.append(f"{label:10s} {'all':12s} {figure_text(s['tokens_per_s']):>7s} {figure_text(s['end_to_end_tokens_per_s']):>9s} "
                     f"{figure_text(s['ttft_s'], '.3f'):>7s} {figure_text(s.get('speedup_vs_baseline')):>8s}"
                     + (f"  identical to baseline {s['identical_to_baseline']}" if s.get("identical_to_baseline") else "")
                     + (f"  ({s['failed']} failed)" if s["failed"] else ""))
        for category, c in s["by_category"].items():
            lines.append(f"{'':10s} {category:12s} {figure_text(c['tokens_per_s']):>7s} {figure_text(c['end_to_end_tokens_per_s']):>9s} "
                         f"{figure_text(c['ttft_s'], '.3f'):>7s} {figure_text(c.get('speedup_vs_baseline')):>8s}")
        spec = s.get("speculative") or {}
        if spec.get("num_draft_tokens") is not None:
            per_pos = ", ".join(f"{x:.2f}" for x in (spec.get("acceptance_per_pos") or [])[:8])
            lines.append(f"  {label} speculative ({' + '.join(spec['source'])}): drafted {spec['num_draft_tokens']:g}, "
                         f"accepted {spec['num_accepted_tokens']:g}, alpha-bar {figure_text(spec['draft_acceptance_rate'])}, "
                         f"tau {figure_text(spec['mean_acceptance_length'])}, tau per drafting step {figure_text(spec['tau_per_drafting_step'])}"
                         + (f", s_i {per_pos}" if per_pos else ""))
        if sglang_line(label, spec):
            lines.append(sglang_line(label, spec))
        if spec.get("not_exposed"):
            lines.append(f"  {label} does not expose: {'; '.join(spec['not_exposed'])}")
    return "\n".join(lines)
