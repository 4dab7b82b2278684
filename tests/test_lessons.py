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
    "13-training-a-drafter",
    "14-capstone",
]
REQUIRED_IDS = ("goals", "experiment", "summary", "exercises", "quiz")
# Every lesson opens and closes the same way (the course's scaffolding).
FIRST_IDS = ("prerequisites", "goals", "kitchen")
LAST_IDS = ("summary", "exercises", "solutions", "quiz", "references")
# The works the lessons may cite, with their arXiv ids checked by hand (2026-12-01).
ARXIV_IDS = {
    "2211.17192",  # Leviathan, Kalman, Matias: Fast Inference from Transformers via Speculative Decoding
    "2302.01318",  # Chen et al.: Accelerating LLM Decoding with Speculative Sampling
    "1811.03115",  # Stern et al.: Blockwise Parallel Decoding
    "2305.10427",  # Santilli et al.: parallel (Jacobi) decoding for translation
    "2401.10774",  # Medusa
    "2401.15077", "2406.16858", "2503.01840",  # EAGLE, EAGLE-2, EAGLE-3
    "2402.02057",  # Lookahead decoding
    "2404.16710",  # LayerSkip
    "2403.00835",  # CLLMs
    "2305.09781",  # SpecInfer
    "2602.06036",  # DFlash
    "2408.11049",  # MagicDec
    "2412.19437",  # DeepSeek-V3 (MTP)
    "2404.19737",  # Gloeckle et al.: multi-token prediction
    "2309.06180",  # vLLM / PagedAttention
    "2607.05147",  # DSpark
    "2310.08461",  # DistillSpec: Improving Speculative Decoding via Knowledge Distillation
    "2502.14856",  # FR-Spec: frequency-ranked speculative sampling (reduced drafting vocabulary)
    "2309.08168",  # Zhang et al.: Draft & Verify, self-speculation by skipping layers (ACL 2024; checked 2026-12-07)
    "2410.11305",  # Zhao et al.: QSpec, complementary quantization schemes (EMNLP 2025; checked 2026-12-07)
    "2502.10424",  # Tiwari et al.: QuantSpec, self-speculation with a 4-bit weights and KV cache (checked 2026-12-07)
}
ARXIV = re.compile(r"arXiv:\s*(\d{4}\.\d{4,5})")
TIME_ESTIMATE = {"en": re.compile(r"\d+\s*minutes"), "zh": re.compile(r"\d+\s*分钟")}
# Learner-facing words that name the sources by internal names (the course calls them the source article / 参考文章).
FORBIDDEN = {"en": re.compile(r"\bseed(?!=)(?!\s*\()(?<!random seed)\b|teaching article", re.IGNORECASE),
             "zh": re.compile(r"原文|种子文章|教学文章|奖励 ?token|登记表")}
LESSON_REF = {"en": re.compile(r"\b[Ll]essons?\s+((?:\d+\s*(?:,|and|or|–|-|to|&)?\s*)+)"),
              "zh": re.compile(r"第\s*((?:\d+\s*(?:、|,|，|和|与|或|至|到|–|—|-)?\s*)+)\s*课")}

TARGET = re.compile(r"^\(([A-Za-z0-9_-]+)\)=\s*$")
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
LIST_ITEM = re.compile(r"^(?:\d+\.|[-*])\s+\S")


def stems(lang: str) -> list[str]:
    return sorted(p.stem for p in (LESSONS / lang).glob("[0-9][0-9]-*.md"))  # the glossary is no lesson


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
    from specdec_core.course.quiz import questions_for

    assert len(questions_for(stem)) >= 2, f"the quiz bank needs at least 2 questions for {stem}"


def test_notebooks_are_up_to_date():
    spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "scripts" / "build_notebooks.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    problems = build.check()
    assert not problems, "run `make notebooks`:\n" + "\n".join(problems)


def prose(text: str) -> str:
    """The learner-facing text of a lesson: without code cells and inline code."""
    return re.sub(r"`[^`\n]*`", "", CODE_CELL.sub("", text))


def lesson_numbers() -> set[int]:
    return {int(stem[:2]) for stem in ALL_STEMS}


@pytest.mark.parametrize("lang,stem", LESSON_FILES)
def test_lesson_skeleton(lang, stem):
    text = read(lang, stem)
    ids = section_ids(text)
    assert tuple(ids[:3]) == FIRST_IDS, f"a lesson opens with {FIRST_IDS}, this one with {ids[:3]}"
    assert tuple(ids[-5:]) == LAST_IDS, f"a lesson closes with {LAST_IDS}, this one with {ids[-5:]}"
    assert TIME_ESTIMATE[lang].search(section(text, "prerequisites")), "prerequisites need a time estimate"

    exercises = [line for line in section(text, "exercises").splitlines() if LIST_ITEM.match(line)]
    solutions = section(text, "solutions")
    assert solutions.count("<details>") == solutions.count("</details>") == len(exercises), \
        "one collapsed <details> solution per exercise"
    assert solutions.count("<summary>") == len(exercises)

    cited = ARXIV.findall(section(text, "references"))
    assert cited, "references need at least one arXiv id"
    assert not set(cited) - ARXIV_IDS, f"unchecked arXiv ids: {sorted(set(cited) - ARXIV_IDS)}"
    if lang == "zh":
        assert re.search(r"^## 小测验", section(text, "quiz"), re.MULTILINE), "the zh quiz heading is 小测验"


def test_skeleton_test_catches_a_missing_solution():
    """Negative control: a lesson with three exercises and two solutions fails the skeleton check."""
    text = read("en", ALL_STEMS[0])
    broken = text.replace("</details>", "", 1).replace("<details>", "", 1)
    solutions = section(broken, "solutions")
    exercises = [line for line in section(broken, "exercises").splitlines() if LIST_ITEM.match(line)]
    assert solutions.count("<details>") != len(exercises)


@pytest.mark.parametrize("lang,stem", LESSON_FILES)
def test_references_cite_only_checked_ids_anywhere(lang, stem):
    cited = set(ARXIV.findall(read(lang, stem)))
    assert not cited - ARXIV_IDS, f"unchecked arXiv ids: {sorted(cited - ARXIV_IDS)}"


@pytest.mark.parametrize("lang,stem", LESSON_FILES)
def test_sources_are_called_the_source_article(lang, stem):
    found = FORBIDDEN[lang].findall(prose(read(lang, stem)))
    assert not found, f"say 'the source article' / '参考文章' instead of {found}"


def test_forbidden_words_check_fails_on_internal_names():
    assert FORBIDDEN["en"].search("as the seed article says") and FORBIDDEN["en"].search("the seed's Q6")
    assert not FORBIDDEN["en"].search("a random seed of 42")
    assert FORBIDDEN["zh"].search("原文的近似") and FORBIDDEN["zh"].search("奖励 token")


def _referenced_lessons(text: str, lang: str) -> set[int]:
    return {int(n) for match in LESSON_REF[lang].finditer(text) for n in re.findall(r"\d+", match.group(1))}


@pytest.mark.parametrize("lang,stem", LESSON_FILES)
def test_cross_references_name_existing_lessons(lang, stem):
    missing = _referenced_lessons(prose(read(lang, stem)), lang) - lesson_numbers()
    assert not missing, f"refers to lessons that do not exist: {sorted(missing)}"


def test_quiz_cross_references_name_existing_lessons():
    import yaml

    missing = {}
    for path in sorted((LESSONS / "quiz").glob("*.yaml")):
        for q in yaml.safe_load(path.read_text(encoding="utf-8")):
            texts = [q["prompt"], q["explanation"], *[c[k] for c in q.get("choices", []) for k in ("text", "feedback")]]
            for lang in LANGS:
                refs = set().union(*(_referenced_lessons(t[lang], lang) for t in texts)) - lesson_numbers()
                if refs:
                    missing[q["id"]] = sorted(refs)
    assert not missing, f"quiz text refers to lessons that do not exist: {missing}"


def test_cross_reference_check_catches_a_missing_lesson():
    assert _referenced_lessons("trained drafters come in lesson 13", "en") == {13}
    assert _referenced_lessons("see lessons 6 and 7", "en") == {6, 7}
    assert _referenced_lessons("见第 6、7 课", "zh") == {6, 7}


def test_quiz_and_ui_call_the_sources_the_source_article():
    import json

    import yaml

    found = []
    for path in sorted((LESSONS / "quiz").glob("*.yaml")):
        for q in yaml.safe_load(path.read_text(encoding="utf-8")):
            texts = [q["prompt"], q["explanation"], *[c[k] for c in q.get("choices", []) for k in ("text", "feedback")]]
            found += [(q["id"], lang) for t in texts for lang in LANGS if FORBIDDEN[lang].search(re.sub(r"`[^`]*`", "", t[lang]))]
    for lang in LANGS:
        strings = json.loads((ROOT / "app" / "i18n" / f"{lang}.json").read_text(encoding="utf-8"))
        found += [(key, lang) for key, value in strings.items() if FORBIDDEN[lang].search(value)]
    assert not found, f"internal names for the sources: {found}"


@pytest.mark.parametrize("lang", LANGS)
def test_glossary_defines_the_course_vocabulary(lang):
    path = LESSONS / lang / "glossary.md"
    assert path.is_file(), f"missing {path.relative_to(ROOT)}"
    text = path.read_text(encoding="utf-8")
    assert re.search(r"^# \S", text, re.MULTILINE)
    for term in ("ᾱ", "τ", "s_i", "a_i", "KV"):
        assert term in text, f"the glossary lacks {term}"
    assert ("额外 token" in text) if lang == "zh" else ("bonus token" in text)


def test_glossaries_have_the_same_entries():
    rows = {lang: [line for line in (LESSONS / lang / "glossary.md").read_text(encoding="utf-8").splitlines()
                   if line.startswith("|") and not re.match(r"^\|[\s:|-]+\|$", line)] for lang in LANGS}
    assert len(rows["zh"]) == len(rows["en"]) > 30
