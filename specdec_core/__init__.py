"""specdec_core: a real, exact, observable speculative-decoding engine.

Layout: models (load target), target (forward/rollback), sampling (p = target, q = draft),
drafters/ (one file each; trained weights in weights/), decode (the decode loops), serving/ (many
requests per forward: batched decoding, schedulers, load tests), training/ (data, training and
offline evaluation of drafters), trace (plain-data steps), metrics, theory, costmodel, experiments
(the registry the quiz and notebooks share), bench, report, cli.

Names are imported lazily (PEP 562): `from specdec_core.trace import Trace` or `sd.theory` must not
pay for importing torch and transformers, so the app's first page opens at once.
"""
from importlib import import_module

from . import offline  # noqa: F401  (first: no code path may reach a hub)

_NAMES = {
    "SpecDecError": "errors",
    "MODES": "decode", "DecodeState": "decode", "GenerationConfig": "decode", "GenerationResult": "decode",
    "generate": "decode", "stream": "decode",
    "MODEL_NAMES": "models", "LoadedModel": "models", "load_model": "models",
    "SamplingParams": "sampling",
    "StepEvent": "trace", "Token": "trace", "Trace": "trace",
}
_MODULES = ("bench", "cli", "costmodel", "decode", "drafters", "errors", "experiments", "metrics", "models", "quiz",
            "report", "sampling", "serving", "target", "theory", "trace", "training")

__all__ = sorted([*_NAMES, *_MODULES])


def __getattr__(name: str):
    if name in _NAMES:
        value = getattr(import_module(f".{_NAMES[name]}", __name__), name)
    elif name in _MODULES:
        value = import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'specdec_core' has no attribute {name!r}")
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value
