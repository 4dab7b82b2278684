"""The app's model: loaded once per server, shared by every session, every model call under one lock
(each generate/stream call still builds its own DecodeState)."""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager

import streamlit as st

from common import t  # (importing common also puts the repository root on sys.path)

import specdec_core as sd

MAX_PROMPT_TOKENS = 2000
MAX_PROMPT_CHARS = 20000  # refuse before tokenising something absurd


def model_name() -> str:
    """The app's model (tests: SPECDEC_APP_MODEL=tiny)."""
    return os.environ.get("SPECDEC_APP_MODEL", "smollm2-135m")


# ---------------------------------------------------------------------------------------------
# Loading: once per server
# ---------------------------------------------------------------------------------------------

@st.cache_resource(show_spinner=False)
def _model_store() -> dict:
    # One per server: the loaded models, a lock that serialises model calls across sessions, and a
    # lock for loading.
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


# ---------------------------------------------------------------------------------------------
# Using it: the model lock, decodes, measurements
# ---------------------------------------------------------------------------------------------

@contextmanager
def model_session(busy_note=None):
    """Hold the model lock; tell the learner when another session is decoding first."""
    lock = model_lock()
    if not lock.acquire(blocking=False):
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
    with model_session():
        return sd.generate(lm, prompt, sd.GenerationConfig(**dict(config_items)))


def generate(lm, prompt: str, config: "sd.GenerationConfig"):
    """sd.generate under the lock, cached across sessions per (model, prompt, config).

    Returns a GenerationResult or None after showing the error."""
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


def cost_model(lm):
    """This machine's cost model (forward times per token count, drafter step costs), measured
    once per server and model, under the model lock; other sessions wait for that one measurement."""
    store = _cost_models()
    if lm.name not in store:
        with st.spinner(t("measuring_costs")), store["lock"]:
            if lm.name not in store:
                def measure():
                    return sd.costmodel.measure_cost_model(lm, tokens=(1, 2, 3, 4, 5, 6, 8, 12, 17), repeats=3,
                                                           drafters=("ngram", "early-exit"))
                result = call_model(measure)
                if result is None:
                    return None
                store[lm.name] = result
    return store[lm.name]


@st.cache_resource(show_spinner=False)
def result_store() -> dict:
    """Server-wide store for measurements that take long (batch timings, cost tables): key -> value."""
    return {}
