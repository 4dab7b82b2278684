"""Measuring the engine: interleaved benchmarks, the cost profile, the load test and the HTML report.

`run.py` (`bench`: modes interleaved per prompt, speedups as same-run ratios, peers from transformers) ·
`modes.py` (the mode grammar, `spec:eagle@tree=dynamic`, which `bench` and `generate` share) ·
`loadtest.py` (per-user speed against aggregate throughput) · `replay.py` (the schedulers on a load test's
recorded drafts, in simulated time) · `report.py`
(`report`: one offline HTML page from result files) · against any OpenAI-compatible server:
`remote_client.py` (one streamed request), `remote_counters.py` (the server's speculative counters),
`remote.py` (`bench --endpoint`), `remote_load.py` (`load-test --endpoint`) · `commands.py` (the `bench`, `profile`, `report` and
`load-test` commands: their options and handlers; `profile`: forward costs, draft steps, bandwidth,
`--serving` the batched cost table). Sits above `serving/` and `training/`; only the course and the shell
import it.
"""
