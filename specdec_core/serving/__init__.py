"""Serving many requests at once: batched speculative decoding, continuous batching, schedulers, load tests.

`batch.py` (one packed forward over a ragged KV cache) → `engine.py` (continuous batching) →
`schedulers.py` (who verifies how many drafts) with `costs.py` (the measured cost table) →
`loadtest.py` (the experiment: per-user speed vs aggregate throughput, and the replay).
"""
from .batch import RaggedCache, batch_forward
from .costs import CostTable, measure_cost_table
from .engine import Request, ServingEngine, serving_drafter
from .schedulers import SCHEDULERS, Candidate, Scheduler, make_scheduler, prefix_survival

__all__ = ["SCHEDULERS", "Candidate", "CostTable", "RaggedCache", "Request", "Scheduler", "ServingEngine",
           "batch_forward", "make_scheduler", "measure_cost_table", "prefix_survival", "serving_drafter"]
