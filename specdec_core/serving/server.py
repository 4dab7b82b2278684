"""A serving engine behind one thread, for many callers in one process (the app's learners).

Each caller submits a request and reads its step events as the engine produces them; the engine
thread steps while any request is active, so requests that overlap in time share every target
forward instead of queueing behind one lock. Requests keep the one-request loop's drafters and verify
lengths (`scheduler="fixed"` and decode's own drafters, e.g. the cost-aware n-gram), so what a
learner sees is what `decode.generate` gives for that prompt alone, step for step.
"""
from __future__ import annotations

import threading
import time
from typing import Iterator

from ..decode import GenerationConfig, GenerationResult, result_of
from ..drafters import make_drafter
from ..generation import drafter_costs
from ..errors import SpecDecError
from ..models import LoadedModel
from ..trace import StepEvent
from .engine import Request, ServingEngine
from .schedulers import make_scheduler

MODES = ("ar", "spec")  # what the engine batches; nar and jacobi run their own loops


def decode_drafter(lm: LoadedModel, config: GenerationConfig, survival=None):
    """A request's drafter exactly as `generation.generate` builds it (the drafter keeps its own verify length),
    with this machine's costs (measured at the first request that needs them, then reused by the process)."""
    return make_drafter(config.drafter, lm, config, drafter_costs(lm, config.drafter, config.sized_tree, config.drafter_options))


class BatchServer:
    """Thread-safe front of one ServingEngine. `stream` and `generate` mirror `decode.stream` / `decode.generate`."""

    def __init__(self, lm: LoadedModel) -> None:
        self.lm = lm
        self.engine = ServingEngine(lm, make_scheduler("fixed"), make_drafter=decode_drafter)
        self.lock = threading.Condition()
        self.thread: threading.Thread | None = None
        self.forwards_shared = 0  # decode steps that carried more than one request

    def _submit(self, prompt, config: GenerationConfig, raw: bool) -> Request:
        if config.mode not in MODES:
            raise SpecDecError(f"the batch server decodes {' or '.join(MODES)}, not {config.mode!r}")
        with self.lock:
            request = self.engine.submit(prompt, config, raw=raw, events=True)
            if request.error:
                raise SpecDecError(request.error)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._loop, name="specdec-batch-server", daemon=True)
                self.thread.start()
            self.lock.notify_all()
        return request

    def _loop(self) -> None:
        while True:
            with self.lock:
                if self.engine.idle:
                    self.thread = None
                    return
                try:
                    self.engine.step()
                except Exception as err:  # never leave callers waiting on a dead thread
                    for request in self.engine.active + self.engine.waiting:
                        request.error = f"the batch server failed: {err}"
                    self.engine.active.clear()
                    self.engine.waiting.clear()
                    self.thread = None
                    self.lock.notify_all()
                    raise
                if self.engine.steps and self.engine.steps[-1].rows > 1:
                    self.forwards_shared += 1
                self.lock.notify_all()
            time.sleep(0)  # let callers take the lock between steps

    def stream(self, prompt, config: GenerationConfig, raw: bool = False) -> Iterator[StepEvent]:
        """Yield this request's step events as the engine produces them."""
        return self._events(self._submit(prompt, config, raw))

    def _events(self, request: Request) -> Iterator[StepEvent]:
        seen = 0
        while True:
            with self.lock:
                while seen == len(request.events) and not request.done:
                    self.lock.wait(timeout=1.0)
                fresh = request.events[seen:]
                seen = len(request.events)
                if request.error:
                    raise SpecDecError(request.error)
                finished = request.done and seen == len(request.events)
            yield from fresh
            if finished:
                return

    def generate(self, prompt, config: GenerationConfig, raw: bool = False, progress=None) -> GenerationResult:
        """Decode one prompt through the shared engine; the same result object as `decode.generate`."""
        start = time.perf_counter()
        request = self._submit(prompt, config, raw)
        steps = []
        for event in self._events(request):
            steps.append(event)
            if progress:
                progress(len(request.output_ids))
        wall = time.perf_counter() - start
        kv_bytes = self.engine.cache.bytes_per_token() * (len(request.state.tokens) - 1)
        return result_of(self.lm, prompt, config, request.state, steps, wall, kv_bytes,
                         ttft_s=request.deliveries[0][0] - request.arrival_s)
