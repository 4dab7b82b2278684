"""The lab's methodology pointed at any OpenAI-compatible server: `bench --endpoint URL [--baseline-endpoint URL]`
and `load-test --endpoint URL [--baseline-endpoint URL]` (the local load test's workload, closed loop and
metrics; see the section comment above `run_remote_level`).

A request is streamed (`stream: true`) and the wall time at which each content chunk arrives is recorded,
so TTFT, inter-token gaps and per-user tokens/s come from the client's clock, as a user sees them. The
figures are computed by the load test's own `request_speed` / `speed_metrics` (`bench/loadtest.py`): a
remote request carries the same `id, label, arrival_s, finish_s, deliveries [(time, tokens)]` as a
served one, so there is one definition of every speed figure, not a copy.

The client is `httpx`, not the official `openai` package: the timing needs the raw SSE chunks as they
arrive (the `openai` client parses and buffers them into typed objects and drops fields it does not
know), and the servers' speculative figures live in such fields (llama.cpp's per-response `timings`
with `draft_n` / `draft_n_accepted`). httpx is already in the environment (streamlit depends on it),
so this adds no dependency. `trust_env=False`: requests go only to the URL given, never through a
proxy named by the environment; redirects are not followed for the same reason.

Speculative counters come from the servers themselves and are converted into the lab's vocabulary
(`metrics.py`): `/metrics` (Prometheus text, parsed with `prometheus_client`'s parser) snapshotted before
and after a run and differenced, where the server exposes vLLM's spec-decode counters (vLLM as
`vllm:spec_decode_*`, llama.cpp's `llama-server --metrics` under the same names as `llamacpp:spec_decode_*`),
llama.cpp's per-response `timings.draft_n` / `draft_n_accepted`, and vLLM's per-request
`metrics.speculative_decoding` (with `--per-request-spec-decode-metrics`: verify steps, drafted and
accepted tokens, the histogram of accepted drafts per step), each summed over the run's requests.
SGLang has no such counters: its accept length (tokens per verify step, the bonus token included) is
read as the server's own averages, the `sglang:spec_accept_length` gauge on the /metrics page after the
run (a window: gauges are not differenced) and `internal_states[].avg_spec_accept_length` of its
`GET /server_info` (`/get_server_info` in older versions; a running average since the server started),
and reported as tau per drafting step with a note that it is not this run's difference (the section
comment above `ServerInfo`). Every figure a server does not expose is listed as such, never guessed;
SGLang's own figures only for a server that looks like SGLang.

Token counts: one content chunk is counted as one token (llama.cpp and vLLM stream one token per chunk);
when the final `usage.completion_tokens` says more (a held-back partial UTF-8 character, a stop token),
the difference is credited to the last delivery, so the total is the server's own count.
"""
from __future__ import annotations

import json
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Iterator
from urllib.parse import urlsplit

import httpx

from ..errors import SpecDecError, ensure_writable
from ..metrics import conditional_acceptance, geomean, pooled_per_position
from ..suite import PromptCase, load_prompts, only_categories
from .loadtest import (LoadConfig, dumps, level_order, matched_summary, request_speed, request_timing,
                       speed_metrics, workload)

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
MODELS_PATH = "/v1/models"
METRICS_PATH = "/metrics"
TIMEOUT = httpx.Timeout(connect=5.0, read=300.0, write=30.0, pool=5.0)  # a slow CPU server may think long
# vLLM's spec-decode counters (llama-server --metrics exposes the same names under `llamacpp:`).
SPEC_COUNTERS = {"num_drafts": "spec_decode_num_drafts_total", "num_draft_tokens": "spec_decode_num_draft_tokens_total",
                 "num_accepted_tokens": "spec_decode_num_accepted_tokens_total"}
SPEC_PER_POS = "spec_decode_num_accepted_tokens_per_pos_total"
NO_DRAFTING_STEPS = "drafting steps (tau per drafting step)"

Snapshot = dict[str, dict[tuple[tuple[str, str], ...], float]]  # sample name -> labels -> value


# --- one streamed request ------------------------------------------------------------------------


@dataclass
class RemoteRequest:
    """One streamed request as the client saw it; the same timing fields as a served `Request`."""

    id: int
    label: str  # the prompt's id
    endpoint: str
    arrival_s: float = 0.0  # perf_counter when the request was sent
    deliveries: list[tuple[float, int]] = field(default_factory=list)  # (arrival of a content chunk, tokens)
    finish_s: float | None = None
    text: str = ""
    completion_tokens: int = 0  # usage.completion_tokens if given, else content chunks
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    timings: dict | None = None  # llama.cpp's per-response timings (draft_n, draft_n_accepted, predicted_n ...)
    spec_decoding: dict | None = None  # vLLM's per-request metrics.speculative_decoding (--per-request-spec-decode-metrics)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.finish_s is not None and bool(self.deliveries)

    @property
    def first_token_s(self) -> float | None:
        return self.deliveries[0][0] if self.deliveries else None


def normalize_endpoint(url: str) -> str:
    """`http://host:port[/v1][/]` -> `http://host:port`; anything else is a one-line error."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecDecError(f"endpoint {url!r} is not an http(s) URL such as http://127.0.0.1:8080")
    path = parts.path.rstrip("/")
    path = path[:-3] if path.endswith("/v1") else path
    return f"{parts.scheme}://{parts.netloc}{path}"


def make_client() -> httpx.Client:
    # trust_env=False: no proxy from the environment; follow_redirects=False: only the URL given is contacted.
    return httpx.Client(timeout=TIMEOUT, trust_env=False, follow_redirects=False)


def _unreachable(endpoint: str, err: Exception) -> SpecDecError:
    reason = str(err).splitlines()[0] if str(err) else type(err).__name__
    return SpecDecError(f"cannot reach {endpoint}: {reason}")


def served_models(client: httpx.Client, endpoint: str) -> list[str]:
    """GET /v1/models: the model ids the server serves. Unreachable, or not an OpenAI-compatible answer:
    a one-line error, before any timed request."""
    try:
        response = client.get(endpoint + MODELS_PATH)
    except httpx.HTTPError as err:
        raise _unreachable(endpoint, err)
    body = _json_or_none(response.text)
    if response.status_code != 200 or not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise SpecDecError(f"{endpoint} is not an OpenAI-compatible server: GET {MODELS_PATH} answered "
                           f"{response.status_code} {_describe(response)}")
    return [str(m.get("id")) for m in body["data"] if isinstance(m, dict) and m.get("id")]


def _json_or_none(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


def _describe(response: httpx.Response) -> str:
    """A few words on what came back instead of what we expected (for one-line errors)."""
    kind = response.headers.get("content-type", "no content type").split(";")[0]
    body = _json_or_none(response.text) if "json" in kind else None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return f"with error {str(body['error'].get('message', ''))[:160]!r}"
    if isinstance(body, dict):
        return f"JSON without the expected fields (keys: {', '.join(sorted(body)[:6])})"
    return f"{kind} ({len(response.content)} bytes)"


# llama.cpp's per-request switch off its prompt cache (`--no-prompt-cache`): llama-server otherwise reuses
# the KV of the slot's previous prompt (and its host-memory cache, --cache-ram), so a repeated prompt's
# TTFT would time one token of prefill. Measured here with this repository's llama-server build: a repeated
# prompt reports timings.prompt_n 1 (cache_n 48) by default and prompt_n 49 every time with the field false.
# It is not part of the OpenAI API: this lab's fake server and llama-server take an unknown field silently;
# what vLLM, SGLang or another server does with it (ignore it or answer 400) is not checked.
NO_PROMPT_CACHE = {"cache_prompt": False}


def chat_payload(messages: list[dict], model: str, max_tokens: int, temperature: float, seed: int,
                 extra: dict | None = None) -> dict:
    """The request body; `extra` adds server-specific fields (e.g. NO_PROMPT_CACHE)."""
    return {"model": model, "messages": messages, "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": max_tokens, "temperature": temperature, "seed": seed, **(extra or {})}


def stream_chat(client: httpx.Client, endpoint: str, messages: list[dict], *, model: str, max_tokens: int,
                temperature: float = 0.0, seed: int = 0, id: int = 0, label: str = "",
                extra: dict | None = None) -> RemoteRequest:
    """One streamed /v1/chat/completions request. A failure after the request was sent (refused, cut
    mid-stream, an error status) is recorded in `.error`, not raised: a run keeps what completed."""
    return _stream(client, endpoint, CHAT_PATH, chat_payload(messages, model, max_tokens, temperature, seed, extra),
                   RemoteRequest(id, label, endpoint))


def stream_completion(client: httpx.Client, endpoint: str, prompt: str, *, model: str, max_tokens: int,
                      temperature: float = 0.0, seed: int = 0, id: int = 0, label: str = "",
                      extra: dict | None = None) -> RemoteRequest:
    """The same over /v1/completions (a raw prompt: no chat template applied by the server)."""
    payload = {"model": model, "prompt": prompt, "stream": True, "stream_options": {"include_usage": True},
               "max_tokens": max_tokens, "temperature": temperature, "seed": seed, **(extra or {})}
    return _stream(client, endpoint, COMPLETIONS_PATH, payload, RemoteRequest(id, label, endpoint))


def _stream(client: httpx.Client, endpoint: str, path: str, payload: dict, record: RemoteRequest) -> RemoteRequest:
    record.arrival_s = time.perf_counter()
    done = False
    try:
        with client.stream("POST", endpoint + path, json=payload) as response:
            kind = response.headers.get("content-type", "")
            if response.status_code != 200 or not kind.startswith("text/event-stream"):
                response.read()
                record.error = f"POST {path} answered {response.status_code} {_describe(response)}"
                return record
            for arrived, chunk in sse_events(response):
                if chunk is None:  # data: [DONE]
                    done = True
                    break
                _take_chunk(record, arrived, chunk)
    except httpx.HTTPError as err:
        record.error = f"the stream broke: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
        return record
    except SpecDecError as err:
        record.error = str(err)
        return record
    record.finish_s = time.perf_counter()
    if not done and record.finish_reason is None:
        record.error = "the stream ended before the server finished the response (no finish_reason, no [DONE])"
    elif not record.deliveries:
        record.error = "the server finished without any content"
    _settle_token_count(record)
    return record


def sse_events(response: httpx.Response) -> Iterator[tuple[float, dict | None]]:
    """(arrival time, parsed `data:` JSON) per server-sent event; None for `data: [DONE]`. The time is
    taken when the line is read, before parsing, so JSON decoding is not counted as the server's."""
    for line in response.iter_lines():
        arrived = time.perf_counter()
        if not line.startswith("data:"):
            continue  # comments, `event:` lines, keep-alives
        data = line[5:].strip()
        if data == "[DONE]":
            yield arrived, None
            return
        chunk = _json_or_none(data)
        if not isinstance(chunk, dict):
            raise SpecDecError(f"the stream holds a non-JSON event: {data[:80]!r}")
        if "error" in chunk and "choices" not in chunk:
            message = chunk["error"].get("message", chunk["error"]) if isinstance(chunk["error"], dict) else chunk["error"]
            raise SpecDecError(f"the server reported an error mid-stream: {str(message)[:160]}")
        yield arrived, chunk


def _take_chunk(record: RemoteRequest, arrived: float, chunk: dict) -> None:
    """One chunk into the record: content (a delivery), finish reason, usage, llama.cpp's timings, vLLM's
    per-request speculative metrics."""
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        raise SpecDecError(f"not an OpenAI stream: a chunk without 'choices' (keys: {', '.join(sorted(chunk)[:6])})")
    for choice in choices:
        delta = choice.get("delta") or {}
        text = delta.get("content") if "delta" in choice else choice.get("text")
        if text:
            record.text += text
            record.deliveries.append((arrived, 1))
        if choice.get("finish_reason"):
            record.finish_reason = choice["finish_reason"]
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        record.completion_tokens = int(usage.get("completion_tokens") or 0)
        record.prompt_tokens = usage.get("prompt_tokens")
    if isinstance(chunk.get("timings"), dict):
        record.timings = chunk["timings"]
    metrics = chunk.get("metrics")  # vLLM: rides the final usage chunk when the server reports it
    if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
        record.spec_decoding = metrics["speculative_decoding"]


def _settle_token_count(record: RemoteRequest) -> None:
    """Credit tokens the usage counts beyond the content chunks to the last delivery (module docstring)."""
    chunks = sum(n for _, n in record.deliveries)
    if record.completion_tokens > chunks and record.deliveries:
        t, n = record.deliveries[-1]
        record.deliveries[-1] = (t, n + record.completion_tokens - chunks)
    record.completion_tokens = max(record.completion_tokens, chunks)


def request_figures(record: RemoteRequest) -> dict:
    """TTFT, inter-token gaps and per-user tokens/s of one completed request: loadtest.request_speed."""
    speed, ttft, gaps = request_speed(record)
    return {"tokens_per_s": speed, "ttft_s": ttft, "itl_s": gaps, "wall_s": record.finish_s - record.arrival_s}


# --- server counters -----------------------------------------------------------------------------


def parse_metrics(text: str) -> Snapshot:
    """Prometheus text -> {sample name: {labels: value}} with prometheus_client's own parser; a page
    it cannot read is a one-line error."""
    from prometheus_client.parser import text_string_to_metric_families

    out: Snapshot = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = float(sample.value)
    except (ValueError, TypeError, IndexError) as err:
        raise SpecDecError(f"the /metrics page is not Prometheus text: {str(err).splitlines()[0][:120]}")
    return out


def fetch_metrics(client: httpx.Client, endpoint: str) -> Snapshot | None:
    """The server's /metrics now, or None when it has none (404: llama-server without --metrics)."""
    try:
        response = client.get(endpoint + METRICS_PATH)
    except httpx.HTTPError as err:
        raise _unreachable(endpoint, err)
    if response.status_code in (404, 501) or (response.status_code != 200 and "metrics" in response.text.lower()):
        return None
    if response.status_code != 200:
        raise SpecDecError(f"GET {endpoint}{METRICS_PATH} answered {response.status_code} {_describe(response)}")
    return parse_metrics(response.text)


def counter_delta(before: Snapshot, after: Snapshot) -> Snapshot:
    """after - before for every `_total` counter sample; a counter that went down means the server
    restarted in between, and the difference would be meaningless: a one-line error."""
    out: Snapshot = {}
    for name, series in after.items():
        if not name.endswith("_total"):
            continue  # gauges and `_created` timestamps are not differenced
        for labels, value in series.items():
            old = before.get(name, {}).get(labels, 0.0)
            if value < old:
                raise SpecDecError(f"counter {name} went down ({old:g} -> {value:g}): the server restarted during the run")
            out.setdefault(name, {})[labels] = value - old
    return out


def _counter(delta: Snapshot, suffix: str) -> float | None:
    """A counter's total over its labels, whatever the engine prefix (`vllm:`, `llamacpp:`)."""
    names = [n for n in delta if n.split(":")[-1] == suffix]
    return sum(sum(delta[n].values()) for n in names) if names else None


def _per_position(delta: Snapshot) -> list[float] | None:
    names = [n for n in delta if n.split(":")[-1] == SPEC_PER_POS]
    if not names:
        return None
    counts: dict[int, float] = {}
    for name in names:
        for labels, value in delta[name].items():
            position = int(dict(labels).get("position", 0))
            counts[position] = counts.get(position, 0.0) + value
    return [counts.get(i, 0.0) for i in range(max(counts) + 1)] if counts else None


@dataclass
class Figures:
    """One part of a server's speculative figures: the values, where they came from, what was missing.
    `speculative_figures` joins the parts in a fixed order, so its report reads the same whatever the engine."""

    values: dict = field(default_factory=dict)
    source: list[str] = field(default_factory=list)
    not_exposed: list[str] = field(default_factory=list)


def speculative_figures(delta: Snapshot | None, requests: list[RemoteRequest], after: Snapshot | None = None,
                        server_info: ServerInfo | None = None) -> dict:
    """The server's speculative counters in the lab's vocabulary (metrics.py):
    - alpha-bar = accepted / drafted tokens (draft_acceptance_rate);
    - tau = decode tokens / target decode forwards (mean_acceptance_length, prefill excluded): from
      llama.cpp's timings, where each request's predicted_n - 1 decode tokens took predicted_n - 1 -
      draft_n_accepted forwards; vLLM's "mean acceptance length" 1 + accepted / drafts counts drafting
      steps only (equal to tau when every step drafts) and is given beside it as tau_per_drafting_step;
    - acceptance per position s_i = accepted at position i / drafts (vLLM's per-position counter; a draft
      shorter than i counts as not accepted there), and a_i = s_i / s_(i-1) (metrics.conditional_acceptance);
    - SGLang's accept length (tokens per verify step, the bonus token included) as tau_per_drafting_step,
      from `after` (the /metrics snapshot at the run's end: a gauge, not differenced) and `server_info`,
      with `tau_per_drafting_step_basis` saying it is the server's own average, not this run's difference.
    `not_exposed` names every figure this server did not give; SGLang's only when the server is SGLang."""
    done = [r for r in requests if r.ok]
    metrics, timings, reported = _counter_figures(delta), _timings_figures(done), _response_metrics_figures(done)
    counted = {**metrics.values, **timings.values, **reported.values}
    rates = _rates(counted)
    tau = _tau_figures(done)
    per_pos = _per_position(delta) if delta is not None else None
    if per_pos is None and "response_acceptance_histogram" in counted:  # vLLM's per-request histograms instead
        survival = _survival_figures(positions_from_histogram(counted["response_acceptance_histogram"]),
                                     counted["response_num_spec_steps"])
    else:
        survival = _survival_figures(per_pos, rates["num_drafts"])
    parts = [metrics, timings, reported, tau, survival]
    out: dict = {"source": [s for p in parts for s in p.source], "not_exposed": [n for p in parts for n in p.not_exposed],
                 **counted, **rates, **tau.values, **survival.values}
    if rates["num_draft_tokens"] is None:
        out["not_exposed"].append("drafted / accepted tokens (alpha-bar): no speculative counters at all")
    if rates["num_drafts"] is None:
        out["not_exposed"].append(NO_DRAFTING_STEPS)
    if looks_like_sglang(after, server_info):
        _merge_sglang(out, _sglang_figures(after, server_info))
    return out


def _counter_figures(delta: Snapshot | None) -> Figures:
    """vLLM's spec-decode counters (llama.cpp's under `llamacpp:`) in a /metrics difference, as `metrics_*`."""
    part = Figures()
    if delta is None:
        part.not_exposed.append("/metrics (no Prometheus page: for llama-server, start it with --metrics)")
        return part
    counters = {key: _counter(delta, name) for key, name in SPEC_COUNTERS.items()}
    if any(v is not None for v in counters.values()):
        part.source.append("/metrics")
        part.values.update({f"metrics_{k}": v for k, v in counters.items()})
    part.not_exposed += [f"/metrics {SPEC_COUNTERS[k]}" for k, v in counters.items() if v is None]
    return part


def _timings_figures(done: list[RemoteRequest]) -> Figures:
    """llama.cpp's per-response timings.draft_n / draft_n_accepted, summed over the completed requests."""
    part = Figures()
    timed = [r.timings for r in done if r.timings and "draft_n" in r.timings]
    if timed:
        part.source.append("timings")
        part.values["timings_draft_n"] = sum(t["draft_n"] for t in timed)
        part.values["timings_draft_n_accepted"] = sum(t.get("draft_n_accepted", 0) for t in timed)
    elif any(r.timings and "predicted_n" in r.timings for r in done):
        part.not_exposed.append("per-response timings.draft_n / draft_n_accepted (llama.cpp omits them when speculation is off)")
    else:
        part.not_exposed.append("per-response timings.draft_n / draft_n_accepted")
    return part


def _response_metrics_figures(done: list[RemoteRequest]) -> Figures:
    """vLLM's per-request metrics.speculative_decoding (`--per-request-spec-decode-metrics summary`; its
    documentation, docs/features/speculative_decoding/acceptance_metrics.md, calls it experimental), summed
    over the completed requests: verify steps, drafted and accepted tokens — the per-request counterparts
    of its /metrics counters, which its documentation says they reconcile with — and the histogram of
    accepted drafts per step. Silent where no response carries it: only vLLM with that flag does."""
    reports = [r.spec_decoding for r in done if r.spec_decoding]
    if not reports:
        return Figures()
    histogram: list[int] = []
    for report in reports:
        for j, steps in enumerate(report.get("acceptance_histogram") or []):
            histogram += [0] * (j + 1 - len(histogram))
            histogram[j] += int(steps)
    values = {f"response_{key}": sum(int(r.get(key) or 0) for r in reports)
              for key in ("num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens")}
    return Figures({**values, "response_acceptance_histogram": histogram}, ["response metrics.speculative_decoding"])


def positions_from_histogram(histogram: list[int]) -> list[int]:
    """Steps that accepted exactly j drafts (j = 0..k) -> accepted drafts at position i = 1..k: a step
    accepts its i-th draft when it accepts at least i."""
    return [sum(histogram[i:]) for i in range(1, len(histogram))]


def _rates(counted: dict) -> dict:
    """Drafted and accepted tokens (the /metrics counters where the server has them, else the timings'
    or vLLM's per-request sums), alpha-bar, drafting steps and tau per drafting step = 1 + accepted /
    drafting steps."""
    drafted = _first_known(counted.get("metrics_num_draft_tokens"), counted.get("timings_draft_n"),
                           counted.get("response_num_draft_tokens"))
    accepted = _first_known(counted.get("metrics_num_accepted_tokens"), counted.get("timings_draft_n_accepted"),
                            counted.get("response_num_accepted_draft_tokens"))
    drafts = _first_known(counted.get("metrics_num_drafts"), counted.get("response_num_spec_steps"))
    return {"num_draft_tokens": drafted, "num_accepted_tokens": accepted,
            "draft_acceptance_rate": accepted / drafted if drafted else None, "num_drafts": drafts,
            "tau_per_drafting_step": 1 + accepted / drafts if drafts and accepted is not None else None}


def _first_known(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def _tau_figures(done: list[RemoteRequest]) -> Figures:
    """tau over the requests' decode forwards, from llama.cpp's timings (every request must have them)."""
    predicted = [r.timings for r in done if r.timings and "predicted_n" in r.timings]
    if not done or len(predicted) != len(done):
        return Figures({"mean_acceptance_length": None},
                       not_exposed=["tau (decode forwards per request: llama.cpp's timings.predicted_n with draft_n_accepted)"])
    # a response without draft_n drafted nothing: its forwards = its tokens
    tokens = sum(t["predicted_n"] - 1 for t in predicted)
    forwards = tokens - sum(t.get("draft_n_accepted", 0) for t in predicted)
    return Figures({"mean_acceptance_length": tokens / forwards if forwards > 0 else None})


def _survival_figures(per_pos: list[float] | None, drafts: float | None) -> Figures:
    """s_i from the per-position counter and the drafting steps, and a_i = s_i / s_(i-1)."""
    if drafts == 0:  # nothing drafted: nothing to say
        return Figures({"acceptance_per_pos": None, "conditional_acceptance_per_pos": None})
    if per_pos is None or not drafts:
        return Figures({"acceptance_per_pos": None, "conditional_acceptance_per_pos": None},
                       not_exposed=[f"/metrics {SPEC_PER_POS} (acceptance per position)"])
    survival = pooled_per_position([[int(drafts)] * len(per_pos)], [[int(c) for c in per_pos]])
    # s_i cannot rise with i: past its first zero every position is zero (llama.cpp lists all up to its max).
    zero = next((i for i, x in enumerate(survival) if not x), None)
    survival = survival if zero is None else survival[:zero + 1]
    return Figures({"acceptance_per_pos": survival, "conditional_acceptance_per_pos": conditional_acceptance(survival)})


# --- SGLang ------------------------------------------------------------------------------------------
#
# SGLang (read in sgl-project/sglang: python/sglang/srt/metrics/collector.py, managers/scheduler_metrics_mixin.py,
# entrypoints/http_server.py) has no spec-decode counters. It gives its accept length twice, both averages
# the server keeps itself:
# - /metrics (`--enable-metrics`): the gauges sglang:spec_accept_length and sglang:spec_accept_rate, set
#   each time the scheduler logs a decode batch (every --decode-log-interval batches, 40 by default) from
#   the verify steps since the previous log: a window, reset at every log. A gauge cannot be differenced,
#   so the value is read from the snapshot after the run; it covers the run's last window only (or an
#   earlier one, if the server logged no decode batch since).
# - GET /server_info (/get_server_info in older versions, a deprecated alias in newer ones):
#   internal_states[i].avg_spec_accept_length per data-parallel rank, accepted tokens over verify steps
#   since the server started: a running average that includes every request before the run.
# Both count, per request and verify step, the accepted drafts plus the token the target adds itself
# (the bonus token): 1 when nothing was accepted.
# sglang:spec_accept_rate is kept as SGLang reports it and is not alpha-bar: its numerator includes the
# bonus tokens and its denominator is the verify width (speculative_num_draft_tokens, else num_steps + 1)
# per step, and its wording has differed between SGLang versions.

SGLANG_ACCEPT_LENGTH = "sglang:spec_accept_length"
SGLANG_ACCEPT_RATE = "sglang:spec_accept_rate"
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")  # newer SGLang first; the older name second


@dataclass
class ServerInfo:
    """The server-info JSON (SGLang's `GET /server_info`) as it came back: any shape, checked when read."""

    path: str  # the path that answered 200
    body: object  # the parsed JSON; None when the answer was not JSON
    text: str  # the answer's start, to say what came back instead


def fetch_server_info(client: httpx.Client, endpoint: str) -> ServerInfo | None:
    """SGLang's server-info JSON, or None where the server has none (any other answer than 200 on each
    path: vLLM's and llama.cpp's 404, an API key's 401) or no longer answers (/metrics' own error says so).
    Never an error: what the answer holds is checked in `sglang_accept_length_from_info`."""
    for path in SERVER_INFO_PATHS:
        try:
            response = client.get(endpoint + path)
        except httpx.HTTPError:
            return None
        if response.status_code == 200:
            return ServerInfo(path, _json_or_none(response.text), response.text[:80])
    return None


def looks_like_sglang(after: Snapshot | None, info: ServerInfo | None) -> bool:
    """Its /metrics names are `sglang:*`, or its server-info JSON has SGLang's internal_states."""
    return (any(name.startswith("sglang:") for name in after or {})
            or (info is not None and isinstance(info.body, dict) and "internal_states" in info.body))


def sglang_tau_per_drafting_step(accept_length: float) -> float | None:
    """SGLang's accept length -> the lab's tau per drafting step (1 + accepted / drafting steps).

    SGLang adds, per request and verify step, the accepted drafts plus one (the bonus token), and divides
    by the request-steps: the bonus token is already in, so the number carries over as it is, and a value
    below 1 is no accept length (0: the gauge of a server that does not speculate).

    Not the lab's tau (decode tokens / target decode forwards): SGLang's denominator counts verify steps
    only, so a decode step that drafted nothing (a server that leaves drafting off for some steps or
    requests) is missing from it, while tau counts every forward; the two agree when every step drafts."""
    return accept_length if accept_length >= 1 else None


def sglang_accept_length_from_info(info: ServerInfo) -> tuple[float | None, str]:
    """(avg_spec_accept_length, "") from SGLang's server-info JSON, or (None, why not). Several
    data-parallel ranks: their plain mean (each rank's own step count is not given)."""
    states = info.body.get("internal_states") if isinstance(info.body, dict) else None
    if not isinstance(states, list) or not states or not all(isinstance(s, dict) for s in states):
        what = "not JSON" if info.body is None else "JSON without a list internal_states"
        return None, f"{info.path} internal_states[].avg_spec_accept_length ({info.path} answered {what}: {info.text[:60]!r})"
    values = [s.get("avg_spec_accept_length") for s in states]
    if any(v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))) for v in values):
        return None, f"{info.path} internal_states[].avg_spec_accept_length (not a number: {values[:4]!r})"
    numbers = [float(v) for v in values if v is not None]
    if not numbers:
        return None, (f"{info.path} internal_states[].avg_spec_accept_length (not reported: speculative decoding "
                      f"is off, or no verify step yet)")
    return statistics.fmean(numbers), ""


def _gauge(snapshot: Snapshot | None, name: str) -> float | None:
    """A gauge's value in one snapshot: the mean over its label sets (one per rank that publishes it)."""
    series = (snapshot or {}).get(name)
    return statistics.fmean(series.values()) if series else None


def _sglang_figures(after: Snapshot | None, info: ServerInfo | None) -> Figures:
    """SGLang's accept length from its gauge (after the run) and its server info, in the lab's vocabulary."""
    gauge, by_gauge = _sglang_gauge_figures(after)
    average, by_info = _sglang_info_figures(info)
    tau = _sglang_tau(gauge, average, info.path if info is not None else "")
    return Figures({**by_gauge.values, **by_info.values, **tau.values}, by_gauge.source + by_info.source,
                   by_gauge.not_exposed + by_info.not_exposed + tau.not_exposed)


def _sglang_gauge_figures(after: Snapshot | None) -> tuple[float | None, Figures]:
    """sglang:spec_accept_length (and SGLang's own accept rate beside it) as the page showed them after the run."""
    gauge = _gauge(after, SGLANG_ACCEPT_LENGTH)
    if gauge is None:
        why = "no /metrics page: launch SGLang with --enable-metrics" if after is None else "not on the page"
        return None, Figures(not_exposed=[f"/metrics {SGLANG_ACCEPT_LENGTH} ({why})"])
    part = Figures({"sglang_spec_accept_length": gauge, "sglang_spec_accept_rate": _gauge(after, SGLANG_ACCEPT_RATE)},
                   [f"/metrics {SGLANG_ACCEPT_LENGTH}"])
    if sglang_tau_per_drafting_step(gauge) is None:
        part.not_exposed.append(f"/metrics {SGLANG_ACCEPT_LENGTH} is {gauge:g}: no verify step in the server's "
                                f"last decode-log window (speculative decoding off?)")
    return gauge, part


def _sglang_info_figures(info: ServerInfo | None) -> tuple[float | None, Figures]:
    """avg_spec_accept_length of the server info, or what kept it from being read."""
    if info is None:
        return None, Figures(not_exposed=["/server_info (nor /get_server_info) internal_states[].avg_spec_accept_length: "
                                          "no such endpoint"])
    average, problem = sglang_accept_length_from_info(info)
    if problem:
        return None, Figures(not_exposed=[problem])
    part = Figures({"sglang_avg_spec_accept_length": average}, [info.path])
    if sglang_tau_per_drafting_step(average) is None:
        part.not_exposed.append(f"{info.path} avg_spec_accept_length is {average:g}, below 1: not an accept length")
    return average, part


def _sglang_tau(gauge: float | None, average: float | None, info_path: str) -> Figures:
    """tau per drafting step from the server info's running average (all the server's verify steps, this
    run's among them) when it has one, else from the gauge's window (the run's last, or an earlier one);
    `tau_per_drafting_step_basis` says which, and that it is not this run's difference."""
    from_info = sglang_tau_per_drafting_step(average) if average is not None else None
    if from_info is not None:
        return Figures({"tau_per_drafting_step": from_info, "tau_per_drafting_step_basis":
                        f"SGLang's own running average since the server started ({info_path} avg_spec_accept_length), "
                        f"requests before this run included: not this run's difference"})
    from_gauge = sglang_tau_per_drafting_step(gauge) if gauge is not None else None
    if from_gauge is not None:
        return Figures({"tau_per_drafting_step": from_gauge, "tau_per_drafting_step_basis":
                        f"SGLang's own windowed average over its last decode-log interval before the run ended "
                        f"({SGLANG_ACCEPT_LENGTH}, a gauge read after the run): not this run's difference"})
    return Figures()


def _merge_sglang(out: dict, part: Figures) -> None:
    """SGLang's figures beside the others; tau per drafting step only where no counter gave it."""
    out["source"] += part.source
    values = dict(part.values)
    if out.get("tau_per_drafting_step") is not None:
        values.pop("tau_per_drafting_step", None)
        values.pop("tau_per_drafting_step_basis", None)
    elif "tau_per_drafting_step" in values:  # the steps are still not counted, but tau per step is given
        out["not_exposed"] = [n if n != NO_DRAFTING_STEPS else "drafting steps (a count: SGLang gives only its average)"
                              for n in out["not_exposed"]]
    out["not_exposed"] += part.not_exposed
    out.update(values)


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


def run_remote_bench_command(args) -> dict:
    """`bench --endpoint URL [--baseline-endpoint URL]`: the suite's prompts on a server (and its
    baseline), its speculative counters differenced over the run; a partial report and exit 2 when a
    server fails mid-run."""
    from tqdm import tqdm

    cases = only_categories(load_prompts(args.prompts), args.categories, args.prompts)
    if args.limit:
        cases = cases[: args.limit]
    if args.repeats < 1:
        raise SpecDecError(f"repeats must be >= 1 (got {args.repeats})")
    if len(args.temperature) != 1:
        raise SpecDecError("--endpoint runs one temperature (the server decides the rest of its sampling)")
    ensure_writable(args.out)
    model = None if args.model == "smollm2-135m" else args.model  # the local default is no server's name
    servers = [open_server("endpoint", args.endpoint, model)]
    if args.baseline_endpoint:
        servers.append(open_server("baseline", args.baseline_endpoint, model))
    temperature = args.temperature[0]
    started = time.time()
    with tqdm(total=len(cases) * args.repeats * len(servers), desc="bench --endpoint", unit="run") as bar:
        rows, records = run_remote_bench(servers, cases, args.max_new_tokens, temperature, args.seed, args.repeats,
                                         progress=bar.update, extra=request_extra(args))
    counters = {server.label: server_figures(server, records[server.label]) for server in servers}
    summary = summarise_remote(rows, records, counters, temperature)
    report = {"environment": {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
                              "httpx": httpx.__version__},
              "config": {"prompts": str(args.prompts), "categories": args.categories, "servers": {s.label: {"url": s.url, "model": s.model} for s in servers},
                         "max_tokens": args.max_new_tokens, "temperature": temperature, "seed": args.seed,
                         "repeats": args.repeats, "request_extra": request_extra(args)},
              "results": rows, "summary": summary,
              "requests": {label: [_request_json(r) for r in rs] for label, rs in records.items()}}
    args.out.write_text(json.dumps(report, ensure_ascii=False, indent=1))
    print(format_summary(summary))
    failed = [r for r in rows if not r["ok"]]
    if failed:
        raise SpecDecError(f"{len(failed)} of {len(rows)} prompt runs failed ({failed[0]['endpoint']}: {failed[0]['error']}); "
                           f"the partial report with {len(rows) - len(failed)} completed is in {args.out}")
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


def _num(x: float | None, spec: str = ".2f") -> str:
    """A figure for the printed tables: '-' where the server gave none."""
    return "-" if x is None else format(x, spec)


def _sglang_line(label: str, spec: dict) -> str | None:
    """SGLang's tau per drafting step, printed with what it is: the server's own average, not this run's."""
    if not spec.get("tau_per_drafting_step_basis"):
        return None
    return (f"  {label} speculative ({' + '.join(spec['source'])}): tau per drafting step "
            f"{_num(spec['tau_per_drafting_step'])}, {spec['tau_per_drafting_step_basis']}")


def format_summary(summary: dict) -> str:
    lines = [f"{'server':10s} {'category':12s} {'tok/s':>7s} {'e2e tok/s':>9s} {'TTFT s':>7s} {'speedup':>8s}"]
    for label, s in summary.items():
        lines.append(f"{label:10s} {'all':12s} {_num(s['tokens_per_s']):>7s} {_num(s['end_to_end_tokens_per_s']):>9s} "
                     f"{_num(s['ttft_s'], '.3f'):>7s} {_num(s.get('speedup_vs_baseline')):>8s}"
                     + (f"  identical to baseline {s['identical_to_baseline']}" if s.get("identical_to_baseline") else "")
                     + (f"  ({s['failed']} failed)" if s["failed"] else ""))
        for category, c in s["by_category"].items():
            lines.append(f"{'':10s} {category:12s} {_num(c['tokens_per_s']):>7s} {_num(c['end_to_end_tokens_per_s']):>9s} "
                         f"{_num(c['ttft_s'], '.3f'):>7s} {_num(c.get('speedup_vs_baseline')):>8s}")
        spec = s.get("speculative") or {}
        if spec.get("num_draft_tokens") is not None:
            per_pos = ", ".join(f"{x:.2f}" for x in (spec.get("acceptance_per_pos") or [])[:8])
            lines.append(f"  {label} speculative ({' + '.join(spec['source'])}): drafted {spec['num_draft_tokens']:g}, "
                         f"accepted {spec['num_accepted_tokens']:g}, alpha-bar {_num(spec['draft_acceptance_rate'])}, "
                         f"tau {_num(spec['mean_acceptance_length'])}, tau per drafting step {_num(spec['tau_per_drafting_step'])}"
                         + (f", s_i {per_pos}" if per_pos else ""))
        if _sglang_line(label, spec):
            lines.append(_sglang_line(label, spec))
        if spec.get("not_exposed"):
            lines.append(f"  {label} does not expose: {'; '.join(spec['not_exposed'])}")
    return "\n".join(lines)


def request_extra(args) -> dict:
    """Server-specific fields every request of a run carries (`--no-prompt-cache`: NO_PROMPT_CACHE)."""
    return dict(NO_PROMPT_CACHE) if getattr(args, "no_prompt_cache", False) else {}


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
                "server_decode_calls": _counter(delta, "n_decode_total") if delta else None,
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


def run_remote_load_test_command(args) -> dict:
    """`load-test --endpoint URL [--baseline-endpoint URL]`: the local load test's workload and metrics
    against a server (and its baseline); a partial report and exit 2 when a server fails mid-run."""
    from tqdm import tqdm

    if args.replay:
        raise SpecDecError("--replay re-runs the lab's own schedulers: it does not go with --endpoint")
    if args.arrival_rate is not None:
        raise SpecDecError("--endpoint runs the closed loop only (C in flight): drop --arrival-rate")
    cfg = LoadConfig(concurrency=tuple(args.concurrency), requests_per_level=args.requests_per_level,
                     max_new_tokens=args.max_new_tokens)
    cfg.validate()
    if cfg.requests_per_level < 1:
        raise SpecDecError(f"requests-per-level must be >= 1 (got {cfg.requests_per_level})")
    ensure_writable(args.out)
    cases = workload(args.prompts, seed=cfg.seed)
    model = None if args.model == "smollm2-135m" else args.model  # the local default is no server's name
    servers = [open_server("endpoint", args.endpoint, model)]
    if args.baseline_endpoint:
        servers.append(open_server("baseline", args.baseline_endpoint, model))
    first = {s.label: s.before for s in servers}
    extra = request_extra(args)
    started, wall = time.time(), time.perf_counter()
    total = sum(cfg.requests_per_level * c for c in cfg.concurrency) * len(servers)
    with tqdm(total=total, desc="load-test --endpoint", unit="req") as bar:
        rows, records = run_remote_load_test(servers, cases, cfg.concurrency, cfg.requests_per_level, cfg.max_new_tokens,
                                             0.0, cfg.seed, extra, progress=lambda _: bar.update(1))
    result = remote_load_result(servers, rows, records, first, cfg, args, extra)
    result["environment"].update({"date": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
                                  "wall_s": round(time.perf_counter() - wall, 1)})
    args.out.write_text(dumps(result))
    print(format_load_summary(result))
    requests = [r for levels in records.values() for level in levels.values() for r in level]
    failed = [r for r in requests if r.error]
    if failed:
        bad = next(r for r in failed if r.error != "not run")
        raise SpecDecError(f"{len(failed)} of {len(requests)} requests failed or were not run ({bad.endpoint}: {bad.error}); "
                           f"the partial report with {len(requests) - len(failed)} completed is in {args.out}")
    return result


def remote_load_result(servers: list[Server], rows: list[dict], records: dict[str, dict[int, list[RemoteRequest]]],
                       first: dict[str, Snapshot | None], cfg: LoadConfig, args, extra: dict) -> dict:
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
                   "prompts": str(args.prompts), "schemes": [s.label for s in servers], "request_extra": extra,
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
        lines.append(f"{r['scheme']:10s} {r['concurrency']:3d}  {_num(r.get('per_user_tok_s')):>14s}  "
                     f"{_num(r.get('aggregate_tok_s')):>15s}  {_num(r.get('ttft_s')):>6s}  {_num(r.get('p95_itl_s'), '.3f'):>9s}  "
                     f"{_num(r['num_draft_tokens'], 'g'):>7s}  {_num(r['num_accepted_tokens'], 'g'):>8s}  {_num(r['tau']):>4s}  "
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
        if _sglang_line(label, spec):
            lines.append(_sglang_line(label, spec))
        if spec.get("not_exposed"):
            lines.append(f"  {label} does not expose: {'; '.join(spec['not_exposed'])}")
    return "\n".join(lines)
