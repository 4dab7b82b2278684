"""The app's model: loaded once per server, shared by every session.

Two ways to decode (SPECDEC_APP_DECODE for the server; a page opened with ?decode=lock or
?decode=batched overrides it for that session, so a teacher can show both side by side):
- `batched` (the default): live `ar` and `spec` decodes go through one `BatchServer` per server and
  model, so sessions that decode at the same time share each target forward instead of queueing.
  Everything else (nar and jacobi loops, cost measurements, experiments) still runs one at a time
  under the model lock; the server's thread takes no lock.
- `lock`: every model call runs under the one model lock with `sd.stream` / `sd.generate`, one
  session after another (the behaviour before the batch server; for comparison and as a fallback).

Either way a learner sees the same tokens: the server gives each request what `sd.generate` gives it
alone (tests/test_serving.py, and the browser test's concurrent races).
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager

import streamlit as st

from app.language import t

import specdec_core as sd
from specdec_core.generation import drafter_factory
from specdec_core.serving.server import MODES as BATCHED_MODES, BatchServer

MAX_PROMPT_TOKENS = 2000
MAX_PROMPT_CHARS = 20000  # refuse before tokenising something absurd
DECODE_MODES = ("batched", "lock")


def model_name() -> str:
    """The app's model (tests: SPECDEC_APP_MODEL=tiny)."""
    return os.environ.get("SPECDEC_APP_MODEL", "smollm2-135m")


def decode_mode() -> str:
    """`batched` (default) or `lock`: the page's ?decode=, else SPECDEC_APP_DECODE (module docstring)."""
    mode = (st.query_params.get("decode") or os.environ.get("SPECDEC_APP_DECODE", "")).strip().lower()
    return mode if mode in DECODE_MODES else "batched"


def batched(config: "sd.GenerationConfig", lm=None) -> bool:
    """True when this decode goes through the shared batch server (which serves the fp32 target: a
    quantised copy, `sd.quant.with_weights`, decodes in a loop of its own; so does `suffix`, whose
    history belongs to the browser session, not to the server)."""
    return (decode_mode() == "batched" and config.mode in BATCHED_MODES and getattr(lm, "weights", "fp32") == "fp32"
            and not recalls(config))


def recalls(config: "sd.GenerationConfig") -> bool:
    """A decode whose drafter recalls earlier answers (`suffix`, `mix` with the recipe book): its result
    depends on the history, so it is neither cached nor batched."""
    return sd.drafters.uses_history(config)


@st.cache_resource(show_spinner=False)
def _classroom_history() -> "sd.drafters.SuffixHistory":
    return sd.drafters.SuffixHistory()


def suffix_history() -> "sd.drafters.SuffixHistory":
    """The suffix drafter's history: this browser session's own by default; with the classroom toggle
    (`classroom` in the session), one history every session of this server shares."""
    if st.session_state.get("classroom"):
        return _classroom_history()
    if "suffix_history" not in st.session_state:
        st.session_state.suffix_history = sd.drafters.SuffixHistory()
    return st.session_state.suffix_history


# ---------------------------------------------------------------------------------------------
# Loading: once per server
# ---------------------------------------------------------------------------------------------

@st.cache_resource(show_spinner=False)
def _model_store() -> dict:
    # One per server: the loaded models, the lock for loading, and the model lock that serialises
    # the model calls that do not go through the batch server.
    return {"models": {}, "model_lock": threading.Lock(), "load_lock": threading.Lock()}


def model_lock() -> threading.Lock:
    return _model_store()["model_lock"]


def loaded_model():
    """The model if it is already loaded, else None (never loads)."""
    return _model_store()["models"].get(model_name())


def get_model():
    """Load the app's model once per server, with a spinner. On failure: st.error and None."""
    store, name = _model_store(), model_name()
    if name in store["models"]:
        return store["models"][name]
    try:
        with st.spinner(t("loading_model", name=name)):
            with store["load_lock"]:
                if name not in store["models"]:
                    store["models"][name] = sd.load_model(name)
    except Exception as err:  # SpecDecError (package missing) or anything transformers raises
        st.error(t("err_model_load", name=name, cause=f"{type(err).__name__}: {err}"))
        return None
    return store["models"][name]


def require_model():
    """get_model() or stop the page (the error is already shown)."""
    lm = get_model()
    if lm is None:
        st.stop()
    return lm


@st.cache_resource(show_spinner=False)
def _batch_server(name: str, _lm) -> BatchServer:
    return BatchServer(_lm)


def batch_server(lm) -> BatchServer:
    """The server's one BatchServer for this model (its engine thread runs while requests are active)."""
    return _batch_server(lm.name, lm)


# ---------------------------------------------------------------------------------------------
# Using it: the model lock, decodes, measurements
# ---------------------------------------------------------------------------------------------

@contextmanager
def model_session(busy_note=None, quiet_s: float = 0.0):
    """Hold the model lock; tell the learner when another session holds it for longer than quiet_s."""
    lock = model_lock()
    acquired = lock.acquire(timeout=quiet_s) if quiet_s > 0 else lock.acquire(blocking=False)
    if not acquired:
        note = (busy_note or st).info(t("model_busy"))
        if not lock.acquire(timeout=300):
            raise TimeoutError(t("model_busy_timeout"))
        note.empty()
    try:
        yield
    finally:
        lock.release()


def call_model(fn, *args, **kwargs):
    """Run fn(*args, **kwargs) under the model lock. Errors become st.error, never a traceback."""
    try:
        with model_session():
            return fn(*args, **kwargs)
    except sd.SpecDecError as err:
        st.error(t("err_input", cause=str(err)))
    except Exception as err:
        st.error(t("err_model", cause=f"{type(err).__name__}: {err}"))
    return None


@contextmanager
def live_decoding(busy_note=None):
    """Around a page's live decodes: in `lock` mode the whole block holds the model lock, as before;
    in `batched` mode nothing is held here (`next_event` takes the lock per step where needed)."""
    if decode_mode() == "lock":
        with model_session(busy_note):
            yield
    else:
        yield


def stream(lm, prompt, config: "sd.GenerationConfig"):
    """The step events of one decode: the batch server's (ar/spec in batched mode: the request is
    submitted now and decodes in the server's thread), else `sd.stream`'s. Read it with `next_event`."""
    if batched(config, lm):
        return batch_server(lm).stream(prompt, config)
    return sd.stream(lm, prompt, config, history=suffix_history() if recalls(config) else None)


def next_event(events, lm, config: "sd.GenerationConfig", busy_note=None):
    """The next StepEvent of a `stream` of `lm` (StopIteration at its end).

    A batched request only waits for the server. A loop of our own (nar, jacobi, a quantised copy's ar)
    in batched mode takes the model lock for this one step, as measurements and experiments on other
    pages do: they never time a forward while a window forward runs next to them (the server's forwards
    still may), and sessions take turns step by step, not race by race (ten simulated sessions' races
    took as long with this lock as without it). The note shows only when the lock stays taken for more than a
    second (e.g. a measurement on another page)."""
    if decode_mode() == "batched" and not batched(config, lm):
        with model_session(busy_note, quiet_s=1.0):
            return next(events)
    return next(events)


def check_prompt(lm, prompt: str) -> int | None:
    """Token count of a chat prompt, or None (with a warning) when it is too long to decode here."""
    if len(prompt) > MAX_PROMPT_CHARS:
        st.warning(t("prompt_too_long_chars", chars=len(prompt), limit=MAX_PROMPT_CHARS))
        return None
    try:
        n = len(lm.encode(prompt))
    except sd.SpecDecError as err:
        st.warning(t("err_input", cause=str(err)))
        return None
    if n > MAX_PROMPT_TOKENS:
        st.warning(t("prompt_too_long", tokens=n, limit=MAX_PROMPT_TOKENS))
        return None
    return n


@st.cache_data(show_spinner=False, max_entries=256)
def _cached_generate(name: str, prompt: str, config_items: tuple):
    lm = _model_store()["models"][name]
    config = sd.GenerationConfig(**dict(config_items))
    if batched(config):
        return batch_server(lm).generate(prompt, config)
    with model_session():
        return sd.generate(lm, prompt, config)


def generate(lm, prompt: str, config: "sd.GenerationConfig"):
    """sd.generate's result (through the batch server or under the lock), cached across sessions per
    (model, prompt, config); a suffix decode, which recalls earlier answers, runs each time with this
    session's history. Returns a GenerationResult or None after showing the error."""
    if recalls(config):
        return call_model(sd.generate, lm, prompt, config, history=suffix_history())
    items = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in vars(config).items()))
    try:
        return _cached_generate(lm.name, prompt, items)
    except sd.SpecDecError as err:
        st.error(t("err_input", cause=str(err)))
    except Exception as err:
        st.error(t("err_model", cause=f"{type(err).__name__}: {err}"))
    return None


@st.cache_resource(show_spinner=False)
def _cost_models() -> dict:
    return {"lock": threading.Lock()}


def drafter_problem(lm, name: str) -> str | None:
    """Why drafter `name` cannot run on `lm` (a trained drafter whose weights are not shipped yet), or
    None. A look at the weights manifest, not a drafter build: the page asks on every rerun. Only trained
    drafters can lack something, and never on `tiny`, whose drafters get seeded weights, not files."""
    if name not in sd.drafters.TRAINED or lm.name == "tiny":
        return None
    try:
        sd.drafters.weights.entry(lm.name, name)
    except sd.SpecDecError as err:
        return str(err)
    return None


def cost_model(lm):
    """This machine's cost model (forward times per token count, drafter step costs), measured
    once per server and model, under the model lock; other sessions wait for that one measurement.
    A trained drafter without weights is left out (the page says why) and measured once they exist."""
    store = _cost_models()
    usable = [d for d in sd.drafters.TRAINED if drafter_problem(lm, d) is None]
    if lm.name not in store:
        with st.spinner(t("measuring_costs")), store["lock"]:
            if lm.name not in store:
                def measure():
                    timed = {name: drafter_factory(lm, name) for name in ("ngram", "early-exit", "quant", *usable)}
                    return sd.costmodel.measure_cost_model(lm, tokens=(1, 2, 3, 4, 5, 6, 8, 12, 17), repeats=3,
                                                           drafters=timed)
                result = call_model(measure)
                if result is None:
                    return None
                store[lm.name] = result
    cm = store[lm.name]
    late = [d for d in usable if d not in cm.draft_step_s]  # weights that appeared after the measurement
    if late:
        with st.spinner(t("measuring_costs")), store["lock"]:
            for name in late:
                seconds = call_model(sd.costmodel.measure_draft_step, lm, drafter_factory(lm, name))
                if seconds is not None:
                    cm.draft_step_s[name] = seconds
    return cm


@st.cache_resource(show_spinner=False)
def result_store() -> dict:
    """Server-wide store for measurements that take long (batch timings, cost tables): key -> value."""
    return {}
