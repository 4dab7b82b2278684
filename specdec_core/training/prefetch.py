"""Online features a few steps ahead, in other processes (`train-draft --features online --feature-workers N`).

With online features each batch starts with the target's forward over its 8 sequences (~5 s on one
core), and a joint run of the five kinds then takes their own steps on it (~8 s, BENCHMARKS §11).
Both are one-thread work that splits badly over two threads, so instead of paying their sum on one
core, worker processes — one thread and a model each — build the batches of the coming steps while
this process trains on the current one: a step costs about the larger of the two.

A batch is a function of (corpus, seed, step) alone (`batches.batch_at`), and every process runs one
thread, so the batches are the same tensors whoever builds them and the weights are the same bits as
a one-thread run that builds its own (tested).
"""
from __future__ import annotations

import multiprocessing
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import SpecDecError
from ..models import LoadedModel, load_model
from .batches import Batch, Sequence, batch_at, load_splits
from .corpus import load_corpus


@dataclass(frozen=True)
class TrainSplit:
    """What a worker needs to rebuild the training sequences: the corpus cut and the layers to capture."""

    folder: str
    shards: int
    tokens: int
    layers: tuple[int, ...]


# The worker's training sequences, with online features over its own model (spawned: no torch state is forked).
_WORKER_TRAIN: list[Sequence] | None = None


def _start_worker(model: str, device: str, split: TrainSplit) -> None:
    global _WORKER_TRAIN
    torch.set_num_threads(1)
    lm = load_model(model, device, "float32")
    corpus = load_corpus(Path(split.folder), split.shards, split.tokens)
    _WORKER_TRAIN, _ = load_splits(lm, corpus, split.layers, "online")


def _batch_in_worker(step: int, batch_size: int, seed: int) -> Batch:
    assert _WORKER_TRAIN is not None, "the worker's initializer loads the corpus"
    return batch_at(_WORKER_TRAIN, step, batch_size, seed)


class Prefetcher:
    """The batches of `steps` (data steps, asked for in order), built by `workers` processes, each
    keeping one batch in flight ahead of the one being trained on."""

    def __init__(self, lm: LoadedModel, split: TrainSplit, steps: range, batch_size: int, seed: int, workers: int = 1):
        if workers < 1:
            raise SpecDecError(f"feature-workers must be >= 1 (got {workers})")
        self.steps, self.batch_size, self.seed, self.ahead = iter(steps), batch_size, seed, workers + 1
        context = multiprocessing.get_context("spawn")
        self.pool = ProcessPoolExecutor(workers, context, _start_worker, (lm.name, str(lm.device), split))
        self.in_flight: deque[tuple[int, Future]] = deque()

    def _top_up(self) -> None:
        while len(self.in_flight) < self.ahead:
            step = next(self.steps, None)
            if step is None:
                return
            self.in_flight.append((step, self.pool.submit(_batch_in_worker, step, self.batch_size, self.seed)))

    def batch(self, step: int) -> Batch:
        self._top_up()
        if not self.in_flight or self.in_flight[0][0] != step:
            expected = self.in_flight[0][0] if self.in_flight else "none"
            raise SpecDecError(f"prefetched batches are taken in order: asked for step {step}, next is {expected}")
        _, future = self.in_flight.popleft()
        self._top_up()  # the next batch starts before this one is trained on
        return future.result()

    def close(self) -> None:
        for _, future in self.in_flight:
            future.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
