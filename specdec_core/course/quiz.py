"""The quiz bank: load the bilingual questions, grade answers, and show them in a notebook.

The questions live in ``lessons/quiz/*.yaml`` (one file per lesson, each a YAML list) and
are checked against ``lessons/quiz/schema.json`` every time they are loaded, so a typo in
the bank fails loudly instead of showing a broken question to a learner.

    from specdec_core.quiz import grade, questions_for, quiz_widget

    q = questions_for("06-speedup")[0]      # the source article's Q6 (single choice)
    grade(q, {2}, lang="en").correct        # True: answers are sets of choice indices ...
    grade(questions_for("06-speedup")[1], 2.77).correct   # ... or numbers (True)
    quiz_widget("06-speedup", lang="zh")    # in a notebook: the whole lesson quiz

This module stays light on purpose (no torch; ipywidgets only inside the widget functions),
so the app can import it without loading a model. (Importing it through the package still
runs ``specdec_core/__init__.py``.)

Three question types:

* ``single``  - exactly one correct choice; the learner picks one.
* ``multi``   - several correct choices; right only when *exactly* that set is picked
                (a subset or a superset is wrong, as in an exam).
* ``numeric`` - a number, right within an absolute ``tolerance``. Many numeric questions
                name an ``experiment``: predict first, then run it on the real model. Where a
                run takes hours (a training run), the key is a measured number instead
                (``answer: {measure: NAME, tolerance: ...}``, ``measures``): predict, then read it.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import jsonschema
import yaml

from ..errors import SpecDecError
from ..theory import R_FLOOR
from . import measures

if TYPE_CHECKING:  # only for the type hint; the real import is lazy (see quiz_widget)
    import ipywidgets

QUIZ_DIR = Path(__file__).resolve().parents[2] / "lessons" / "quiz"
SCHEMA_PATH = QUIZ_DIR / "schema.json"

LANGS: tuple[str, ...] = ("zh", "en")
# The lesson file stems; the schema's "lesson" enum must list exactly these (a test checks it).
LESSON_STEMS: tuple[str, ...] = (
    "01-seeing-it", "02-ar-bottleneck", "03-draft-verify", "04-draft-sources",
    "05-judging-drafts", "06-speedup", "07-when-to-use", "08-applications",
    "09-python-demo", "10-misconceptions", "11-interview", "12-production", "13-training-a-drafter", "14-capstone",
)

# Float answers such as 2.52 vs 2.77 +/- 0.25 must not fail on the last binary digit.
_FLOAT_SLACK = 1e-9


class QuizError(SpecDecError):
    """The bank is malformed, or a question was asked or answered the wrong way."""


# ---------------------------------------------------------------------------------------
# Data classes: a frozen, typed view of one YAML question.
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """One option of a single/multi question, with the feedback shown after submitting."""

    text: dict[str, str]
    correct: bool
    feedback: dict[str, str]


@dataclass(frozen=True)
class Answer:
    """The expected number of a numeric question; right when |given - value| <= tolerance.

    ``measure`` names the measured number the value was read from (None: the bank states it);
    ``bounds`` is the interval the quantity cannot leave on any machine (`quiz_keys` checks the key
    against it)."""

    value: float
    tolerance: float
    measure: str | None = None
    bounds: tuple[float, float] | None = None  # where the quantity can lie at all (`bounds_of`)


@dataclass(frozen=True)
class Question:
    """One quiz question. Bilingual texts are dicts {"zh": ..., "en": ...}."""

    id: str
    type: Literal["single", "multi", "numeric"]
    difficulty: Literal["easy", "mid", "hard"]
    lesson: str
    tags: tuple[str, ...]
    source: Literal["article", "new"]
    prompt: dict[str, str]
    explanation: dict[str, str]
    choices: tuple[Choice, ...] = ()
    answer: Answer | None = None
    experiment: str | None = None

    @property
    def correct_indices(self) -> frozenset[int]:
        """Indices of the correct choices (empty for numeric questions)."""
        return frozenset(i for i, c in enumerate(self.choices) if c.correct)


@dataclass(frozen=True)
class ChoiceFeedback:
    """How one choice fared: was it picked, is it correct, and what to tell the learner."""

    index: int
    chosen: bool
    correct: bool
    feedback: str


@dataclass(frozen=True)
class Grade:
    """The verdict on one answer, with texts already in the requested language."""

    correct: bool
    per_choice: list[ChoiceFeedback]
    explanation: str
    expected: float | None = None  # numeric questions only: the answer and its tolerance
    tolerance: float | None = None


# ---------------------------------------------------------------------------------------
# Loading and validating the bank.
# ---------------------------------------------------------------------------------------


def check_lang(lang: str) -> None:
    """Raise QuizError unless ``lang`` is 'zh' or 'en'."""
    if lang not in LANGS:
        raise QuizError(f"lang must be one of {LANGS}, got {lang!r}")


def text(bilingual: dict[str, str], lang: str) -> str:
    """Pick one language from a {"zh", "en"} dict, with its measured numbers filled in (`measures`)."""
    check_lang(lang)
    return measures.render(bilingual[lang], lang)


def load_schema(schema_path: Path = SCHEMA_PATH) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) that every quiz file must satisfy."""
    schema = json.loads(Path(schema_path).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)  # a broken schema is a bug too
    return schema


def validate_file_data(data: Any, schema: dict[str, Any], where: str = "<data>") -> None:
    """Raise QuizError listing every schema violation in one file's parsed YAML."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  at {'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors]
        raise QuizError(f"{where} does not match the quiz schema:\n" + "\n".join(lines))


def bounds_of(spec: dict[str, Any]) -> tuple[float, float]:
    """The interval an answer's `bounds` allow (schema.json, $defs/bounds): what the quantity can be on
    any hardware, before a machine is asked. A (k+1)-token forward reads the same weights as a one-token
    step, so r >= 1 (theory.R_FLOOR leaves room for noise; below it the one-token step is slow); a chain
    that drafts k tokens commits 1 to k + 1 per verify, so 1 <= tau <= k + 1 and a speedup is at most
    k + 1 (a free drafter, r = 1)."""
    k = spec.get("k")
    low, high = {
        "tau": (1.0, (k or 0) + 1.0),
        "speedup": (0.0, (k or 0) + 1.0),
        "r": (R_FLOOR, k + 1.0 if k else math.inf),
        "fraction": (0.0, 1.0),
        "ratio": (-math.inf, math.inf),
    }[spec["quantity"]]
    return max(low, spec.get("low", -math.inf)), min(high, spec.get("high", math.inf))


def _to_question(raw: dict[str, Any]) -> Question:
    """Turn one schema-valid dict into a Question."""
    choices = tuple(
        Choice(text=dict(c["text"]), correct=bool(c["correct"]), feedback=dict(c["feedback"]))
        for c in raw.get("choices", [])
    )
    answer = None
    if "answer" in raw:
        name = raw["answer"].get("measure")
        try:  # a key read from a benchmark file follows it when the measurement is redone
            value = float(f"{measures.value(name):.4g}") if name else float(raw["answer"]["value"])
            flagged = measures.flags(name) if name else []
        except measures.MeasureError as e:
            raise QuizError(f"question {raw['id']!r}: {e}") from None
        if flagged:  # a key has no caveat to carry: a figure the baseline guard flags cannot be one
            raise QuizError(f"question {raw['id']!r}: its key {name!r} is flagged by the baseline guard: {flagged[0]}")
        bounds = bounds_of(raw["answer"]["bounds"]) if "bounds" in raw["answer"] else None
        answer = Answer(value=value, tolerance=float(raw["answer"]["tolerance"]), measure=name, bounds=bounds)
    return Question(
        id=raw["id"],
        type=raw["type"],
        difficulty=raw["difficulty"],
        lesson=raw["lesson"],
        tags=tuple(raw["tags"]),
        source=raw["source"],
        prompt=dict(raw["prompt"]),
        explanation=dict(raw["explanation"]),
        choices=choices,
        answer=answer,
        experiment=raw.get("experiment"),
    )


def _check_bank(questions: Sequence[Question]) -> None:
    """Rules that span questions or fields, which JSON Schema cannot express."""
    seen: set[str] = set()
    for q in questions:
        if q.id in seen:
            raise QuizError(f"duplicate question id {q.id!r}")
        seen.add(q.id)
        # The id starts with the lesson number (q06-... belongs to 06-speedup), so an id
        # alone tells a reader where the question lives, and it stays stable when reordered.
        if q.id[1:3] != q.lesson[:2]:
            raise QuizError(f"question {q.id!r}: id prefix does not match lesson {q.lesson!r}")


def load_bank(quiz_dir: Path = QUIZ_DIR, schema_path: Path = SCHEMA_PATH) -> list[Question]:
    """Load and validate every ``*.yaml`` in ``quiz_dir``; files in name order, questions in file order."""
    quiz_dir = Path(quiz_dir)
    files = sorted(quiz_dir.glob("*.yaml"))
    if not files:
        raise QuizError(f"no quiz files (*.yaml) in {quiz_dir}")
    schema = load_schema(schema_path)
    questions: list[Question] = []
    for path in files:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise QuizError(f"{path.name} is not valid YAML: {exc}") from exc
        validate_file_data(data, schema, where=path.name)
        questions.extend(_to_question(raw) for raw in data)
    _check_bank(questions)
    return questions


@lru_cache(maxsize=1)
def _default_bank() -> tuple[Question, ...]:
    # Cached: the bank is read-only at run time and the app asks for it on every rerun.
    return tuple(load_bank())


def questions_for(
    lesson: str | None = None,
    difficulty: str | None = None,
    bank: Sequence[Question] | None = None,
) -> list[Question]:
    """Questions of one lesson and/or difficulty (None = any), from ``bank`` or the default bank."""
    pool = _default_bank() if bank is None else bank
    return [
        q
        for q in pool
        if (lesson is None or q.lesson == lesson) and (difficulty is None or q.difficulty == difficulty)
    ]


# ---------------------------------------------------------------------------------------
# Grading.
# ---------------------------------------------------------------------------------------


def _as_indices(question: Question, answer: Any) -> frozenset[int]:
    """Normalise a choice answer (an int or an iterable of ints) and check the range."""
    if isinstance(answer, bool) or isinstance(answer, float | str):
        raise QuizError(f"{question.id}: a choice answer is a set of choice indices, got {answer!r}")
    picked = frozenset([answer]) if isinstance(answer, int) else frozenset(answer)
    for i in picked:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(question.choices):
            raise QuizError(f"{question.id}: no choice with index {i!r}")
    return picked


def grade(question: Question, answer: Iterable[int] | int | float, lang: str = "en") -> Grade:
    """Grade one answer: a set of choice indices (single/multi) or a number (numeric)."""
    explanation = text(question.explanation, lang)
    if question.type == "numeric":
        assert question.answer is not None  # guaranteed by the schema
        if isinstance(answer, bool) or not isinstance(answer, int | float):
            raise QuizError(f"{question.id}: a numeric answer is a number, got {answer!r}")
        expected, tolerance = question.answer.value, question.answer.tolerance
        ok = math.isfinite(answer) and abs(answer - expected) <= tolerance + _FLOAT_SLACK
        return Grade(ok, [], explanation, expected, tolerance)

    picked = _as_indices(question, answer)
    per_choice = [
        ChoiceFeedback(i, i in picked, c.correct, text(c.feedback, lang))
        for i, c in enumerate(question.choices)
    ]
    # Exact-set rule: for multi, a subset misses a true statement and a superset endorses a
    # false one; both are wrong. For single, the set has one element, so the rule is the same.
    return Grade(picked == question.correct_indices, per_choice, explanation)


# ---------------------------------------------------------------------------------------
# A small ipywidgets front end for the notebooks.
# ---------------------------------------------------------------------------------------

# Interface strings of the widget, in both languages.
_UI = {
    "zh": {
        "submit": "提交", "right": "✅ 回答正确", "wrong": "❌ 回答错误", "expected": "参考答案：",
        "explain": "解析：", "experiment": "先预测，再运行实验：", "measure": "答案读自测量值：",
        "prev": "上一题", "next": "下一题",
        "your": "你的答案", "none": "本课暂无题目：",
    },
    "en": {
        "submit": "Submit", "right": "✅ Correct", "wrong": "❌ Not quite", "expected": "Expected:",
        "explain": "Explanation:", "experiment": "Predict, then run the experiment:",
        "measure": "The key is the measured value:",
        "prev": "Previous", "next": "Next", "your": "Your answer", "none": "No questions for this lesson:",
    },
}
_DIFFICULTY = {
    "zh": {"easy": "易", "mid": "中", "hard": "难"},
    "en": {"easy": "easy", "mid": "mid", "hard": "hard"},
}


def _html(s: str) -> str:
    """Bank text -> HTML for HTMLMath: escape it, then render the little Markdown the bank uses.

    $...$ survives escaping untouched, and MathJax in HTMLMath typesets it.
    """
    out = html.escape(s, quote=False)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return out.replace("\n", "<br>")


def _plain(s: str) -> str:
    """Choice labels in radio buttons/checkboxes are plain text; drop Markdown backticks."""
    return re.sub(r"`([^`]*)`", r"\1", s)


def render_grade(question: Question, grade_: Grade, lang: str = "en") -> str:
    """The HTML shown after Submit: verdict, per-choice feedback, expected number, explanation."""
    check_lang(lang)
    ui = _UI[lang]
    parts = [f"<b>{ui['right'] if grade_.correct else ui['wrong']}</b>"]
    for fb in grade_.per_choice:
        mark = "✓" if fb.correct else "✗"
        picked = f" ← {ui['your']}" if fb.chosen else ""
        label = _html(text(question.choices[fb.index].text, lang))
        parts.append(f"{mark} {chr(65 + fb.index)}. {label}{picked}<br><i>{_html(fb.feedback)}</i>")
    if grade_.expected is not None:
        parts.append(f"{ui['expected']} {grade_.expected:g} ± {grade_.tolerance:g}")
    parts.append(f"<b>{ui['explain']}</b> {_html(grade_.explanation)}")
    if question.experiment:
        parts.append(f"🔬 {ui['experiment']} <code>{question.experiment}</code>")
    if question.answer is not None and question.answer.measure:
        source = measures.SOURCES[measures.MEASURES[question.answer.measure].source].file
        parts.append(f"📏 {ui['measure']} <code>{question.answer.measure}</code> ({source})")
    return "<br><br>".join(parts)


def _input_widget(question: Question, lang: str) -> ipywidgets.Widget:
    """Radio buttons (single), checkboxes (multi) or a number box (numeric)."""
    import ipywidgets as w

    labels = [f"{chr(65 + i)}. {_plain(text(c.text, lang))}" for i, c in enumerate(question.choices)]
    layout = w.Layout(width="auto")
    if question.type == "single":
        return w.RadioButtons(options=labels, index=None, layout=layout)
    if question.type == "multi":
        boxes = [w.Checkbox(value=False, description=label, indent=False, layout=layout) for label in labels]
        return w.VBox(boxes)
    return w.FloatText(value=0.0, description=_UI[lang]["your"], style={"description_width": "initial"})


def _read_answer(question: Question, box: ipywidgets.Widget) -> set[int] | float:
    """What the learner entered, in the form grade() expects."""
    if question.type == "single":
        return set() if box.index is None else {box.index}
    if question.type == "multi":
        return {i for i, cb in enumerate(box.children) if cb.value}
    return float(box.value)


def question_card(question: Question, lang: str = "en", number: int | None = None) -> ipywidgets.VBox:
    """One question as a widget: children are [prompt, input, Submit button, result]."""
    import ipywidgets as w

    check_lang(lang)
    ui = _UI[lang]
    head = f"Q{number}. " if number is not None else ""
    tag = _DIFFICULTY[lang][question.difficulty]
    prompt = w.HTMLMath(f"<b>{head}</b>{_html(text(question.prompt, lang))} <small>[{tag}]</small>")
    box = _input_widget(question, lang)
    button = w.Button(description=ui["submit"], button_style="primary")
    result = w.HTMLMath("")

    def on_submit(_: Any) -> None:
        result.value = render_grade(question, grade(question, _read_answer(question, box), lang), lang)

    button.on_click(on_submit)
    frame = w.Layout(border="1px solid #ddd", padding="8px", margin="6px 0")
    return w.VBox([prompt, box, button, result], layout=frame)


def quiz_widget(lesson: str, lang: str = "en", one_at_a_time: bool = False) -> ipywidgets.VBox:
    """The quiz of one lesson as an ipywidgets UI; ``display()`` the returned widget.

    ``one_at_a_time=True`` shows a single card with Previous/Next buttons; otherwise all
    cards are stacked.
    """
    import ipywidgets as w

    check_lang(lang)  # fail before building anything
    cards = [question_card(q, lang, i + 1) for i, q in enumerate(questions_for(lesson))]
    if not cards:
        return w.VBox([w.HTML(f"<i>{_UI[lang]['none']} {html.escape(lesson)}</i>")])
    if not one_at_a_time:
        return w.VBox(cards)

    pos = {"i": 0}  # a dict so the nested callbacks can update it
    holder = w.VBox([cards[0]])
    counter = w.Label(f"1 / {len(cards)}")

    def move(step: int) -> None:
        pos["i"] = (pos["i"] + step) % len(cards)
        holder.children = [cards[pos["i"]]]
        counter.value = f"{pos['i'] + 1} / {len(cards)}"

    prev_b, next_b = w.Button(description=_UI[lang]["prev"]), w.Button(description=_UI[lang]["next"])
    prev_b.on_click(lambda _: move(-1))
    next_b.on_click(lambda _: move(+1))
    return w.VBox([holder, w.HBox([prev_b, counter, next_b])])
