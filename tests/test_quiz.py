"""The quiz bank (lessons/quiz/*.yaml), its JSON Schema, and the loader/grader in specdec_core.quiz.

No model is loaded here. Every test checks something that a plausible mistake in the bank or
the grader would break (the malformed-question tests prove the schema really rejects things).
"""
from __future__ import annotations

import ast
import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from specdec_core import quiz
from specdec_core.course import measures
from specdec_core.course.quiz import (
    LESSON_STEMS,
    QUIZ_DIR,
    SCHEMA_PATH,
    Answer,
    Choice,
    Question,
    QuizError,
    grade,
    load_bank,
    questions_for,
)

QUIZ_FILES = sorted(QUIZ_DIR.glob("*.yaml"))
ID_FORMAT = re.compile(r"^q(0[1-9]|1[0-4])-[a-z0-9]+(-[a-z0-9]+)*$")

# The experiments the quiz may point at. The registry lives in specdec_core.experiments
# (EXPERIMENTS); when it is importable we check against it, otherwise against this copy.
KNOWN_EXPERIMENTS = {
    "sim_tau_a07_k4",
    "sim_tau_a05_k4",
    "ngram_speedup_copy",
    "ngram_speedup_story",
    "nar_match_rate",
    "jacobi_forwards_per_token",
    "early_exit_acceptance",
    "verify_cost_ratio_k4",
    "spec_greedy_identity",
}


def registered_experiments() -> set[str]:
    try:
        from specdec_core.course.experiments import EXPERIMENTS
    except ImportError:
        return KNOWN_EXPERIMENTS
    return set(EXPERIMENTS)


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def bank() -> list[Question]:
    return load_bank()


@pytest.fixture(scope="module")
def raw_questions() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in QUIZ_FILES:
        out.extend(yaml.safe_load(path.read_text(encoding="utf-8")))
    return out


def tau(alpha: float, k: int) -> float:
    """Exact expected tokens per target forward with independent per-token acceptance."""
    return (1 - alpha ** (k + 1)) / (1 - alpha)


# ------------------------------------------------------------------ schema and files


def test_schema_is_valid_draft_2020_12(schema: dict[str, Any]) -> None:
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_schema_lesson_enum_matches_lesson_stems(schema: dict[str, Any]) -> None:
    assert schema["$defs"]["question"]["properties"]["lesson"]["enum"] == list(LESSON_STEMS)


def test_one_quiz_file_per_lesson() -> None:
    assert [p.stem for p in QUIZ_FILES] == list(LESSON_STEMS)


@pytest.mark.parametrize("path", QUIZ_FILES, ids=lambda p: p.name)
def test_file_matches_schema(path: Path, schema: dict[str, Any]) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    errors = [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(data)]
    assert errors == []
    # Each file holds the questions of the lesson it is named after.
    assert {q["lesson"] for q in data} == {path.stem}


# ------------------------------------------------------------------ bank content


def test_ids_unique_and_stable_format(bank: list[Question]) -> None:
    ids = [q.id for q in bank]
    assert len(ids) == len(set(ids))
    for q in bank:
        assert ID_FORMAT.match(q.id), q.id
        assert q.id[1:3] == q.lesson[:2], q.id  # q06-... lives in 06-speedup


def test_every_lesson_has_at_least_two_questions(bank: list[Question]) -> None:
    for stem in LESSON_STEMS:
        assert len(questions_for(stem, bank=bank)) >= 2, stem
    assert {q.lesson for q in bank} <= set(LESSON_STEMS)


def test_interview_lesson_has_its_own_questions(bank: list[Question]) -> None:
    own = [q for q in questions_for("11-interview", bank=bank) if q.source == "new"]
    assert len(own) >= 2


def test_single_choice_has_exactly_one_correct(bank: list[Question]) -> None:
    singles = [q for q in bank if q.type == "single"]
    assert singles
    for q in singles:
        assert len(q.correct_indices) == 1, q.id


def test_multi_choice_has_at_least_two_correct(bank: list[Question]) -> None:
    multis = [q for q in bank if q.type == "multi"]
    assert multis
    for q in multis:
        assert len(q.correct_indices) >= 2, q.id


def test_numeric_questions_have_answer_and_no_choices(bank: list[Question]) -> None:
    for q in bank:
        if q.type == "numeric":
            assert q.answer is not None and not q.choices and q.answer.tolerance >= 0, q.id
        else:
            assert q.answer is None and len(q.choices) >= 2, q.id


def _bilingual_fields(raw: dict[str, Any]) -> list[tuple[str, Any]]:
    fields = [("prompt", raw["prompt"]), ("explanation", raw["explanation"])]
    for i, c in enumerate(raw.get("choices", [])):
        fields += [(f"choices[{i}].text", c["text"]), (f"choices[{i}].feedback", c["feedback"])]
    return fields


def test_zh_and_en_complete_everywhere(raw_questions: list[dict[str, Any]]) -> None:
    for raw in raw_questions:
        for name, value in _bilingual_fields(raw):
            assert isinstance(value, dict) and set(value) == {"zh", "en"}, (raw["id"], name)
            for lang in ("zh", "en"):
                assert isinstance(value[lang], str) and value[lang].strip(), (raw["id"], name, lang)
        # The Chinese text is really Chinese: at least one CJK character in the prompt.
        assert re.search(r"[\u4e00-\u9fff]", raw["prompt"]["zh"]), raw["id"]


def test_latex_dollars_balanced(raw_questions: list[dict[str, Any]]) -> None:
    # An odd number of $ would swallow the rest of the text into math when rendered.
    for raw in raw_questions:
        for name, value in _bilingual_fields(raw):
            for lang in ("zh", "en"):
                assert value[lang].count("$") % 2 == 0, (raw["id"], name, lang)


def test_article_questions_all_present(bank: list[Question]) -> None:
    seed = [q for q in bank if q.source == "article"]
    tags = sorted(t for q in seed for t in q.tags if t.startswith("article-q"))
    assert tags == sorted(f"article-q{i}" for i in range(1, 11))
    assert len(seed) == 10
    # An article tag on a "new" question would mean a mislabelled source.
    assert not [q.id for q in bank if q.source == "new" and any(t.startswith("article-q") for t in q.tags)]


def test_article_answers_kept(bank: list[Question]) -> None:
    """Same correct answers as the article, same option order (A=0, B=1, ...).

    Q1-Q6 and Q9 are single choice (B, A, B, B, A, C, B); Q7 is ABD, Q8 ABC, Q10 ABD.
    """
    expected = {1: {1}, 2: {0}, 3: {1}, 4: {1}, 5: {0}, 6: {2}, 7: {0, 1, 3}, 8: {0, 1, 2}, 9: {1},
                10: {0, 1, 3}}
    by_tag = {t: q for q in bank for t in q.tags}
    for n, correct in expected.items():
        q = by_tag[f"article-q{n}"]
        assert q.correct_indices == correct, q.id
        assert q.type == ("multi" if len(correct) > 1 else "single"), q.id


def test_article_q6_uses_the_approximation_and_shows_the_exact_value(bank: list[Question]) -> None:
    q6 = next(q for q in bank if "article-q6" in q.tags)
    (right,) = q6.correct_indices
    assert "2.5" in q6.choices[right].text["en"] and "2.5" in q6.choices[right].text["zh"]
    for lang in ("zh", "en"):
        assert "k\\alpha + (1-\\alpha)" in q6.prompt[lang]
        assert "1.9375" in q6.explanation[lang]
        assert "\\frac{1-\\alpha^{k+1}}{1-\\alpha}" in q6.explanation[lang]
    assert math.isclose(4 * 0.5 + (1 - 0.5), 2.5) and math.isclose(tau(0.5, 4), 1.9375)


def test_enough_new_questions(bank: list[Question]) -> None:
    assert sum(q.source == "new" for q in bank) >= 15


def test_experiments_are_registered(bank: list[Question]) -> None:
    with_experiment = [q for q in bank if q.experiment]
    assert len(with_experiment) >= 4
    known = registered_experiments()
    unknown = {q.id: q.experiment for q in with_experiment if q.experiment not in known}
    assert unknown == {}


PREDICT_THEN_RUN_LESSONS = ("02-ar-bottleneck", "07-when-to-use", "09-python-demo", "11-interview", "12-production",
                            "13-training-a-drafter")
SIM_EXPERIMENTS = {"sim_tau_a07_k4", "sim_tau_a05_k4"}  # the i.i.d. check; new questions measure real drafters


def test_enough_predict_then_run_questions(bank: list[Question]) -> None:
    runs = [q for q in bank if q.experiment]
    assert len(runs) >= 15, f"only {len(runs)} predict-then-run questions"
    assert len({q.experiment for q in runs}) >= 10
    missing = [stem for stem in PREDICT_THEN_RUN_LESSONS if not any(q.lesson == stem for q in runs)]
    assert not missing, f"lessons without a predict-then-run question: {missing}"
    on_sim = {q.experiment for q in runs if q.experiment.startswith("sim")} - SIM_EXPERIMENTS
    assert not on_sim, f"new predict-then-run questions should measure real drafters, not {on_sim}"
    assert all(q.type == "numeric" and q.answer is not None for q in runs)


def test_simulated_tau_answers_follow_theory(bank: list[Question]) -> None:
    """Predict-then-run answers for the simulated drafter are the closed-form expectation."""
    theory = {"sim_tau_a07_k4": tau(0.7, 4), "sim_tau_a05_k4": tau(0.5, 4)}
    for q in bank:
        if q.experiment in theory:
            assert q.type == "numeric" and q.answer is not None
            assert abs(q.answer.value - theory[q.experiment]) <= 0.01, q.id
            # The source article's approximation must NOT pass for alpha = 0.5: that is the lesson.
            if q.experiment == "sim_tau_a05_k4":
                assert not grade(q, 2.5).correct


# ------------------------------------------------------------------ schema rejects malformed questions


def _good_single() -> dict[str, Any]:
    bi = {"zh": "中文", "en": "English"}
    return {
        "id": "q06-example",
        "type": "single",
        "difficulty": "easy",
        "lesson": "06-speedup",
        "tags": ["example"],
        "source": "new",
        "prompt": dict(bi),
        "choices": [
            {"text": dict(bi), "correct": True, "feedback": dict(bi)},
            {"text": dict(bi), "correct": False, "feedback": dict(bi)},
        ],
        "explanation": dict(bi),
    }


def _good_numeric() -> dict[str, Any]:
    q = _good_single()
    del q["choices"]
    q.update(type="numeric", answer={"value": 2.77, "tolerance": 0.25}, experiment="sim_tau_a07_k4")
    return q


def _break(mutate: Any, base: Any = _good_single) -> dict[str, Any]:
    q = copy.deepcopy(base())
    mutate(q)
    return q


MALFORMED = {
    "missing-en": _break(lambda q: q["prompt"].pop("en")),
    "empty-zh": _break(lambda q: q["explanation"].update(zh="")),
    "blank-en": _break(lambda q: q["explanation"].update(en="   ")),
    "extra-lang": _break(lambda q: q["prompt"].update(fr="Français")),
    "extra-field": _break(lambda q: q.update(hint={"zh": "提示", "en": "hint"})),
    "bad-id": _break(lambda q: q.update(id="Q6 Example")),
    "bad-lesson": _break(lambda q: q.update(lesson="06-speed")),
    "bad-type": _break(lambda q: q.update(type="truefalse")),
    "bad-difficulty": _break(lambda q: q.update(difficulty="medium")),
    "bad-source": _break(lambda q: q.update(source="web")),
    "no-tags": _break(lambda q: q.update(tags=[])),
    "single-two-correct": _break(lambda q: q["choices"][1].update(correct=True)),
    "single-none-correct": _break(lambda q: q["choices"][0].update(correct=False)),
    "multi-one-correct": _break(lambda q: q.update(type="multi")),
    "one-choice": _break(lambda q: q["choices"].pop()),
    "choice-without-feedback": _break(lambda q: q["choices"][0].pop("feedback")),
    "choice-label-with-math": _break(lambda q: q["choices"][0]["text"].update(en="$k=4$")),
    "choice-with-answer": _break(lambda q: q.update(answer={"value": 1, "tolerance": 0})),
    "choice-without-choices": _break(lambda q: q.pop("choices")),
    "numeric-with-choices": _break(lambda q: q.update(choices=_good_single()["choices"]), _good_numeric),
    "numeric-without-answer": _break(lambda q: q.pop("answer"), _good_numeric),
    "negative-tolerance": _break(lambda q: q["answer"].update(tolerance=-0.1), _good_numeric),
    "string-answer": _break(lambda q: q["answer"].update(value="2.77"), _good_numeric),
    "bad-experiment-name": _break(lambda q: q.update(experiment="Sim Tau"), _good_numeric),
    "value-and-measure": _break(lambda q: q["answer"].update(measure="curve.mix_gain"), _good_numeric),
    "neither-value-nor-measure": _break(lambda q: q["answer"].pop("value"), _good_numeric),
    "bad-measure-name": _break(lambda q: q.update(answer={"measure": "mix gain", "tolerance": 0.1}), _good_numeric),
}


def test_good_examples_pass(schema: dict[str, Any]) -> None:
    # Otherwise the malformed cases below would be rejected for the wrong reason.
    jsonschema.validate([_good_single(), _good_numeric()], schema, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_question_rejected(name: str, schema: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([MALFORMED[name]], schema, cls=jsonschema.Draft202012Validator)


def test_empty_file_rejected(schema: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([], schema, cls=jsonschema.Draft202012Validator)


# ------------------------------------------------------------------ loader errors


def _write_bank(tmp_path: Path, files: dict[str, list[dict[str, Any]]]) -> Path:
    for name, questions in files.items():
        (tmp_path / name).write_text(yaml.safe_dump(questions, allow_unicode=True), encoding="utf-8")
    return tmp_path


def test_load_bank_from_other_dir(tmp_path: Path) -> None:
    qs = load_bank(_write_bank(tmp_path, {"a.yaml": [_good_single(), _good_numeric() | {"id": "q06-other"}]}))
    assert [q.id for q in qs] == ["q06-example", "q06-other"]
    assert qs[1].answer == Answer(2.77, 0.25) and qs[1].experiment == "sim_tau_a07_k4"


def test_answer_keyed_to_a_measure_reads_it(tmp_path: Path) -> None:
    """A key named by a measure is the measured number (4 significant digits): it follows the file."""
    keyed = _good_numeric() | {"id": "q13-keyed", "lesson": "13-training-a-drafter",
                               "answer": {"measure": "curve.mix_gain", "tolerance": 0.15}}
    keyed.pop("experiment")
    (q,) = load_bank(_write_bank(tmp_path, {"a.yaml": [keyed]}))
    assert q.answer == Answer(float(f"{measures.value('curve.mix_gain'):.4g}"), 0.15, measure="curve.mix_gain")
    assert grade(q, q.answer.value + 0.14).correct and not grade(q, q.answer.value + 0.16).correct
    keyed["answer"]["measure"] = "curve.no_such_point"
    with pytest.raises(QuizError, match="q13-keyed.*curve.no_such_point"):
        load_bank(_write_bank(tmp_path, {"a.yaml": [keyed]}))


def test_load_bank_rejects_schema_violation(tmp_path: Path) -> None:
    with pytest.raises(QuizError, match="does not match the quiz schema"):
        load_bank(_write_bank(tmp_path, {"a.yaml": [MALFORMED["single-two-correct"]]}))


def test_load_bank_rejects_duplicate_ids_across_files(tmp_path: Path) -> None:
    with pytest.raises(QuizError, match="duplicate"):
        load_bank(_write_bank(tmp_path, {"a.yaml": [_good_single()], "b.yaml": [_good_single()]}))


def test_load_bank_rejects_id_of_another_lesson(tmp_path: Path) -> None:
    with pytest.raises(QuizError, match="prefix"):
        load_bank(_write_bank(tmp_path, {"a.yaml": [_good_single() | {"id": "q07-example"}]}))


def test_load_bank_rejects_bad_yaml_and_empty_dir(tmp_path: Path) -> None:
    with pytest.raises(QuizError, match="no quiz files"):
        load_bank(tmp_path)
    (tmp_path / "a.yaml").write_text("- id: [unclosed\n", encoding="utf-8")
    with pytest.raises(QuizError, match="not valid YAML"):
        load_bank(tmp_path)


def test_quiz_error_is_a_value_error() -> None:
    assert issubclass(QuizError, ValueError)


# ------------------------------------------------------------------ grading


def _bi(s: str) -> dict[str, str]:
    return {"zh": f"中{s}", "en": s}


MULTI = Question(
    id="q04-test-multi",
    type="multi",
    difficulty="mid",
    lesson="04-draft-sources",
    tags=("test",),
    source="new",
    prompt=_bi("pick"),
    explanation=_bi("why"),
    choices=(
        Choice(_bi("A"), True, _bi("fa")),
        Choice(_bi("B"), True, _bi("fb")),
        Choice(_bi("C"), False, _bi("fc")),
        Choice(_bi("D"), False, _bi("fd")),
    ),
)
NUMERIC = Question(
    id="q06-test-numeric",
    type="numeric",
    difficulty="mid",
    lesson="06-speedup",
    tags=("test",),
    source="new",
    prompt=_bi("how many"),
    explanation=_bi("because"),
    answer=Answer(2.77, 0.25),
)


def test_multi_right_only_for_exact_set() -> None:
    assert grade(MULTI, {0, 1}).correct
    assert grade(MULTI, [1, 0]).correct  # any iterable of indices
    assert not grade(MULTI, {0}).correct  # subset
    assert not grade(MULTI, {0, 1, 2}).correct  # superset
    assert not grade(MULTI, set()).correct
    assert not grade(MULTI, {2, 3}).correct


def test_multi_exact_set_on_real_bank(bank: list[Question]) -> None:
    for q in (q for q in bank if q.type == "multi"):
        right = set(q.correct_indices)
        wrong = set(range(len(q.choices))) - right
        assert grade(q, right).correct, q.id
        assert not grade(q, right - {min(right)}).correct, q.id
        if wrong:
            assert not grade(q, right | {min(wrong)}).correct, q.id


def test_single_grading_on_real_bank(bank: list[Question]) -> None:
    for q in (q for q in bank if q.type == "single"):
        (right,) = q.correct_indices
        assert grade(q, {right}).correct and grade(q, right).correct, q.id
        for i in set(range(len(q.choices))) - {right}:
            assert not grade(q, {i}).correct, q.id
        assert not grade(q, set(range(len(q.choices)))).correct, q.id  # ticking everything


def test_per_choice_feedback_and_language() -> None:
    g = grade(MULTI, {0, 2}, lang="en")
    assert [(f.index, f.chosen, f.correct) for f in g.per_choice] == [
        (0, True, True),
        (1, False, True),
        (2, True, False),
        (3, False, False),
    ]
    assert [f.feedback for f in g.per_choice] == ["fa", "fb", "fc", "fd"]
    assert g.explanation == "why"
    zh = grade(MULTI, {0, 2}, lang="zh")
    assert zh.explanation == "中why" and zh.per_choice[0].feedback == "中fa"


def test_numeric_tolerance() -> None:
    assert grade(NUMERIC, 2.77).correct
    assert grade(NUMERIC, 2.52).correct  # exactly at the edge (float noise must not matter)
    assert grade(NUMERIC, 3.02).correct
    assert grade(NUMERIC, 3).correct  # ints are numbers too
    assert not grade(NUMERIC, 2.5).correct  # the source article's approximation, outside the tolerance
    assert not grade(NUMERIC, 3.03).correct
    assert not grade(NUMERIC, float("nan")).correct
    g = grade(NUMERIC, 2.0, lang="zh")
    assert (g.expected, g.tolerance, g.per_choice, g.explanation) == (2.77, 0.25, [], "中because")


def test_zero_tolerance_is_exact() -> None:
    q = Question(**{**NUMERIC.__dict__, "answer": Answer(5, 0)})
    assert grade(q, 5).correct and grade(q, 5.0).correct
    assert not grade(q, 4.99).correct


def test_bad_answers_raise() -> None:
    with pytest.raises(QuizError):
        grade(MULTI, 1.0)  # a number for a choice question
    with pytest.raises(QuizError):
        grade(MULTI, {4})  # no such choice
    with pytest.raises(QuizError):
        grade(MULTI, {-1})
    with pytest.raises(QuizError):
        grade(NUMERIC, {0})  # a set for a numeric question
    with pytest.raises(QuizError):
        grade(NUMERIC, True)
    with pytest.raises(QuizError):
        grade(NUMERIC, 2.77, lang="fr")


def test_questions_for_filters(bank: list[Question]) -> None:
    assert questions_for(bank=bank) == bank
    six = questions_for("06-speedup", bank=bank)
    assert six and all(q.lesson == "06-speedup" for q in six)
    hard = questions_for("06-speedup", "hard", bank=bank)
    assert hard and all(q.difficulty == "hard" for q in hard) and len(hard) < len(six)
    assert questions_for("no-such-lesson", bank=bank) == []
    # Without bank=, the default bank (the files on disk) is used.
    assert [q.id for q in questions_for("01-seeing-it")] == [q.id for q in bank if q.lesson == "01-seeing-it"]


# ------------------------------------------------------------------ module hygiene and the widget


def test_quiz_module_has_no_heavy_top_level_imports() -> None:
    """quiz.py must not import torch, and imports ipywidgets only inside functions."""
    tree = ast.parse(Path(quiz.__file__).read_text(encoding="utf-8"))
    top: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            top.add(node.module.split(".")[0])
    assert "ipywidgets" not in top and "torch" not in top
    everywhere = {
        (a.name if isinstance(n, ast.Import) else n.module or "").split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in (n.names if isinstance(n, ast.Import) else [n])
    }
    assert "torch" not in everywhere and "transformers" not in everywhere


def _card_parts(card: Any) -> tuple[Any, Any, Any, Any]:
    prompt, box, button, result = card.children
    return prompt, box, button, result


def test_widget_builds_for_every_lesson_and_language() -> None:
    pytest.importorskip("ipywidgets")
    for stem in LESSON_STEMS:
        for lang in ("zh", "en"):
            ui = quiz.quiz_widget(stem, lang)
            assert len(ui.children) == len(questions_for(stem))


def test_widget_submit_shows_verdict_feedback_and_explanation() -> None:
    w = pytest.importorskip("ipywidgets")
    card = quiz.question_card(MULTI, "en")
    _, box, button, result = _card_parts(card)
    assert isinstance(box, w.VBox)
    box.children[0].value = box.children[1].value = True
    button.click()
    assert "Correct" in result.value and "fa" in result.value and "why" in result.value
    box.children[2].value = True  # superset -> wrong
    button.click()
    assert "Not quite" in result.value and "fc" in result.value

    card = quiz.question_card(NUMERIC, "zh")
    _, box, button, result = _card_parts(card)
    box.value = 2.8
    button.click()
    assert "回答正确" in result.value and "2.77" in result.value and "中because" in result.value


def test_widget_single_choice_and_paging(bank: list[Question]) -> None:
    w = pytest.importorskip("ipywidgets")
    q = next(q for q in bank if q.type == "single")
    _, box, button, result = _card_parts(quiz.question_card(q, "en"))
    assert isinstance(box, w.RadioButtons) and box.index is None
    button.click()  # nothing picked: graded as wrong, no crash
    assert "Not quite" in result.value
    box.index = next(iter(q.correct_indices))
    button.click()
    assert "Correct" in result.value

    ui = quiz.quiz_widget(q.lesson, "en", one_at_a_time=True)
    holder, nav = ui.children
    prev_b, counter, next_b = nav.children
    first = holder.children[0]
    next_b.click()
    assert holder.children[0] is not first and counter.value.startswith("2 /")
    prev_b.click()
    assert holder.children[0] is first
    with pytest.raises(QuizError):
        quiz.quiz_widget(q.lesson, "fr")
