"""A server's speculative counters (`bench/remote.py`), converted into the lab's vocabulary (`metrics.py`).

`/metrics` (Prometheus text, parsed with `prometheus_client`'s parser) snapshotted before and after a run
and differenced, where the server exposes vLLM's spec-decode counters (vLLM as `vllm:spec_decode_*`,
llama.cpp's `llama-server --metrics` under the same names as `llamacpp:spec_decode_*`), llama.cpp's
per-response `timings.draft_n` / `draft_n_accepted`, and vLLM's per-request `metrics.speculative_decoding`
(with `--per-request-spec-decode-metrics`: verify steps, drafted and accepted tokens, the histogram of
accepted drafts per step), each summed over the run's requests. SGLang has no such counters: its accept
length (tokens per verify step, the bonus token included) is read as the server's own averages, the
`sglang:spec_accept_length` gauge on the /metrics page after the run (a window: gauges are not
differenced) and `internal_states[].avg_spec_accept_length` of its `GET /server_info` (`/get_server_info`
in older versions; a running average since the server started), and reported as tau per drafting step
with a note that it is not this run's difference (the section comment above `ServerInfo`). Every figure a
server does not expose is listed as such, never guessed; SGLang's own figures only for a server that
looks like SGLang.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import httpx

from ..errors import SpecDecError
from ..metrics import conditional_acceptance, pooled_per_position
from .remote_client import METRICS_PATH, RemoteRequest, describe_response, json_or_none, unreachable_error

# vLLM's spec-decode counters (llama-server --metrics exposes the same names under `llamacpp:`).
SPEC_COUNTERS = {"num_drafts": "spec_decode_num_drafts_total", "num_draft_tokens": "spec_decode_num_draft_tokens_total",
                 "num_accepted_tokens": "spec_decode_num_accepted_tokens_total"}
SPEC_PER_POS = "spec_decode_num_accepted_tokens_per_pos_total"
NO_DRAFTING_STEPS = "drafting steps (tau per drafting step)"

Snapshot = dict[str, dict[tuple[tuple[str, str], ...], float]]  # sample name -> labels -> value


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
        raise unreachable_error(endpoint, err)
    if response.status_code in (404, 501) or (response.status_code != 200 and "metrics" in response.text.lower()):
        return None
    if response.status_code != 200:
        raise SpecDecError(f"GET {endpoint}{METRICS_PATH} answered {response.status_code} {describe_response(response)}")
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


def counter_total(delta: Snapshot, suffix: str) -> float | None:
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
    counters = {key: counter_total(delta, name) for key, name in SPEC_COUNTERS.items()}
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
            return ServerInfo(path, json_or_none(response.text), response.text[:80])
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
