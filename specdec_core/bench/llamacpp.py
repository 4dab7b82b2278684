"""`llamacpp:ar`: llama.cpp on the same GGUF as a peer row for raw CPU speed.

Users who want tokens per second on a CPU run llama.cpp; this row says how far our teaching engine is from
it on the same file, the same prompts and the same thread count. It goes through the PyPI binding
`llama-cpp-python` (its `Llama` class: the same C++ decode loop llama.cpp's own tools run), which
compiles llama.cpp on install, so it is not part of `make setup`: `make llamacpp` installs it (~12 minutes
on 2 cores). The prompt is our tokenizer's chat-templated token ids, passed as ids, so both engines start
from the same tokens; the KV cache is reset before every request, so no run reuses another's prefill.
"""
from __future__ import annotations

import time

from ..decode import GenerationConfig
from ..errors import SpecDecError
from ..models import LoadedModel, gguf_path

MODES = ("llamacpp:ar",)
CONTEXT = 4096  # tokens: the suite's longest multi-turn prompt plus its answers fits with room to spare


def available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def version() -> str | None:
    """The installed binding's version, or None."""
    if not available():
        return None
    import llama_cpp

    return llama_cpp.__version__


def require() -> None:
    """A one-line error before any long run when the binding is missing."""
    if not available():
        raise SpecDecError("llamacpp:ar needs llama-cpp-python: run `make llamacpp` (it compiles llama.cpp, ~12 min)")


class LlamaCppRunner:
    """llama.cpp greedy/sampled decoding of the target's GGUF, built on first use with the target's threads."""

    def __init__(self, lm: LoadedModel, threads: int) -> None:
        if lm.name != "smollm2-135m":
            raise SpecDecError(f"llamacpp:ar runs the smollm2-135m GGUF only (the model here is {lm.name})")
        self.lm = lm
        self.threads = threads
        self._llama = None

    def llama(self):
        if self._llama is None:
            require()
            from llama_cpp import Llama

            self._llama = Llama(model_path=str(gguf_path()), n_ctx=CONTEXT, n_threads=self.threads,
                                n_threads_batch=self.threads, verbose=False)
        return self._llama

    def generate(self, prompt_ids: list[int], config: GenerationConfig) -> tuple[list[int], float]:
        """New token ids and wall seconds (prefill + decode) for one greedy prompt."""
        if not config.sampling.greedy:
            raise SpecDecError("llamacpp:ar is compared greedy only (its samplers are not ours): use --temperature 0")
        llama = self.llama()
        llama.reset()  # no prefix reuse from the previous request
        stops = set(self.lm.eos_token_ids)
        start = time.perf_counter()
        ids: list[int] = []
        for token in llama.generate(prompt_ids, reset=True, temp=0.0, top_k=1, repeat_penalty=config.repetition_penalty):
            if token in stops:
                break
            ids.append(token)
            if len(ids) >= config.max_new_tokens:
                break
        return ids, time.perf_counter() - start
