"""specdec_core: a real, exact, observable speculative-decoding engine.

Layout: models (load target), target (forward/rollback), sampling (p = target, q = draft),
drafters/ (one file each), decode (the decode loops), trace (plain-data steps), metrics, theory,
costmodel, experiments (the registry the quiz and notebooks share), cli.
"""
from . import offline  # noqa: F401  (first: no code path may reach a hub)
from . import costmodel, experiments, theory
from .errors import SpecDecError
from .decode import MODES, DecodeState, GenerationConfig, GenerationResult, generate, stream
from .models import MODEL_NAMES, LoadedModel, load_model
from .sampling import SamplingParams
from .trace import StepEvent, Token, Trace

__all__ = ["MODES", "MODEL_NAMES", "DecodeState", "GenerationConfig", "GenerationResult", "LoadedModel",
           "SamplingParams", "SpecDecError", "StepEvent", "Token", "Trace", "generate", "load_model", "stream",
           "costmodel", "experiments", "theory"]
