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
from specdec_core.course.quiz import SCHEMA_PATH, Answer, Question, QuizError, bounds_of, load_bank, questions_for
from specdec_core.theory import R_FLOOR

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


def test_every_key_stays_inside_its_bounds_and_every_predict_then_run_key_has_them():
    bank = load_bank()
    assert not quiz_keys.out_of_bounds(bank), "\n".join(map(str, quiz_keys.out_of_bounds(bank)))
    assert not quiz_keys.unbounded(bank), "declare answer.bounds (lessons/quiz/schema.json) for these"


def test_a_speed_question_keys_a_computed_speedup_not_a_timing():
    """Issue 52 §3: a question about speed gives τ, r and c in its stem; only counts are predict-then-run."""
    timed = {"ngram_speedup_copy", "ngram_speedup_story", "eagle_speedup_chat", "verify_cost_ratio_k4"}
    bank = {q.id: q for q in load_bank()}
    for qid in ("q03-verify-cost", "q04-ngram-story", "q08-copy-speedup", "q13-eagle-speedup-chat"):
        assert bank[qid].experiment is None and bank[qid].answer.bounds == (0.0, 5.0), qid
    assert not [q.id for q in bank.values() if q.experiment in timed]


def test_bounds_follow_the_physics():
    assert bounds_of({"quantity": "tau", "k": 4}) == (1.0, 5.0)
    assert bounds_of({"quantity": "speedup", "k": 3}) == (0.0, 4.0)
    assert bounds_of({"quantity": "r"})[0] == R_FLOOR and bounds_of({"quantity": "r", "k": 4}) == (R_FLOOR, 5.0)
    assert bounds_of({"quantity": "fraction"}) == (0.0, 1.0)
    assert bounds_of({"quantity": "ratio", "low": 0.2, "high": 5}) == (0.2, 5)
    assert bounds_of({"quantity": "tau", "k": 4, "high": 3}) == (1.0, 3)  # low/high only narrow


QUESTION_YAML = """\
- id: q08-copy-speedup
  type: numeric
  difficulty: mid
  lesson: 08-applications
  tags: [speedup]
  source: new
  prompt: {{zh: 题, en: q}}
  answer: {{value: {value}, tolerance: {tolerance}, bounds: {bounds}}}
  explanation: {{zh: 解, en: x}}
"""


def _bank_in(folder: Path, value: float, tolerance: float, bounds: str = "{quantity: speedup, k: 4}"):
    folder.mkdir(exist_ok=True)
    (folder / "08-applications.yaml").write_text(QUESTION_YAML.format(value=value, tolerance=tolerance, bounds=bounds))
    return load_bank(folder, SCHEMA_PATH)


def test_a_key_outside_its_bounds_is_rejected(tmp_path, monkeypatch, capsys):
    """Negative control: the old q08 key, 4.0 ± 2.5, accepts 6.5× at k = 4, above k + 1 = 5."""
    bank = _bank_in(tmp_path / "quiz", 4.0, 2.5)
    (out,) = quiz_keys.out_of_bounds(bank)
    assert (out.question, out.high, out.bound_high) == ("q08-copy-speedup", 6.5, 5.0)
    assert "outside the bounds 0–5" in str(out)
    monkeypatch.setattr(quiz_keys, "load_bank", lambda: bank)
    assert quiz_keys.main([]) == 1
    assert "KEY LEAVES ITS BOUNDS  q08-copy-speedup" in capsys.readouterr().out
    assert not quiz_keys.out_of_bounds(_bank_in(tmp_path / "quiz", 3.53, 0.15))  # the computed key passes
    tau = _bank_in(tmp_path / "quiz", 1.04, 0.06, "{quantity: tau, k: 4}")  # tau below 1
    assert [o.question for o in quiz_keys.out_of_bounds(tau)] == ["q08-copy-speedup"]
    r = _bank_in(tmp_path / "quiz", 0.9, 0.3, "{quantity: r}")  # r below R_FLOOR: a slow one-token step
    assert quiz_keys.out_of_bounds(r)[0].bound_low == R_FLOOR
    with pytest.raises(QuizError, match="bounds"):  # a tau or a speedup needs its k
        _bank_in(tmp_path / "quiz", 2.0, 0.1, "{quantity: tau}")


def test_a_predict_then_run_key_without_bounds_fails(monkeypatch, capsys):
    q = _question(4.0, 1.0)
    assert quiz_keys.unbounded([q]) == ["q08-copy-speedup"]
    monkeypatch.setattr(quiz_keys, "load_bank", lambda: [q])
    monkeypatch.setattr(quiz_keys, "recorded_values", lambda: {"ngram_speedup_copy": [("t", 4.0)]})
    assert quiz_keys.main([]) == 1
    assert "PREDICT-THEN-RUN KEY WITHOUT BOUNDS  q08-copy-speedup" in capsys.readouterr().out


def test_a_measurement_outside_its_bounds_is_reported():
    q = Question("q08-copy-speedup", "numeric", "mid", "08-applications", ("t",), "new", {"zh": "中", "en": "x"},
                 {"zh": "中", "en": "x"}, answer=Answer(4.0, 1.0, bounds=(0.0, 5.0)), experiment="ngram_speedup_copy")
    (found,) = quiz_keys.impossible([q], {"ngram_speedup_copy": [("en/06-speedup, Test CPU", 6.18), ("b", 3.9)]})
    assert found.value == 6.18


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
    q = next(q for q in bank if q.experiment == "sim_tau_a07_k4")
    cached = tmp_path / "experiments" / "smollm2-135m-sim_tau_a07_k4.json"

    def cache(value: float, version: int = CACHE_VERSION) -> None:
        cached.write_text(json.dumps({"name": q.experiment, "value": value, "fingerprint": {"version": version}}))

    cache(q.answer.value)
    assert quiz_keys.main(["--cache"]) == 0
    cache(q.answer.value + q.answer.tolerance + 1)
    assert quiz_keys.main(["--cache"]) == 1
    assert f"KEY EXCLUDES ITS MEASUREMENT  {q.id}" in capsys.readouterr().out
    cache(q.answer.value + q.answer.tolerance + 1, version=CACHE_VERSION - 1)  # another cache version: not this run's
    assert quiz_keys.main(["--cache"]) == 0
