"""Predict-then-run answers against what their experiments measured (`specdec_core.course.quiz_keys`).

A key whose accepted range excludes the measured value grades a correct prediction wrong. Here the
keys are checked against the values kept by the recorded lesson outputs; `make test` checks them
again, after the notebooks, against the values that run computed (`quiz_keys --cache`).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec_core.course import lesson_outputs as lo
from specdec_core.course import quiz_keys
from specdec_core.course.experiments import CACHE_VERSION
from specdec_core.course.quiz import Answer, Question, load_bank, questions_for

ROOT = Path(__file__).resolve().parents[1]
LESSONS = [(lang, md.stem) for lang in ("zh", "en") for md in sorted((ROOT / "lessons" / lang).glob(lo.LESSON_GLOB))]


def test_every_predict_then_run_key_covers_its_recorded_measurements():
    bank, values = load_bank(), quiz_keys.recorded_values()
    assert not quiz_keys.unmeasured(bank, values), "no recorded value: run `make lesson-outputs` for their lessons"
    found = quiz_keys.misses(bank, values)
    assert not found, "\n".join(map(str, found))


@pytest.mark.parametrize("lang,stem", LESSONS, ids=[f"{lang}/{stem}" for lang, stem in LESSONS])
def test_each_recording_keeps_the_values_of_its_experiments(lang, stem):
    recorded = lo.load(lang, stem)
    assert recorded is not None
    cells = lo.code_cells((ROOT / "lessons" / lang / f"{stem}.md").read_text(encoding="utf-8"))
    wanted = {name for cell in cells for name in lo.experiments_named(cell)}
    wanted |= {q.experiment for q in questions_for(stem) if q.experiment}
    missing = wanted - set(recorded.experiments)
    assert not missing, f"{lang}/{stem} recorded no value for {sorted(missing)}: run `make lesson-outputs ONLY={stem}`"


def _question(value: float, tolerance: float) -> Question:
    bi = {"zh": "中", "en": "x"}
    return Question("q08-copy-speedup", "numeric", "mid", "08-applications", ("t",), "new", bi, bi,
                    answer=Answer(value, tolerance), experiment="ngram_speedup_copy")


def _recording(folder: Path, value: float) -> None:
    body = {"machine": "Test CPU", "date": "2026-12-03", "commit": "x", "cells": {},
            "experiments": {"ngram_speedup_copy": value}}
    (folder / "en").mkdir(parents=True)
    (folder / "en" / "08-applications.json").write_text(json.dumps(body))


def test_a_key_that_excludes_its_measurement_fails(tmp_path):
    """Negative control: the old q08 key (2.5 ± 1.0) against the 4.38× a recording measured."""
    _recording(tmp_path, 4.38)
    values = quiz_keys.recorded_values(tmp_path)
    assert values == {"ngram_speedup_copy": [("en/08-applications, Test CPU", 4.38)]}
    (miss,) = quiz_keys.misses([_question(2.5, 1.0)], values)
    assert (miss.question, miss.value, miss.high) == ("q08-copy-speedup", 4.38, 3.5)
    assert not quiz_keys.misses([_question(4.0, 1.0)], values)
    assert quiz_keys.unmeasured([_question(4.0, 1.0)], {}) == ["q08-copy-speedup"]


def test_the_ci_check_reads_this_runs_cache(tmp_path, monkeypatch, capsys):
    """`quiz_keys --cache` passes on the values this run computed and fails on one the key excludes."""
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    (tmp_path / "experiments").mkdir()
    bank = load_bank()
    q = next(q for q in bank if q.experiment == "ngram_speedup_copy")
    cached = tmp_path / "experiments" / "smollm2-135m-ngram_speedup_copy.json"

    def cache(value: float, version: int = CACHE_VERSION) -> None:
        cached.write_text(json.dumps({"name": q.experiment, "value": value, "fingerprint": {"version": version}}))

    cache(q.answer.value)
    assert quiz_keys.main(["--cache"]) == 0
    cache(q.answer.value + q.answer.tolerance + 1)
    assert quiz_keys.main(["--cache"]) == 1
    assert f"KEY EXCLUDES ITS MEASUREMENT  {q.id}" in capsys.readouterr().out
    cache(q.answer.value + q.answer.tolerance + 1, version=CACHE_VERSION - 1)  # another cache version: not this run's
    assert quiz_keys.main(["--cache"]) == 0
