"""The race page's shipped traces (app/traces/, recorded by scripts/record_traces.py): they load with
the current schema, every prompt has its four lanes, and the exact lanes emit exactly what AR emits.
No model needed: traces are plain data. SPECDEC_TRACES_CHECK=<folder> checks a freshly recorded
folder instead (e.g. `record_traces.py --out /tmp/traces` before copying it over app/traces)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import specdec_core as sd
from specdec_core.drafters import DRAFTERS
from specdec_core.trace import SCHEMA_VERSION

TRACES = Path(os.environ.get("SPECDEC_TRACES_CHECK") or Path(__file__).resolve().parent.parent / "app" / "traces")
LANES = {"ar": "ar", "nar": "nar", "jacobi": "jacobi", "spec": "spec"}  # lane -> mode
MAX_TOTAL_BYTES = 1_000_000


def _index() -> list[dict]:
    return json.loads((TRACES / "index.json").read_text(encoding="utf-8"))


INDEX = _index() if (TRACES / "index.json").exists() else []


def test_index_shape():
    assert len(INDEX) >= 4, "app/traces/index.json should list at least 4 prompts (run: make traces)"
    ids = [e["id"] for e in INDEX]
    assert len(ids) == len(set(ids)), "duplicate prompt ids"
    assert len({e["category"] for e in INDEX}) >= 4, "prompts should cover different categories"
    for entry in INDEX:
        assert set(entry["title"]) >= {"zh", "en"} and all(entry["title"].values())
        assert entry["prompt"].strip()
        assert entry["drafter"] in DRAFTERS
        assert set(entry["lanes"]) == set(LANES), entry["id"]
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in e["prompt"]) for e in INDEX), "one prompt should be Chinese"


def test_files_are_small_and_listed():
    files = sorted(p.relative_to(TRACES).as_posix() for p in TRACES.rglob("*.json") if p.name != "index.json")
    listed = sorted(path for e in INDEX for path in e["lanes"].values())
    assert files == listed, "every trace file is listed in index.json and every listed file exists"
    total = sum(p.stat().st_size for p in TRACES.rglob("*.json"))
    assert total < MAX_TOTAL_BYTES, f"shipped traces take {total} bytes"


@pytest.mark.parametrize("entry", INDEX, ids=[e["id"] for e in INDEX])
def test_lanes_load_and_exact_lanes_match_ar(entry):
    traces = {lane: sd.Trace.load(TRACES / path) for lane, path in entry["lanes"].items()}
    for lane, trace in traces.items():
        assert trace.schema_version == SCHEMA_VERSION
        assert trace.mode == LANES[lane]
        assert trace.prompt == entry["prompt"]
        assert trace.steps and trace.steps[0].kind == "prefill"
        assert trace.output_ids, f"{entry['id']}/{lane} emitted nothing"
        # The steps replay to the output: what the race page animates is what was decoded.
        assert [t.id for s in trace.steps for t in s.emitted] == trace.output_ids, f"{entry['id']}/{lane}"
    assert traces["spec"].drafter == entry["drafter"] == traces["spec"].config["drafter"]
    assert traces["nar"].config["window"] >= 2 and traces["jacobi"].config["window"] >= 2
    ar = traces["ar"]
    for lane in ("jacobi", "spec"):
        assert traces[lane].output_ids == ar.output_ids, f"{entry['id']}: {lane} differs from ar"
        assert traces[lane].text == ar.text
    # Every lane starts from the same prompt tokens and the same first token.
    assert len({tuple(t.prompt_ids) for t in traces.values()}) == 1
    assert len({t.output_ids[0] for t in traces.values()}) == 1
    # Speculative decoding should need fewer target forwards than AR on the shipped prompts.
    assert traces["spec"].steps[-1].target_forwards < ar.steps[-1].target_forwards or len(ar.output_ids) <= 2
