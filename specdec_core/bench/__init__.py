"""Measuring the engine: interleaved benchmarks, the cost profile, the load test and the HTML report.

`run.py` (`bench`: modes interleaved per prompt, speedups as same-run ratios, peers from transformers) ·
`loadtest.py` (per-user speed against aggregate throughput, and the scheduler replay) · `cli.py` (the
`load-test` and `profile` commands: forward costs, draft steps, bandwidth; `--serving`: the batched cost
table) · `report.py` (`report`: one offline HTML page from result files). Sits above
`serving/` and `training/`; only the course and the CLI import it.
"""
