"""Serving many requests at once: batched speculative decoding, continuous batching, schedulers.

`engine.py` (continuous batching over the core's packed forward, `batch.py`) → `schedulers.py` (who
verifies how many drafts) with `costs.py` (the measured cost table, handed to the scheduler) →
`server.py` (the thread-safe front the app's sessions share). The load test that measures it lives in
`bench/loadtest.py`.
"""
from .costs import CostTable, measure_cost_table
from .engine import Request, ServingEngine, serving_drafter
from .schedulers import SCHEDULERS, Candidate, Scheduler, make_scheduler, prefix_survival

__all__ = ["SCHEDULERS", "Candidate", "CostTable", "Request", "Scheduler", "ServingEngine", "make_scheduler",
           "measure_cost_table", "prefix_survival", "serving_drafter"]
