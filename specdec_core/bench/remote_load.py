"""`load-test --endpoint URL [--baseline-endpoint URL]`: the local load test against a server (and its
baseline), with the server's speculative counters per level (`remote_counters.py`)."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from ..errors import SpecDecError, ensure_writable
from ..suite import PromptCase
from .loadtest import LoadConfig, dumps, level_order, matched_summary, request_timing, speed_metrics, workload
from .remote import RemoteSettings, Server, figure_text, sglang_line
from .remote_client import RemoteRequest, make_client, stream_chat
from .remote_counters import (ServerInfo, Snapshot, counter_delta, counter_total, fetch_metrics, fetch_server_info,
                              speculative_figures)


# --- the load test against a server (and its baseline) ---------------------------------------------
#
# The local load test's workload, closed loop and metrics (bench/loadtest.py): the same request list per
# level (`level_order` over `workload`), C requests in flight (C threads, each with its own client,
# sending the list's next request when its previous one finishes), levels one after another and, within
# a level, the endpoint and its baseline back to back on the same list. Every speed figure is
# `speed_metrics` (its steady-state cut included); matched throughput is `matched_summary` with the
# baseline server in `ar`'s place. Per level, the server's /metrics is snapshotted before and after and
# differenced, and llama.cpp's per-response timings summed (`speculative_figures`).


def run_remote_level(server: Server, concurrency: int, order: list[PromptCase], max_tokens: int,
                     temperature: float = 0.0, seed: int = 0, extra: dict | None = None,
                     progress=None) -> list[RemoteRequest]:
    """One closed-loop level on one server: `order` sent in order, `concurrency` in flight. After the
    first failure no further request is sent (those in flight finish or fail); the unsent ones come back
    marked 'not run', so the list always has one record per request, in order."""
    records: list[RemoteRequest | None] = [None] * len(order)
    lock = threading.Lock()
    state = {"next": 0, "stop": False}

    def slot() -> None:
        with make_client() as client:
            while True:
                with lock:
                    if state["stop"] or state["next"] >= len(order):
                        return
                    index = state["next"]
                    state["next"] += 1
                case = order[index]
                record = stream_chat(client, server.url, [{"role": "user", "content": case.turns[0]}],
                                     model=server.model, max_tokens=max_tokens, temperature=temperature, seed=seed,
                                     id=index, label=case.id, extra=extra)
                records[index] = record
                if record.error:
                    with lock:
                        state["stop"] = True
                if progress:
                    progress(record)

    threads = [threading.Thread(target=slot, daemon=True, name=f"{server.label}-slot-{i}")
               for i in range(min(concurrency, len(order)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r if r is not None else RemoteRequest(i, order[i].id, server.url, error="not run")
            for i, r in enumerate(records)]


def remote_level_row(server: Server, concurrency: int, records: list[RemoteRequest], category_of: dict[str, str],
                     delta: Snapshot | None, metrics_error: str = "", after: Snapshot | None = None,
                     server_info: ServerInfo | None = None) -> dict:
    """One level of one server as a load-test row: the local row's keys where the server gives the figure
    (speed_metrics over the completed requests; num_drafts / num_draft_tokens / num_accepted_tokens and
    tau from its counters), its speculative figures in full (`after` and `server_info` for SGLang's
    averages), and what failed."""
    done = [r for r in records if r.ok]
    failed = [r for r in records if r.error and r.error != "not run"]
    row: dict = {"scheme": server.label, "url": server.url, "model": server.model, "concurrency": concurrency,
                 "arrival_rate": None, "completed": len(done), "failed": len(failed),
                 "not_run": sum(r.error == "not run" for r in records),
                 "error": next((r.error for r in records if r.error), "")}
    if done:
        row.update(speed_metrics(done, concurrency, category_of))
    spec = speculative_figures(delta, done, after, server_info)
    if metrics_error:
        spec["metrics_error"] = metrics_error
    drafted = spec.get("timings_draft_n")
    forwards = _decode_forwards(done)
    row.update({"num_drafts": spec["num_drafts"], "num_draft_tokens": spec["num_draft_tokens"],
                "num_accepted_tokens": spec["num_accepted_tokens"], "tau": spec["mean_acceptance_length"],
                # 1 + drafts verified per decode forward (the local row's figure), from llama.cpp's timings
                "mean_verify_tokens": 1 + (drafted or 0) / forwards if forwards else None,
                # llama.cpp's llama_decode calls over the level (`llamacpp:n_decode_total`): fewer than the
                # requests' own forwards + prefills when the server batched its slots together
                "server_decode_calls": counter_total(delta, "n_decode_total") if delta else None,
                "request_forwards": forwards + len(done) if forwards is not None else None,
                "speculative": spec})
    return row


def _decode_forwards(done: list[RemoteRequest]) -> int | None:
    """Target decode forwards of the requests from llama.cpp's timings (predicted_n - 1 - draft_n_accepted
    each, as in speculative_figures); None unless every request has them."""
    timed = [r.timings for r in done if r.timings and "predicted_n" in r.timings]
    if not done or len(timed) != len(done):
        return None
    return sum(t["predicted_n"] - 1 - t.get("draft_n_accepted", 0) for t in timed)


def _level_delta(server: Server, before: Snapshot | None) -> tuple[Snapshot | None, Snapshot | None, str]:
    """(after, delta, error) of a level: /metrics now, differenced against the level's start."""
    if before is None:
        return None, None, ""
    try:
        after = fetch_metrics(server.client, server.url)
        return after, (counter_delta(before, after) if after is not None else None), ""
    except SpecDecError as err:  # e.g. the server died: its figures are lost, its completed requests are not
        return None, None, str(err)


def run_remote_load_test(servers: list[Server], cases: list[PromptCase], concurrency: tuple[int, ...],
                         requests_per_level: int, max_tokens: int, temperature: float = 0.0, seed: int = 0,
                         extra: dict | None = None, progress=None) -> tuple[list[dict], dict[str, dict[int, list[RemoteRequest]]]]:
    """Every level on every server (module section comment): (rows, records[label][C]). A server that
    fails is not asked again; its later levels are rows of requests 'not run'. A server whose first
    requests all fail is a wrong server or setting: a one-line error, as in bench."""
    category_of = {c.id: c.category for c in cases}
    rows: list[dict] = []
    records: dict[str, dict[int, list[RemoteRequest]]] = {s.label: {} for s in servers}
    for c in concurrency:
        order = level_order(cases, c, requests_per_level)
        for server in servers:
            if server.failed:
                done = [RemoteRequest(i, case.id, server.url, error="not run") for i, case in enumerate(order)]
                rows.append(remote_level_row(server, c, done, category_of, None, "not run: the server failed earlier"))
                records[server.label][c] = done
                continue
            before = fetch_metrics_or_none(server) if server.before is not None else None  # None: no /metrics
            done = run_remote_level(server, c, order, max_tokens, temperature, seed, extra, progress)
            records[server.label][c] = done
            failure = next((r.error for r in done if r.error and r.error != "not run"), "")
            if failure and not any(r.ok for level in records[server.label].values() for r in level):
                raise SpecDecError(f"{server.url}: {failure}")
            server.failed = failure
            after, delta, metrics_error = _level_delta(server, before)
            rows.append(remote_level_row(server, c, done, category_of, delta, metrics_error, after,
                                         fetch_server_info(server.client, server.url)))
        if temperature == 0 and len(servers) == 2:
            _mark_identical(rows[-2:], records, c)
    return rows, records


def fetch_metrics_or_none(server: Server) -> Snapshot | None:
    """/metrics at a level's start; a server that no longer answers there fails in the level itself."""
    try:
        return fetch_metrics(server.client, server.url)
    except SpecDecError:
        return None


def _mark_identical(rows: list[dict], records: dict[str, dict[int, list[RemoteRequest]]], c: int) -> None:
    """Greedy: how many of the level's requests the endpoint answered exactly as the baseline (same list)."""
    endpoint, baseline = records["endpoint"][c], records["baseline"][c]
    pairs = [(e, b) for e, b in zip(endpoint, baseline) if e.ok and b.ok]
    for row in rows:
        if row["scheme"] == "endpoint":
            row["identical_to_baseline"] = f"{sum(e.text == b.text for e, b in pairs)}/{len(pairs)}"


def remote_load_test(settings: RemoteSettings, prompts: Path, out: Path, cfg: LoadConfig) -> dict:
    """`load-test --endpoint URL [--baseline-endpoint URL]`: the local load test's workload (`prompts`) and
    metrics against a server (and its baseline), the result written to `out`; a partial report and exit 2
    when a server fails mid-run. The closed loop only, greedy: `cfg`'s levels, requests and length."""
    from tqdm import tqdm

    cfg.validate()
    if cfg.requests_per_level < 1:
        raise SpecDecError(f"requests-per-level must be >= 1 (got {cfg.requests_per_level})")
    ensure_writable(out)
    cases = workload(prompts, seed=cfg.seed)
    servers = settings.open()
    first = {s.label: s.before for s in servers}
    started, wall = time.time(), time.perf_counter()
    total = sum(cfg.requests_per_level * c for c in cfg.concurrency) * len(servers)
    with tqdm(total=total, desc="load-test --endpoint", unit="req") as bar:
        rows, records = run_remote_load_test(servers, cases, cfg.concurrency, cfg.requests_per_level, cfg.max_new_tokens,
                                             0.0, cfg.seed, settings.extra, progress=lambda _: bar.update(1))
    result = remote_load_result(servers, rows, records, first, cfg, prompts, settings.extra)
    result["environment"].update({"date": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
                                  "wall_s": round(time.perf_counter() - wall, 1)})
    out.write_text(dumps(result))
    print(format_load_summary(result))
    requests = [r for levels in records.values() for level in levels.values() for r in level]
    failed = [r for r in requests if r.error]
    if failed:
        bad = next(r for r in failed if r.error != "not run")
        raise SpecDecError(f"{len(failed)} of {len(requests)} requests failed or were not run ({bad.endpoint}: {bad.error}); "
                           f"the partial report with {len(requests) - len(failed)} completed is in {out}")
    return result


def remote_load_result(servers: list[Server], rows: list[dict], records: dict[str, dict[int, list[RemoteRequest]]],
                       first: dict[str, Snapshot | None], cfg: LoadConfig, prompts: Path, extra: dict) -> dict:
    """The results dict, shaped like run_load_test's (`runs`, `matched_throughput`, `requests`), see
    format notes in `config.differs_from_local`."""
    overall = {}
    for server in servers:  # the whole run: the first snapshot to the last, every level's responses
        done = [r for level in records[server.label].values() for r in level if r.ok]
        after, delta, error = _level_delta(server, first[server.label])
        info = fetch_server_info(server.client, server.url)
        overall[server.label] = {**speculative_figures(delta, done, after, info), **({"metrics_error": error} if error else {})}
    whole = [r for r in rows if "per_user_tok_s" in r and not r["failed"] and not r["not_run"]]
    matched = matched_summary(whole, "endpoint", "baseline") if len(servers) == 2 else None
    timings, failures = {}, {}
    for label, levels in records.items():
        for c, level in levels.items():
            ok = [r for r in level if r.ok]
            start = min((r.arrival_s for r in ok), default=0.0)
            timings[f"{label}@{c}"] = [request_timing(r, start) for r in ok]
            if len(ok) < len(level):
                failures[f"{label}@{c}"] = [[r.id, r.label, r.error] for r in level if not r.ok]
    return {
        "environment": {"httpx": httpx.__version__, "remote": True},
        "config": {"remote": True, "servers": {s.label: {"url": s.url, "model": s.model} for s in servers},
                   "concurrency": list(cfg.concurrency), "requests_per_level": cfg.requests_per_level,
                   "max_new_tokens": cfg.max_new_tokens, "temperature": 0.0, "seed": cfg.seed, "arrival_rate": None,
                   "prompts": str(prompts), "schemes": [s.label for s in servers], "request_extra": extra,
                   "differs_from_local": "schemes are 'endpoint' and 'baseline' (the baseline server plays ar in "
                                         "matched throughput); no cost table, draft records or scheduler figures; "
                                         "identical_to_baseline instead of identical_to_ar; tau and the counters "
                                         "cover every request of a level, not only the steady ones; acceptance "
                                         "per position is the server's s_i (per drafting step) under speculative"},
        "runs": rows,
        "speculative": overall,
        "matched_throughput": matched,
        "matched_throughput_all": [matched] if matched else [],
        "requests": {"levels": timings, "failed": failures,
                     "format": "per run (server@concurrency), per completed request in arrival order: [prompt id, "
                               "arrival, first token, last token, tokens], seconds from the run's first arrival; "
                               "failed: [request index, prompt id, error]"},
    }


def format_load_summary(result: dict) -> str:
    lines = ["server       C  per-user tok/s  aggregate tok/s  TTFT s  p95 ITL s  drafted  accepted  tau   identical  failed"]
    for r in result["runs"]:
        lines.append(f"{r['scheme']:10s} {r['concurrency']:3d}  {figure_text(r.get('per_user_tok_s')):>14s}  "
                     f"{figure_text(r.get('aggregate_tok_s')):>15s}  {figure_text(r.get('ttft_s')):>6s}  {figure_text(r.get('p95_itl_s'), '.3f'):>9s}  "
                     f"{figure_text(r['num_draft_tokens'], 'g'):>7s}  {figure_text(r['num_accepted_tokens'], 'g'):>8s}  {figure_text(r['tau']):>4s}  "
                     f"{r.get('identical_to_baseline', '-'):>9s}  {r['failed'] + r['not_run']}"
                     + (f"  (server decode calls {r['server_decode_calls']:g} for {r['request_forwards']} request forwards)"
                        if r.get("server_decode_calls") is not None and r.get("request_forwards") else ""))
    m = result.get("matched_throughput")
    if m:
        ratio = lambda x: "%.2fx" % x if x else "null"  # noqa: E731
        by_category = ", ".join(f"{c} {ratio(x)}" for c, x in m["per_user_speedup_by_category"].items())
        lines.append(f"matched throughput: endpoint per-user speed {ratio(m['per_user_speedup'])} over baseline "
                     f"({len(m['levels'])} levels; mean {ratio(m['per_user_mean_speedup'])}; {by_category})")
    for label, spec in result.get("speculative", {}).items():
        if sglang_line(label, spec):
            lines.append(sglang_line(label, spec))
        if spec.get("not_exposed"):
            lines.append(f"  {label} does not expose: {'; '.join(spec['not_exposed'])}")
    return "\n".join(lines)
