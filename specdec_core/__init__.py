"""specdec_core: a real, exact, observable speculative-decoding engine.

Layers, top to bottom; each imports only from the layers below it (`scripts/check_layers.py` checks it):

    course/      experiments (the registry the quiz and notebooks share), quiz, lesson outputs
    bench/       bench, profile, load test, report
    training/    data, training and offline evaluation of drafters (generates through serving/)
    serving/     many requests per forward: continuous batching, schedulers, the cost table
    generation   the front door: generate / stream by drafter name, with this machine's measured costs;
                 options (the command line's shared options, and the GenerationConfig they become)
    drafters/    one file per drafter, one registry (`make_drafter`), trained weights in weights/
    core         decode (the loops), drafting (the drafter interface and the shared draft loop),
                 trees/ (draft trees: shape, which nodes, verification), kernels/ (which matmul kernel each
                 row count takes: this machine's measured kernel table), target, llama, batch, quant, sampling,
                 costmodel, guard (flags for impossible numbers), trace, metrics, theory, models
    leaves       suite (prompt files), provenance (commit, machine), errors, offline

`cli.py` is the shell over all of them: it assembles the commands each subsystem declares in its
`commands.py` (the engine's own, `generate` and `prepare`, in this package's); nothing imports it.

Names are imported lazily (PEP 562): `from specdec_core.trace import Trace` or `sd.theory` must not
pay for importing torch and transformers, so the app's first page opens at once.
"""
import importlib.abc
import importlib.util
import sys
from importlib import import_module

from . import offline  # noqa: F401  (first: no code path may reach a hub)

_NAMES = {
    "SpecDecError": "errors",
    "MODES": "decode", "DecodeState": "decode", "GenerationConfig": "decode", "GenerationResult": "decode",
    "generate": "generation", "stream": "generation",
    "MODEL_NAMES": "models", "LoadedModel": "models", "load_model": "models",
    "SamplingParams": "sampling",
    "StepEvent": "trace", "Token": "trace", "Trace": "trace",
}
_MODULES = ("batch", "bench", "cli", "costmodel", "course", "decode", "drafters", "drafting", "errors", "generation",
            "guard", "kernels", "metrics", "models", "provenance", "sampling", "serving", "suite", "target", "theory", "trace", "training",
            "trees")
# Modules that moved when the package grew layers: learners' notebooks (and the lessons) import them
# by their old names (`from specdec_core.quiz import quiz_widget`, `sd.experiments.run`), which keep working.
_MOVED = {"quiz": "course.quiz", "experiments": "course.experiments", "lesson_outputs": "course.lesson_outputs",
          "report": "bench.report", "serving.loadtest": "bench.loadtest", "serving.batch": "batch",
          "bench.cli": "bench.commands", "training.cli": "training.data"}  # training.cli: smoke_corpus (lesson 13)

__all__ = sorted([*_NAMES, *_MODULES, *(name for name in _MOVED if "." not in name)])


def __getattr__(name: str):
    if name in _NAMES:
        value = getattr(import_module(f".{_NAMES[name]}", __name__), name)
    elif name in _MODULES:
        value = import_module(f".{name}", __name__)
    elif name in _MOVED:
        value = import_module(f".{_MOVED[name]}", __name__)
    else:
        raise AttributeError(f"module 'specdec_core' has no attribute {name!r}")
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import specdec_core.quiz` (an old path) binds the module at its new place, not a copy of it."""

    def find_spec(self, fullname, path, target=None):
        old = fullname.removeprefix(f"{__name__}.")
        return importlib.util.spec_from_loader(fullname, self) if old in _MOVED else None

    def create_module(self, spec):
        return import_module(f".{_MOVED[spec.name.removeprefix(f'{__name__}.')]}", __name__)

    def exec_module(self, module) -> None:
        """Already executed at its new place."""


sys.meta_path.append(_MovedFinder())
