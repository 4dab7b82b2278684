"""The lessons (lessons/<lang>/*.md) are well-formed, bilingual in step, and their notebooks are fresh.

No model is loaded here: the notebooks themselves are executed by `pytest --nbmake notebooks`.
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "lessons"
LANGS = ("zh", "en")
EXPECTED_STEMS = [
    "01-seeing-it",
    "02-ar-bottleneck",
    "03-draft-verify",
    "04-draft-sources",
    "05-judging-drafts",
    "06-speedup",
    "07-when-to-use",
    "08-applications",
    "09-python-demo",
    "10-misconceptions",
    "11-interview",
    "12-production",
]
REQUIRED_IDS = ("goals", "experiment", "summary", "exercises", "quiz")

TARGET = re.compile(r"^\(([A-Za-z0-9_-]+)\)=\s*$")
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
LIST_ITEM = re.compile(r"^(?:\d+\.|[-*])\s+\S")


def stems(lang: str) -> list[str]:
    return sorted(p.stem for p in (LESSONS / lang).glob("*.md"))


ALL_STEMS = sorted(set(stems("zh")) | set(stems("en")))
LESSON_FILES = [(lang, stem) for stem in ALL_STEMS for lang in LANGS if (LESSONS / lang / f"{stem}.md").exists()]


def read(lang: str, stem: str) -> str:
    return (LESSONS / lang / f"{stem}.md").read_text(encoding="utf-8")


def section_ids(text: str) -> list[str]:
    """Ids of the `##` sections, in order; every `##` heading must carry a MyST target line."""
    lines = [line for line in CODE_CELL.sub("", text).splitlines() if line.strip()]
    ids = []
    for before, line in zip([""] + lines, lines):
        if line.startswith("## "):
            match = TARGET.match(before)
            assert match, f"section {line!r} has no '(id)=' target line right before it"
            ids.append(match.group(1))
    return ids


def section(text: str, sid: str) -> str:
    """The text of section `sid`, up to the next target line."""
    rest = text.split(f"\n({sid})=\n", 1)[1]
    return re.split(r"\n\([A-Za-z0-9_-]+\)=\n", rest, maxsplit=1)[0]


def code_cells(text: str) -> list[str]:
    return CODE_CELL.findall(text)


def test_all_expected_lessons_exist():
    missing = [f"{lang}/{stem}.md" for stem in EXPECTED_STEMS for lang in LANGS
               if not (LESSONS / lang / f"{stem}.md").exists()]
    assert not missing, f"missing lessons: {missing}"


def test_same_lesson_files_in_both_languages():
    assert stems("zh") == stems("en")


@pytest.mark.parametrize("stem", ALL_STEMS)
def test_same_section_ids_in_both_languages(stem):
    if not all((LESSONS / lang / f"{stem}.md").exists() for lang in LANGS):
        pytest.skip(f"{stem} exists in one language only (see test_same_lesson_files_in_both_languages)")
    assert section_ids(read("zh", stem)) == section_ids(read("en", stem))


@pytest.mark.parametrize("lang,stem", LESSON_FILES)
def test_lesson_structure(lang, stem):
    text = read(lang, stem)
    assert text.startswith("---\njupytext:"), "must start with the Jupytext MyST front matter"
    assert "format_name: myst" in text and "name: python3" in text
    assert re.search(r"^# \S", text, re.MULTILINE), "needs a '# title'"

    ids = section_ids(text)
    assert len(ids) == len(set(ids)), f"duplicate section ids: {ids}"
    assert not [i for i in REQUIRED_IDS if i not in ids], f"missing required ids, has {ids}"

    prose = CODE_CELL.sub("", text)
    assert "$" in prose, "needs at least one LaTeX formula"

    cells = code_cells(text)
    assert any('load_model("smollm2-135m")' in c for c in cells), "no code cell loads smollm2-135m"
    assert re.search(rf'quiz_widget\("{stem}", lang="{lang}"\)', section(text, "quiz")), \
        f'the quiz section needs a cell calling quiz_widget("{stem}", lang="{lang}")'

    items = [line for line in section(text, "exercises").splitlines() if LIST_ITEM.match(line)]
    assert 2 <= len(items) <= 3, f"exercises need 2-3 list items, found {len(items)}"


@pytest.mark.parametrize("stem", ALL_STEMS)
def test_quiz_bank_covers_lesson(stem):
    try:
        from specdec_core.quiz import questions_for
    except ImportError as err:
        pytest.skip(f"specdec_core.quiz is not available yet ({err})")
    assert len(questions_for(stem)) >= 2, f"the quiz bank needs at least 2 questions for {stem}"


def test_notebooks_are_up_to_date():
    spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "scripts" / "build_notebooks.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    problems = build.check()
    assert not problems, "run `make notebooks`:\n" + "\n".join(problems)
