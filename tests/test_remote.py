"""bench --endpoint and load-test --endpoint (specdec_core/bench/remote*.py): the streaming client, the
closed-loop load test with the local metrics, the counters per level, --no-prompt-cache, the failures.

(a) against a tiny in-process fake OpenAI server (stdlib http.server on a free loopback port), which can
also play SGLang (its /metrics gauges and /server_info); vLLM's and SGLang's /metrics pages written from
their documentation (labelled as such) parsed into the lab's vocabulary;
(b) against a real llama-server started here, when its binary is built (`make llama-server`, or
SPECDEC_LLAMA_SERVER=path), plain and with its n-gram speculation.
"""
from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from specdec_core.bench import remote_client, remote_counters, remote_load
from specdec_core.errors import SpecDecError
from conftest import llama_server_binary


def error_line(err: str) -> str:
    """The CLI's error: its last stderr line (the progress bar writes above it), checked to be one line."""
    line = err.strip().splitlines()[-1] if err.strip() else ""
    assert line.startswith("error: "), err[-500:]
    return line


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- /metrics pages and server info written from the engines' documentation -------------------------
# Labelled as captured from documentation, not from a running server: names, types, labels and the
# page's layout follow the documentation (and the source it points to); the HELP wording and every
# number are ours.

# vLLM, captured from documentation (vLLM's "Metrics" design page, docs/design/metrics.md, "Example
# output" of `curl /metrics`, read at vllm-project/vllm 0328b59: # HELP / # TYPE lines, a model_name
# label on every series, float values), with the spec-decode counters as the API reference of
# vllm.v1.spec_decode.metrics documents them (docs.vllm.ai, SpecDecodingProm: vllm:spec_decode_num_drafts,
# _num_draft_tokens, _num_accepted_tokens, _num_accepted_tokens_per_pos with a position label; exposed
# with _total; an engine label per engine core). Its docstring gives the conversions checked below:
# acceptance rate = accepted / draft tokens, mean acceptance length = 1 + accepted / drafts (the bonus
# token included), per-position rate = accepted at the position / drafts.
VLLM_DOCS = """# HELP vllm:num_requests_running Requests in the running batch.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}} 8.0
# HELP vllm:generation_tokens_total Tokens generated.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}} {generated}
# HELP vllm:spec_decode_num_drafts_total Drafting steps.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}} {drafts}
# HELP vllm:spec_decode_num_draft_tokens_total Tokens drafted.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}} {tokens}
# HELP vllm:spec_decode_num_accepted_tokens_total Drafted tokens accepted.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"}} {accepted}
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Drafted tokens accepted, per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="1"}} {p1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",position="2"}} {p2}
"""

# SGLang, captured from documentation (SGLang's "Production Metrics" page, docs/references/production_metrics.md,
# docs.sglang.io/references/production_metrics.html, read at sgl-project/sglang 40ef116: its `curl /metrics`
# example, a model_name label, counters, gauges and histograms). That example has no speculative series; the
# two gauges are written as python/sglang/srt/metrics/collector.py declares them (sgl-project/sglang 93d0487:
# sglang:spec_accept_length and sglang:spec_accept_rate, Gauge, set from the last decode-log window).
SGLANG_DOCS = """# HELP sglang:prompt_tokens_total Prompt tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} {prompt}
# HELP sglang:generation_tokens_total Tokens generated.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} {generated}
# HELP sglang:token_usage KV pool in use.
# TYPE sglang:token_usage gauge
sglang:token_usage{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} 0.28
# HELP sglang:time_to_first_token_seconds Time to first token.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{{le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"}} 6.0
sglang:time_to_first_token_seconds_bucket{{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"}} 9.0
sglang:time_to_first_token_seconds_sum{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} 1.25
sglang:time_to_first_token_seconds_count{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} 9.0
# HELP sglang:spec_accept_length Accepted tokens per verify step, the bonus token included (last window).
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} {length}
# HELP sglang:spec_accept_rate SGLang's acceptance rate (last window).
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} {rate}
# HELP sglang:num_running_reqs Running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{model_name="meta-llama/Llama-3.1-8B-Instruct"}} 0.0
"""

# SGLang's GET /server_info (docs.sglang.io basic_usage/native_api: /server_info, /get_server_info in older
# versions), trimmed, in the shape python/sglang/srt/entrypoints/http_server.py returns: the server args, the
# scheduler info, internal_states (one per data-parallel rank, with avg_spec_accept_length: accepted tokens
# over verify steps since the server started) and the version. Captured from documentation and source, not
# from a running server.
SGLANG_SERVER_INFO = json.dumps({
    "model_path": "meta-llama/Llama-3.1-8B-Instruct", "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
    "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "decode_log_interval": 40,
    "internal_states": [{"last_gen_throughput": 41.3, "avg_spec_accept_length": 2.7}], "version": "0.5.0"})


# vLLM's per-request object, captured from documentation (docs/features/speculative_decoding/
# acceptance_metrics.md, "Response Format", read at vllm-project/vllm 02cf515: the `summary` level's
# fields, with the page's own example values), not from a running server.
VLLM_REQUEST_DOCS = {"mean_acceptance_length": 1.2325581395348837, "draft_acceptance_rate": 0.07751937984496124,
                     "acceptance_histogram": [39, 1, 0, 3], "acceptance_histogram_by_draft_length": {"3": [39, 1, 0, 3]},
                     "num_spec_steps": 43, "num_accepted_draft_tokens": 10, "num_draft_tokens": 129, "num_spec_tokens": 3}


# --- a fake OpenAI-compatible server ---------------------------------------------------------------


class Fake:
    """Serves /v1/models, a streamed /v1/chat/completions of `words` (one chunk each, `gap_s` apart, after
    `first_s`) with llama.cpp-style timings, and /metrics with spec counters that grow per request.
    mode: "ok", "html" (a web page instead), "nochoices" (JSON chunks without choices);
    die_on: the request number (1-based) that is cut mid-stream, after which the server shuts down;
    engine "sglang": /metrics is `metrics` (default: SGLANG_DOCS with accept length 2.65) and the responses
    carry no timings, as SGLang's; engine "vllm-request": no /metrics, no timings, and every response's
    final usage chunk carries VLLM_REQUEST_DOCS as metrics.speculative_decoding; `server_info` (a body) is served at `server_info_path` when given.
    `bodies` keeps every POSTed JSON body; requests may come concurrently (a load test), hence the lock."""

    def __init__(self, words=("Hello", " world", "!", " Bye"), first_s=0.05, gap_s=0.02, mode="ok", die_on=None,
                 engine="llamacpp", metrics=None, server_info=None, server_info_path="/server_info"):
        self.words, self.first_s, self.gap_s, self.mode, self.die_on = list(words), first_s, gap_s, mode, die_on
        self.engine, self.metrics, self.server_info, self.server_info_path = engine, metrics, server_info, server_info_path
        self.requests = 0
        self.dead = False  # set when die_on fires: kept-alive connections must stop answering too
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        self.counters = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "pos": [0, 0, 0]}
        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), self.handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def metrics_text(self) -> str:
        if self.engine == "sglang":
            return self.metrics or SGLANG_DOCS.format(prompt=7 * self.requests, generated=5 * self.requests,
                                                      length=2.65, rate=0.6625)
        c = self.counters
        lines = ["# HELP llamacpp:spec_decode_num_drafts_total Speculative steps", "# TYPE llamacpp:spec_decode_num_drafts_total counter",
                 f"llamacpp:spec_decode_num_drafts_total {c['drafts']}",
                 "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter", f"llamacpp:spec_decode_num_draft_tokens_total {c['draft_tokens']}",
                 "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter", f"llamacpp:spec_decode_num_accepted_tokens_total {c['accepted']}",
                 "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter"]
        lines += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}' for i, v in enumerate(c["pos"])]
        return "\n".join(lines) + "\n"

    def handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def send(self, status: int, kind: str, body: bytes):
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def hang_up(self) -> bool:
                # Shutting the listening socket down does not end kept-alive connections, whose handler
                # threads would go on answering (e.g. /metrics) — a dead server answers nothing.
                if fake.dead:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                return fake.dead

            def do_GET(self):
                if self.hang_up():
                    return
                if self.path == "/v1/models":
                    self.send(200, "application/json", json.dumps({"object": "list", "data": [{"id": "fake-model"}]}).encode())
                elif self.path == "/metrics" and fake.engine != "vllm-request":
                    self.send(200, "text/plain; version=0.0.4", fake.metrics_text().encode())
                elif fake.server_info is not None and self.path == fake.server_info_path:
                    self.send(200, "application/json", fake.server_info.encode())
                else:
                    self.send(404, "application/json", b'{"error": {"message": "not found"}}')

            def chunk(self, obj) -> None:
                data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def do_POST(self):
                if self.hang_up():
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.requests += 1
                    fake.bodies.append(body)
                    number = fake.requests
                if fake.mode == "html":
                    self.send(200, "text/html", b"<html><body>Welcome to nginx!</body></html>")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if fake.mode == "nochoices":
                    self.chunk({"hello": "world"})
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self.chunk({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]})
                time.sleep(fake.first_s)
                for i, word in enumerate(fake.words):
                    if fake.die_on == number and i == 2:  # cut mid-stream, then the server goes away
                        fake.dead = True
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        threading.Thread(target=fake.close, daemon=True).start()
                        return
                    self.chunk({"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]})
                    time.sleep(fake.gap_s)
                with fake.lock:
                    c = fake.counters  # this response: one drafting step of 3 drafts, 2 accepted
                    c["drafts"] += 1
                    c["draft_tokens"] += 3
                    c["accepted"] += 2
                    c["pos"][0] += 1
                    c["pos"][1] += 1
                self.chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                n = len(fake.words) + 1  # the usage counts one token the chunks did not carry
                timings = {"predicted_n": n, "draft_n": 3, "draft_n_accepted": 2} if fake.engine == "llamacpp" else None
                per_request = {"metrics": {"speculative_decoding": VLLM_REQUEST_DOCS}} if fake.engine == "vllm-request" else {}
                self.chunk({"choices": [], "usage": {"completion_tokens": n, "prompt_tokens": 7},
                            **({"timings": timings} if timings else {}), **per_request})
                self.chunk(b"[DONE]")
                self.wfile.write(b"0\r\n\r\n")

        return Handler


@pytest.fixture
def fake():
    servers = []

    def make(**kw) -> Fake:
        servers.append(Fake(**kw))
        return servers[-1]

    yield make
    for s in servers:
        try:
            s.close()
        except OSError:
            pass


# --- (a) the client against the fake ---------------------------------------------------------------


def test_stream_records_every_chunk_with_its_arrival_time(fake):
    f = fake(first_s=0.1, gap_s=0.03)
    with remote_client.make_client() as client:
        assert remote_client.served_models(client, f.url) == ["fake-model"]
        r = remote_client.stream_chat(client, f.url, [{"role": "user", "content": "hi"}], model="fake-model", max_tokens=8,
                               id=3, label="chat-01")
    assert r.ok and r.error == "" and r.text == "Hello world! Bye" and r.finish_reason == "stop"
    assert (r.id, r.label, r.prompt_tokens) == (3, "chat-01", 7)
    # 4 content chunks, usage says 5 tokens: the extra one is credited to the last delivery
    assert [n for _, n in r.deliveries] == [1, 1, 1, 2] and r.completion_tokens == 5
    assert r.timings == {"predicted_n": 5, "draft_n": 3, "draft_n_accepted": 2}
    times = [t for t, _ in r.deliveries]
    assert r.arrival_s < times[0] < times[-1] <= r.finish_s
    figures = remote_client.request_figures(r)
    assert figures["ttft_s"] == pytest.approx(times[0] - r.arrival_s) and figures["ttft_s"] >= 0.1
    assert len(figures["itl_s"]) == 3 and all(0.02 < g < 0.5 for g in figures["itl_s"])
    assert figures["tokens_per_s"] == pytest.approx(4 / (times[-1] - times[0]))  # (tokens - 1) / decode span


def test_remote_requests_feed_the_load_tests_own_metrics(fake):
    """The remote records are what speed_metrics consumes: one code path for every speed figure."""
    from specdec_core.bench.loadtest import request_speed, speed_metrics

    f = fake(gap_s=0.01)
    with remote_client.make_client() as client:
        records = [remote_client.stream_chat(client, f.url, [{"role": "user", "content": "x"}], model="m", max_tokens=8, id=i,
                                      label=f"p{i}") for i in range(3)]
    m = speed_metrics(records, 1, {f"p{i}": "chat" for i in range(3)})
    assert m["num_requests"] == 3 and m["steady_requests"] == 1  # the first and last arrival cut, as locally
    assert m["per_user_tok_s"] == pytest.approx(request_speed(records[1])[0])
    assert set(m["per_user_by_category"]) == {"chat"}


def test_completions_endpoint_streams_too(fake):
    f = fake()
    with remote_client.make_client() as client:
        r = remote_client.stream_completion(client, f.url, "Once upon", model="m", max_tokens=8)
    assert r.ok and r.text == "Hello world! Bye"  # the fake sends delta chunks; text chunks parse alike


def test_counters_are_differenced_and_put_in_the_labs_vocabulary():
    """Two snapshots of VLLM_DOCS: only the run's share counts, and it becomes alpha-bar, tau per drafting
    step, s_i and a_i."""
    before = remote_counters.parse_metrics(VLLM_DOCS.format(generated=500, drafts=100, tokens=300, accepted=150, p0=80, p1=50, p2=20))
    after = remote_counters.parse_metrics(VLLM_DOCS.format(generated=540, drafts=110, tokens=330, accepted=168, p0=89, p1=6 + 50,
                                                  p2=3 + 20))
    delta = remote_counters.counter_delta(before, after)
    assert "vllm:num_requests_running" not in delta  # gauges are not differenced
    figures = remote_counters.speculative_figures(delta, [])
    assert figures["num_drafts"] == 10 and figures["num_draft_tokens"] == 30 and figures["num_accepted_tokens"] == 18
    assert figures["draft_acceptance_rate"] == pytest.approx(0.6)
    assert figures["tau_per_drafting_step"] == pytest.approx(1 + 18 / 10)
    assert figures["acceptance_per_pos"] == pytest.approx([0.9, 0.6, 0.3])
    assert figures["conditional_acceptance_per_pos"] == pytest.approx([0.9, 0.6 / 0.9, 0.3 / 0.6])
    assert figures["mean_acceptance_length"] is None  # no per-response timings: vLLM's tau here is per drafting step
    assert any("timings" in n for n in figures["not_exposed"]) and any(n.startswith("tau") for n in figures["not_exposed"])
    with pytest.raises(SpecDecError, match="restarted"):
        remote_counters.counter_delta(after, before)


def test_vllm_page_from_its_documentation_in_the_labs_vocabulary():
    """VLLM_DOCS (captured from documentation, not from a running vLLM), two snapshots 40 drafting steps apart:
    the documentation's formulas over the difference give alpha-bar, tau per drafting step, s_i and a_i."""
    before = remote_counters.parse_metrics(VLLM_DOCS.format(generated=27453.0, drafts=1000.0, tokens=3000.0, accepted=1950.0,
                                                   p0=800.0, p1=650.0, p2=500.0))
    after = remote_counters.parse_metrics(VLLM_DOCS.format(generated=27613.0, drafts=1040.0, tokens=3120.0, accepted=2034.0,
                                                  p0=836.0, p1=680.0, p2=518.0))
    figures = remote_counters.speculative_figures(remote_counters.counter_delta(before, after), [], after, None)
    assert (figures["num_drafts"], figures["num_draft_tokens"], figures["num_accepted_tokens"]) == (40, 120, 84)
    assert figures["draft_acceptance_rate"] == pytest.approx(84 / 120) == pytest.approx(0.7)
    assert figures["tau_per_drafting_step"] == pytest.approx(1 + 84 / 40) == pytest.approx(3.1)  # the bonus token included
    assert figures["acceptance_per_pos"] == pytest.approx([0.9, 0.75, 0.45])
    assert figures["conditional_acceptance_per_pos"] == pytest.approx([0.9, 0.75 / 0.9, 0.45 / 0.75])
    assert figures["source"] == ["/metrics"]
    # a vLLM page says nothing about SGLang: no SGLang figure, no SGLang entry among what it does not expose
    assert not any(k.startswith("sglang") or k.endswith("_basis") for k in figures)
    assert not any("sglang" in n or "server_info" in n for n in figures["not_exposed"])


def test_sglang_page_from_its_documentation_in_the_labs_vocabulary():
    """SGLANG_DOCS (captured from documentation, not from a running SGLang): the accept-length gauge is read
    from the snapshot after the run, never differenced, and becomes tau per drafting step as it is (SGLang's
    figure already counts the bonus token), labelled as the server's own windowed average."""
    before = remote_counters.parse_metrics(SGLANG_DOCS.format(prompt=8.128902e6, generated=7.557572e6, length=2.1, rate=0.525))
    after = remote_counters.parse_metrics(SGLANG_DOCS.format(prompt=8.129e6, generated=7.5577e6, length=2.65, rate=0.6625))
    delta = remote_counters.counter_delta(before, after)
    assert remote_counters.SGLANG_ACCEPT_LENGTH not in delta and delta["sglang:prompt_tokens_total"]  # gauges are not differenced
    figures = remote_counters.speculative_figures(delta, [], after, None)
    assert figures["sglang_spec_accept_length"] == pytest.approx(2.65)  # the after value, not 2.65 - 2.1
    assert figures["tau_per_drafting_step"] == pytest.approx(2.65)
    assert figures["sglang_spec_accept_rate"] == pytest.approx(0.6625)  # kept as SGLang's, not taken for alpha-bar
    assert figures["draft_acceptance_rate"] is None and figures["num_draft_tokens"] is None
    assert "windowed average" in figures["tau_per_drafting_step_basis"]
    assert "not this run's difference" in figures["tau_per_drafting_step_basis"]
    assert figures["source"] == ["/metrics sglang:spec_accept_length"]
    text = " ".join(figures["not_exposed"])
    assert "/server_info (nor /get_server_info)" in text and "alpha-bar" in text
    # a gauge of 0 (a server that does not speculate) is no accept length
    idle = remote_counters.parse_metrics(SGLANG_DOCS.format(prompt=1, generated=1, length=0, rate=0))
    figures = remote_counters.speculative_figures(None, [], idle, None)
    assert figures["tau_per_drafting_step"] is None and "sglang:spec_accept_length is 0" in " ".join(figures["not_exposed"])


@pytest.mark.parametrize("path", ["/server_info", "/get_server_info"])
def test_bench_reads_sglangs_server_info_into_the_report(fake, tmp_path, capsys, path):
    """An SGLang-like fake (SGLANG_DOCS on /metrics, SGLANG_SERVER_INFO at either path SGLang has used)
    through `bench --endpoint`: the server info's running average becomes the report's tau per drafting
    step, the gauge stands beside it; the llama.cpp baseline's figures carry nothing of SGLang."""
    from specdec_core.cli import main

    sglang, base = fake(engine="sglang", server_info=SGLANG_SERVER_INFO, server_info_path=path), fake()
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "chat-01", "category": "chat", "prompt": "hi"}) + "\n")
    out = tmp_path / "o.json"
    assert main(["bench", "--endpoint", sglang.url, "--baseline-endpoint", base.url, "--prompts", str(prompts),
                 "--max-new-tokens", "8", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    s = json.loads(out.read_text())["summary"]["endpoint"]["speculative"]
    assert s["source"] == ["/metrics sglang:spec_accept_length", path]
    assert s["sglang_avg_spec_accept_length"] == pytest.approx(2.7) and s["sglang_spec_accept_length"] == pytest.approx(2.65)
    assert s["tau_per_drafting_step"] == pytest.approx(2.7)
    assert "running average since the server started" in s["tau_per_drafting_step_basis"]
    assert s["mean_acceptance_length"] is None and s["draft_acceptance_rate"] is None  # SGLang gives neither
    assert "drafting steps (a count: SGLang gives only its average)" in s["not_exposed"]
    assert "drafting steps (tau per drafting step)" not in s["not_exposed"]  # it does give tau per drafting step
    assert "tau per drafting step 2.70, SGLang's own running average" in printed
    b = json.loads(out.read_text())["summary"]["baseline"]["speculative"]
    assert b["source"] == ["/metrics", "timings"] and not any("sglang" in k or "sglang" in n for k in b for n in b["not_exposed"])


def test_malformed_sglang_page_is_one_line(fake, tmp_path, capsys):
    """An SGLang page whose gauge is not a number: the Prometheus parser's one-line error, before any request."""
    from specdec_core.cli import main

    bad = SGLANG_DOCS.format(prompt=1, generated=1, length="two-point-six", rate=0.5)
    with pytest.raises(SpecDecError) as err:
        remote_counters.parse_metrics(bad)
    assert "\n" not in str(err.value) and "not Prometheus text" in str(err.value)
    f = fake(engine="sglang", metrics=bad)
    assert main(["bench", "--endpoint", f.url, "--prompts", str(workload_file(tmp_path)), "--out", str(tmp_path / "o.json")]) == 2
    assert "not Prometheus text" in error_line(capsys.readouterr().err) and f.requests == 0


@pytest.mark.parametrize("body,needle", [("<html>busy</html>", "answered not JSON"),
                                         (json.dumps({"internal_states": {"avg_spec_accept_length": 2.7}}), "without a list"),
                                         (json.dumps({"internal_states": [{"avg_spec_accept_length": "fast"}]}), "not a number"),
                                         (json.dumps({"internal_states": [{"last_gen_throughput": 0.0}]}), "not reported")])
def test_malformed_sglang_server_info_is_not_exposed(fake, tmp_path, body, needle):
    """A server-info answer SGLang's shape does not fit: named under not_exposed, the run and the gauge kept."""
    from specdec_core.cli import main

    f = fake(engine="sglang", server_info=body)
    out = tmp_path / "o.json"
    assert main(["bench", "--endpoint", f.url, "--prompts", str(workload_file(tmp_path)), "--max-new-tokens", "4",
                 "--out", str(out)]) == 0
    s = json.loads(out.read_text())["summary"]["endpoint"]["speculative"]
    problem = next(n for n in s["not_exposed"] if n.startswith("/server_info internal_states"))
    assert needle in problem and "sglang_avg_spec_accept_length" not in s
    assert s["tau_per_drafting_step"] == pytest.approx(2.65) and "windowed average" in s["tau_per_drafting_step_basis"]


def test_sglang_accept_length_below_one_is_not_taken():
    info = remote_counters.ServerInfo("/server_info", {"internal_states": [{"avg_spec_accept_length": 0.7}]}, "")
    assert remote_counters.sglang_accept_length_from_info(info) == (pytest.approx(0.7), "")
    figures = remote_counters.speculative_figures(None, [], None, info)
    assert figures["tau_per_drafting_step"] is None and "below 1" in " ".join(figures["not_exposed"])


def test_malformed_metrics_page_is_one_line():
    with pytest.raises(SpecDecError) as err:
        remote_counters.parse_metrics("this is {not prometheus\n")
    assert "\n" not in str(err.value) and "Prometheus" in str(err.value)


def test_server_without_counters_says_what_it_does_not_expose():
    figures = remote_counters.speculative_figures(None, [])
    assert figures["num_draft_tokens"] is None and figures["draft_acceptance_rate"] is None
    text = " ".join(figures["not_exposed"])
    assert "/metrics" in text and "timings.draft_n" in text and "alpha-bar" in text


@pytest.mark.parametrize("mode,needle", [("html", "not an OpenAI-compatible"), ("nochoices", "without 'choices'")])
def test_non_openai_server_is_one_line(fake, tmp_path, capsys, mode, needle):
    from specdec_core.cli import main

    f = fake(mode=mode)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "chat-01", "category": "chat", "prompt": "hi"}) + "\n")
    if mode == "html":  # a web server that answers /v1/models like an OpenAI one but not the chat route
        with remote_client.make_client() as client:
            r = remote_client.stream_chat(client, f.url, [{"role": "user", "content": "hi"}], model="m", max_tokens=4)
        assert not r.ok and "text/html" in r.error
    assert main(["bench", "--endpoint", f.url, "--prompts", str(prompts), "--out", str(tmp_path / "o.json")]) == 2
    err = error_line(capsys.readouterr().err)
    assert "text/html" in err if mode == "html" else needle in err


def test_not_an_openai_server_at_all_is_one_line(tmp_path, capsys):
    """A plain web server (no /v1/models): the check before any timed request says so."""
    import http.server

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        from specdec_core.cli import main

        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert main(["bench", "--endpoint", url, "--out", str(tmp_path / "o.json")]) == 2
        assert "not an OpenAI-compatible server" in error_line(capsys.readouterr().err)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("url", ["http://127.0.0.1:{port}", "ftp://example"])
def test_unreachable_or_bad_url_is_one_line(tmp_path, capsys, url):
    from specdec_core.cli import main

    url = url.format(port=free_port())  # nothing listens there
    assert main(["bench", "--endpoint", url, "--out", str(tmp_path / "o.json")]) == 2
    err = error_line(capsys.readouterr().err)
    assert ("cannot reach" in err) if url.startswith("http") else ("not an http(s) URL" in err)


def test_baseline_needs_an_endpoint(tmp_path, capsys):
    from specdec_core.cli import main

    assert main(["bench", "--baseline-endpoint", "http://127.0.0.1:1", "--out", str(tmp_path / "o.json")]) == 2
    assert "--baseline-endpoint needs --endpoint" in capsys.readouterr().err


def test_server_dying_mid_run_keeps_completed_requests(fake, tmp_path, capsys):
    from specdec_core.cli import main

    f = fake(die_on=3)  # the third request is cut mid-stream, then nothing listens any more
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"chat-0{i}", "category": "chat", "prompt": f"hi {i}"}) + "\n" for i in range(1, 5)))
    out = tmp_path / "o.json"
    assert main(["bench", "--endpoint", f.url, "--prompts", str(prompts), "--max-new-tokens", "8", "--out", str(out)]) == 2
    err = error_line(capsys.readouterr().err)
    assert err.startswith("error: 2 of 4 prompt runs failed") and str(out) in err
    report = json.loads(out.read_text())
    rows = report["results"]
    assert [r["ok"] for r in rows] == [True, True, False, False]
    assert "stream" in rows[2]["error"] and rows[3]["error"] == "not run"
    assert rows[0]["text"] == "Hello world! Bye" and rows[0]["new_tokens"] == 5
    assert report["summary"]["endpoint"]["completed"] == 2 and report["summary"]["endpoint"]["failed"] == 2
    spec = report["summary"]["endpoint"]["speculative"]  # /metrics is gone, the completed responses' timings are not
    assert spec["timings_draft_n"] == 6 and spec["timings_draft_n_accepted"] == 4 and "metrics_error" in spec
    assert len(report["requests"]["endpoint"]) == 3 and report["requests"]["endpoint"][2]["error"]


def test_bench_endpoint_with_baseline_interleaves_and_differences(fake, tmp_path, capsys):
    from specdec_core.cli import main

    spec, base = fake(), fake(words=("Hello", " world", "!", " Bye"))
    spec.counters["drafts"] = 50  # counts from before the run: not this run's
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "copy-01", "category": "copy", "prompt": "a"}) + "\n"
                       + json.dumps({"id": "mt-01", "category": "multi-turn", "turns": ["a", "b"]}) + "\n")
    out = tmp_path / "o.json"
    assert main(["bench", "--endpoint", spec.url, "--baseline-endpoint", base.url, "--prompts", str(prompts),
                 "--max-new-tokens", "8", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "identical to baseline 2/2" in printed and "alpha-bar 0.67" in printed
    report = json.loads(out.read_text())
    assert [r["endpoint"] for r in report["results"]] == ["endpoint", "baseline", "baseline", "endpoint"]  # rotated per prompt
    s = report["summary"]["endpoint"]["speculative"]
    assert s["metrics_num_drafts"] == 3 and s["metrics_num_draft_tokens"] == 9 == s["timings_draft_n"]  # 3 requests
    assert s["mean_acceptance_length"] == pytest.approx(3 * 4 / (3 * 4 - 3 * 2))
    assert report["summary"]["endpoint"]["speedup_vs_baseline"] > 0 and set(report["summary"]["endpoint"]["by_category"]) == {"copy", "multi-turn"}
    assert spec.requests == 3 and base.requests == 3  # the multi-turn prompt is two requests


# --- load-test --endpoint against fakes ------------------------------------------------------------


def workload_file(tmp_path) -> Path:
    """One single-turn prompt per workload category (the load test's workload keeps chat, qa and copy)."""
    prompts = tmp_path / "w.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"{c}-01", "category": c, "prompt": f"a {c} prompt"}) + "\n"
                               for c in ("chat", "qa", "copy")))
    return prompts


def test_load_test_endpoint_with_baseline_runs_the_local_workload_and_metrics(fake, tmp_path, capsys):
    """Two levels, C in flight, the same request list on both servers, the local steady-state cut and
    metrics, per-level counter deltas, and matched throughput with the baseline in ar's place."""
    from specdec_core.bench.loadtest import level_order, workload
    from specdec_core.cli import main

    spec, base = fake(gap_s=0.02), fake(gap_s=0.03)
    spec.counters["drafts"] = 50  # counts from before the run: not this run's
    prompts, out = workload_file(tmp_path), tmp_path / "load.json"
    assert main(["load-test", "--endpoint", spec.url, "--baseline-endpoint", base.url, "--prompts", str(prompts),
                 "--concurrency", "1,2", "--requests-per-level", "3", "--max-new-tokens", "8", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "matched throughput: endpoint" in printed
    report = json.loads(out.read_text())
    runs = report["runs"]
    assert [(r["scheme"], r["concurrency"]) for r in runs] == [("endpoint", 1), ("baseline", 1), ("endpoint", 2), ("baseline", 2)]
    for r in runs:
        for key in ("per_user_tok_s", "per_user_mean_tok_s", "per_user_by_category", "ttft_s", "p50_itl_s", "p95_itl_s",
                    "aggregate_tok_s", "num_requests", "steady_requests", "num_draft_tokens", "tau", "mean_verify_tokens"):
            assert key in r, key
        c = r["concurrency"]
        assert (r["num_requests"], r["steady_requests"], r["completed"], r["failed"]) == (3 * c, c, 3 * c, 0)
        # per level: /metrics differenced over the level == the level's responses' timings (3 drafts, 2 accepted each)
        s = r["speculative"]
        assert s["metrics_num_drafts"] == 3 * c and s["metrics_num_draft_tokens"] == 9 * c == s["timings_draft_n"]
        assert r["num_accepted_tokens"] == 6 * c and r["tau"] == pytest.approx(4 / 2)  # 4 decode tokens in 2 forwards
        assert r["mean_verify_tokens"] == pytest.approx(1 + 3 / 2)
        if r["scheme"] == "endpoint":
            assert r["identical_to_baseline"] == f"{3 * c}/{3 * c}"
    # the steady-state cut, recomputed from the per-request timeline: C=2 keeps arrivals 3 and 4 of 6
    timeline = sorted(report["requests"]["levels"]["endpoint@2"], key=lambda t: t[1])
    steady = [(t[4] - 1) / (t[3] - t[2]) for t in timeline[2:4]]
    # The timeline is rounded to 0.1 ms; over a decode span of ~60 ms that alone moves a speed by up to
    # ~0.2 %, so the tolerance is the rounding's own bound, not a fixed 0.1 % (which failed 1 run in 12).
    rel = 2e-4 / min(t[3] - t[2] for t in timeline[2:4])
    assert runs[2]["per_user_tok_s"] == pytest.approx(sorted(steady)[0] + (sorted(steady)[1] - sorted(steady)[0]) / 2, rel=rel)
    assert any(a[1] < b[1] < a[3] for a in timeline for b in timeline if a is not b)  # two in flight at once
    # the same request list on both servers, the local load test's order
    cases = workload(prompts)
    expected = sorted(c.id for c in level_order(cases, 2, 3))
    assert sorted(t[0] for t in timeline) == expected == sorted(t[0] for t in report["requests"]["levels"]["baseline@2"])
    m = report["matched_throughput"]
    assert (m["scheme"], m["baseline"]) == ("endpoint", "baseline") and report["matched_throughput_all"] == [m]
    assert m["per_user_speedup"] is None  # two levels: fewer than the 3 baseline levels a ratio needs
    assert set(m["per_user_speedup_by_category"]) <= {"chat", "qa", "copy"}
    assert report["speculative"]["endpoint"]["metrics_num_drafts"] == 9  # the whole run: 3 + 6 requests
    assert spec.requests == 9 == base.requests and not any("cache_prompt" in b for b in spec.bodies)
    assert report["config"]["schemes"] == ["endpoint", "baseline"] and "differs_from_local" in report["config"]


def test_no_prompt_cache_is_sent_in_every_body(fake, tmp_path):
    from specdec_core.cli import main

    f = fake()
    prompts = workload_file(tmp_path)
    assert main(["bench", "--endpoint", f.url, "--prompts", str(prompts), "--no-prompt-cache", "--max-new-tokens", "4",
                 "--out", str(tmp_path / "b.json")]) == 0
    assert main(["load-test", "--endpoint", f.url, "--prompts", str(prompts), "--no-prompt-cache", "--concurrency", "2",
                 "--requests-per-level", "1", "--max-new-tokens", "4", "--out", str(tmp_path / "l.json")]) == 0
    assert len(f.bodies) == 3 + 2 and all(b["cache_prompt"] is False for b in f.bodies)
    assert json.loads((tmp_path / "l.json").read_text())["config"]["request_extra"] == {"cache_prompt": False}


def test_load_test_server_dying_mid_run_keeps_completed_requests(fake, tmp_path, capsys):
    from specdec_core.cli import main

    f = fake(die_on=3)  # level 1's two requests complete; level 2's first is cut, then nothing listens
    out = tmp_path / "load.json"
    assert main(["load-test", "--endpoint", f.url, "--prompts", str(workload_file(tmp_path)), "--concurrency", "1,2,4",
                 "--requests-per-level", "2", "--max-new-tokens", "8", "--out", str(out)]) == 2
    err = error_line(capsys.readouterr().err)
    assert "requests failed or were not run" in err and str(out) in err
    report = json.loads(out.read_text())
    one, two, four = report["runs"]
    assert (one["completed"], one["failed"], one["not_run"]) == (2, 0, 0) and "per_user_tok_s" in one
    assert two["failed"] >= 1 and two["completed"] + two["failed"] + two["not_run"] == 4
    assert (four["completed"], four["not_run"]) == (0, 8) and "per_user_tok_s" not in four
    assert len(report["requests"]["levels"]["endpoint@1"]) == 2 and report["requests"]["failed"]["endpoint@2"]


@pytest.mark.parametrize("argv,needle", [(["--baseline-endpoint", "http://127.0.0.1:1"], "--baseline-endpoint needs --endpoint"),
                                         (["--endpoint", "http://127.0.0.1:1", "--arrival-rate", "2"], "closed loop only"),
                                         (["--no-prompt-cache"], "needs --endpoint")])
def test_load_test_endpoint_option_errors_are_one_line(tmp_path, capsys, argv, needle):
    from specdec_core.cli import main

    assert main(["load-test", *argv, "--out", str(tmp_path / "o.json")]) == 2
    assert needle in error_line(capsys.readouterr().err)


# --- (b) a real llama-server ------------------------------------------------------------------------


def start_llama_server(binary: Path, *extra: str, parallel: int = 1) -> tuple[subprocess.Popen, str]:
    """llama-server on a free loopback port, one thread, `parallel` slots (-np), /metrics on."""
    from specdec_core.models import gguf_path

    port = free_port()
    proc = subprocess.Popen([str(binary), "-m", str(gguf_path()), "--host", "127.0.0.1", "--port", str(port), "-t", "1",
                             "-c", "2048", "-np", str(parallel), "--metrics", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode} (flags {extra})")
        try:
            if httpx.get(url + "/health", timeout=1, trust_env=False).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError("llama-server did not become healthy in 60 s")


@pytest.mark.llama_server
@pytest.mark.skipif(llama_server_binary() is None, reason="no llama-server binary: run `make llama-server` or set "
                    "SPECDEC_LLAMA_SERVER=/path/to/llama-server")
def test_real_llama_server_plain_and_speculative(tmp_path, capsys):
    from specdec_core.cli import main

    binary = llama_server_binary()
    help_text = subprocess.run([str(binary), "--help"], capture_output=True, text=True).stdout
    if "ngram-simple" not in help_text or "--spec-draft-n-max" not in help_text:
        pytest.skip("this llama-server has no --spec-type ngram-simple / --spec-draft-n-max")
    plain, plain_url = start_llama_server(binary)
    spec, spec_url = start_llama_server(binary, "--spec-type", "ngram-simple", "--spec-draft-n-max", "8")
    try:
        # The suite's first two copy prompts: ngram-simple looks up 12-token n-grams (its default), so a
        # short prompt never drafts (and llama.cpp then leaves draft_n out of the response's timings).
        from specdec_core.suite import PROMPTS_DIR

        prompts = tmp_path / "p.jsonl"
        prompts.write_text("".join((PROMPTS_DIR / "suite.jsonl").read_text().splitlines(keepends=True)[:2]))
        reports = []
        for run in range(2):  # back to back: each run's counters are its own
            out = tmp_path / f"o{run}.json"
            assert main(["bench", "--endpoint", spec_url, "--baseline-endpoint", plain_url, "--prompts", str(prompts),
                         "--max-new-tokens", "32", "--out", str(out)]) == 0, capsys.readouterr().err
            reports.append(json.loads(out.read_text()))
        for report in reports:
            s = report["summary"]["endpoint"]["speculative"]
            assert s["source"] == ["/metrics", "timings"] and s["num_draft_tokens"] > 0
            # /metrics differenced over the run == the run's own responses' timings, summed
            assert s["metrics_num_draft_tokens"] == s["timings_draft_n"]
            assert s["metrics_num_accepted_tokens"] == s["timings_draft_n_accepted"]
            assert 0 < s["draft_acceptance_rate"] <= 1 and s["mean_acceptance_length"] >= 1
            assert s["acceptance_per_pos"] and s["acceptance_per_pos"][0] <= 1
            b = report["summary"]["baseline"]["speculative"]
            assert b["num_draft_tokens"] == 0 and b["mean_acceptance_length"] == pytest.approx(1.0)
            assert all(r["ok"] and r["new_tokens"] > 0 and r["ttft_s"] > 0 for r in report["results"])
        print(capsys.readouterr().out)
    finally:
        for proc in (plain, spec):
            proc.terminate()
            proc.wait(timeout=10)


NEEDS_LLAMA_SERVER = pytest.mark.skipif(llama_server_binary() is None, reason="no llama-server binary: run `make "
                                        "llama-server` or set SPECDEC_LLAMA_SERVER=/path/to/llama-server")


def copy_prompts(tmp_path, n: int = 2) -> Path:
    """The suite's first n copy prompts (copied text: ngram-simple finds its n-grams in the prompt)."""
    from specdec_core.suite import PROMPTS_DIR

    lines = [l for l in (PROMPTS_DIR / "suite.jsonl").read_text().splitlines(keepends=True) if '"copy"' in l][:n]
    prompts = tmp_path / "copy.jsonl"
    prompts.write_text("".join(lines))
    return prompts


@pytest.mark.llama_server
@NEEDS_LLAMA_SERVER
def test_real_llama_server_load_test_counters_per_level(tmp_path, capsys):
    """Levels 1 and 2 on two slots (-np 2: llama-server batches the slots' tokens in one decode), with
    and without n-gram speculation: each level's /metrics delta equals the level's summed timings."""
    from specdec_core.cli import main

    binary = llama_server_binary()
    help_text = subprocess.run([str(binary), "--help"], capture_output=True, text=True).stdout
    if "ngram-simple" not in help_text or "--spec-ngram-simple-size-n" not in help_text:
        pytest.skip("this llama-server has no --spec-type ngram-simple / --spec-ngram-simple-size-n")
    # 3-token lookups: with 16 new tokens the default 12 would leave drafting a few tokens at the end
    spec, spec_url = start_llama_server(binary, "--spec-type", "ngram-simple", "--spec-draft-n-max", "8",
                                        "--spec-ngram-simple-size-n", "3", parallel=2)
    plain, plain_url = start_llama_server(binary, parallel=2)
    try:
        out = tmp_path / "load.json"
        assert main(["load-test", "--endpoint", spec_url, "--baseline-endpoint", plain_url, "--prompts",
                     str(copy_prompts(tmp_path)), "--concurrency", "1,2", "--requests-per-level", "2",
                     "--max-new-tokens", "16", "--no-prompt-cache", "--out", str(out)]) == 0, capsys.readouterr().err
        report = json.loads(out.read_text())
        runs = report["runs"]
        assert [(r["scheme"], r["concurrency"]) for r in runs] == [("endpoint", 1), ("baseline", 1), ("endpoint", 2), ("baseline", 2)]
        for r in runs:
            assert r["completed"] == 2 * r["concurrency"] and r["per_user_tok_s"] > 0 and r["aggregate_tok_s"] > 0
            s = r["speculative"]
            if r["scheme"] == "endpoint":
                assert s["source"] == ["/metrics", "timings"] and s["num_draft_tokens"] > 0
                assert s["metrics_num_draft_tokens"] == s["timings_draft_n"]
                assert s["metrics_num_accepted_tokens"] == s["timings_draft_n_accepted"]
                assert r["tau"] >= 1 and r["identical_to_baseline"].endswith(f"/{2 * r['concurrency']}")
            else:
                assert s["metrics_num_draft_tokens"] == 0 and r["tau"] == pytest.approx(1.0)
            # llama_decode calls: at most one per request forward and prefill (fewer when slots were batched)
            assert 0 < r["server_decode_calls"] <= r["request_forwards"]
        # the levels' deltas add up to the whole run's
        whole = report["speculative"]["endpoint"]
        assert whole["metrics_num_draft_tokens"] == sum(r["speculative"]["metrics_num_draft_tokens"] for r in runs
                                                        if r["scheme"] == "endpoint")
        print(capsys.readouterr().out)
    finally:
        for proc in (spec, plain):
            proc.terminate()
            proc.wait(timeout=10)


@pytest.mark.llama_server
@NEEDS_LLAMA_SERVER
def test_real_llama_server_killed_mid_load_test(tmp_path, capsys, monkeypatch):
    """The server is terminated right after the first request completes: the report keeps that request,
    marks the next one failed and the rest not run, and the exit is non-zero."""
    from specdec_core.cli import main

    proc, url = start_llama_server(llama_server_binary())
    stream = remote_client.stream_chat

    def stream_then_kill(*args, **kwargs):
        record = stream(*args, **kwargs)
        if record.ok and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)
        return record

    monkeypatch.setattr(remote_load, "stream_chat", stream_then_kill)  # the load test calls it from there
    try:
        out = tmp_path / "load.json"
        assert main(["load-test", "--endpoint", url, "--prompts", str(copy_prompts(tmp_path)), "--concurrency", "1,2",
                     "--requests-per-level", "2", "--max-new-tokens", "8", "--out", str(out)]) == 2
        err = error_line(capsys.readouterr().err)
        assert "5 of 6 requests failed or were not run" in err and str(out) in err
        report = json.loads(out.read_text())
        one, two = report["runs"]
        assert (one["completed"], one["failed"], one["not_run"]) == (1, 1, 0) and one["error"].startswith("the stream broke")
        assert (two["completed"], two["not_run"]) == (0, 4)
        assert "metrics_error" in one["speculative"]  # /metrics died with the server; the completed request stays
        assert len(report["requests"]["levels"]["endpoint@1"]) == 1
        assert [f[0] for f in report["requests"]["failed"]["endpoint@1"]] == [1]
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)


def test_vllm_per_request_metrics_are_summed_into_the_labs_vocabulary(fake, tmp_path, capsys):
    """vLLM's per-request metrics.speculative_decoding (its documentation's example on every response, no
    /metrics page): summed over the run, the histogram of accepted drafts per step gives s_i."""
    from specdec_core.cli import main

    f = fake(engine="vllm-request")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"chat-0{i}", "category": "chat", "prompt": f"hi {i}"}) + "\n" for i in (1, 2)))
    out = tmp_path / "o.json"
    assert main(["bench", "--endpoint", f.url, "--prompts", str(prompts), "--max-new-tokens", "8", "--out", str(out)]) == 0
    spec = json.loads(out.read_text())["summary"]["endpoint"]["speculative"]
    assert "response metrics.speculative_decoding" in spec["source"] and spec["response_acceptance_histogram"] == [78, 2, 0, 6]
    assert (spec["num_drafts"], spec["num_draft_tokens"], spec["num_accepted_tokens"]) == (86, 258, 20)
    assert spec["draft_acceptance_rate"] == pytest.approx(VLLM_REQUEST_DOCS["draft_acceptance_rate"])
    assert spec["tau_per_drafting_step"] == pytest.approx(VLLM_REQUEST_DOCS["mean_acceptance_length"])  # the page's own
    # position 1: the 8 steps that accepted 1 or 3; positions 2 and 3: the 6 that accepted all 3 (of 86 steps)
    assert spec["acceptance_per_pos"] == pytest.approx([8 / 86, 6 / 86, 6 / 86])
    assert not any("per_pos" in x for x in spec["not_exposed"])

