"""The HTTP client of a run against an OpenAI-compatible server (`bench/remote.py`): one streamed request.

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

Token counts: one content chunk is counted as one token (llama.cpp and vLLM stream one token per chunk);
when the final `usage.completion_tokens` says more (a held-back partial UTF-8 character, a stop token),
the difference is credited to the last delivery, so the total is the server's own count.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Iterator
from urllib.parse import urlsplit

import httpx

from ..errors import SpecDecError
from .loadtest import request_speed

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
MODELS_PATH = "/v1/models"
METRICS_PATH = "/metrics"
TIMEOUT = httpx.Timeout(connect=5.0, read=300.0, write=30.0, pool=5.0)  # a slow CPU server may think long


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


def unreachable_error(endpoint: str, err: Exception) -> SpecDecError:
    reason = str(err).splitlines()[0] if str(err) else type(err).__name__
    return SpecDecError(f"cannot reach {endpoint}: {reason}")


def served_models(client: httpx.Client, endpoint: str) -> list[str]:
    """GET /v1/models: the model ids the server serves. Unreachable, or not an OpenAI-compatible answer:
    a one-line error, before any timed request."""
    try:
        response = client.get(endpoint + MODELS_PATH)
    except httpx.HTTPError as err:
        raise unreachable_error(endpoint, err)
    body = json_or_none(response.text)
    if response.status_code != 200 or not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise SpecDecError(f"{endpoint} is not an OpenAI-compatible server: GET {MODELS_PATH} answered "
                           f"{response.status_code} {describe_response(response)}")
    return [str(m.get("id")) for m in body["data"] if isinstance(m, dict) and m.get("id")]


def json_or_none(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


def describe_response(response: httpx.Response) -> str:
    """A few words on what came back instead of what we expected (for one-line errors)."""
    kind = response.headers.get("content-type", "no content type").split(";")[0]
    body = json_or_none(response.text) if "json" in kind else None
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
                record.error = f"POST {path} answered {response.status_code} {describe_response(response)}"
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
        chunk = json_or_none(data)
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
