"""Measured numbers in the course's prose come from the shipped result files, through one mechanism
(`specdec_core.course.measures`) that the app's lesson page, the quiz texts and the notebooks share.

A {measure} that does not resolve is an error, never a blank; every paragraph that quotes one names
the machine it was measured on; zh and en quote the same measurements section by section; and a
changed result file makes the notebooks that quote it stale (the negative controls build each broken
case in tmp_path).
"""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

from specdec_core.course import measures
from specdec_core.course.lesson_outputs import CODE_CELL
from specdec_core.course.quiz import QUIZ_DIR, text

ROOT = Path(__file__).resolve().parents[1]
LANGS = ("zh", "en")
PAGES = [(lang, p) for lang in LANGS for p in sorted((ROOT / "lessons" / lang).glob("*.md"))]
TARGET = re.compile(r"^\(([A-Za-z0-9_-]+)\)=[ \t]*$", re.MULTILINE)


def quiz_texts() -> list[tuple[str, str, str]]:
    """(question id, lang, text) of every bilingual text of the quiz bank."""
    out = []
    for path in sorted(QUIZ_DIR.glob("*.yaml")):
        for q in yaml.safe_load(path.read_text(encoding="utf-8")):
            fields = [q["prompt"], q["explanation"], *[c[k] for c in q.get("choices", []) for k in ("text", "feedback")]]
            out += [(q["id"], lang, field[lang]) for field in fields for lang in LANGS]
    return out


def paragraphs(page: str) -> list[str]:
    """The prose of a page (or a quiz text), split at blank lines; code cells left out."""
    return [p for p in re.split(r"\n[ \t]*\n", CODE_CELL.sub("", page)) if p.strip()]


def sections(page: str) -> dict[str, str]:
    """Section id -> its text (the part before the first target under "")."""
    parts = TARGET.split(page)
    return {"": parts[0], **dict(zip(parts[1::2], parts[2::2]))}


def unnamed_machines(page: str) -> list[str]:
    """Measures quoted in a paragraph that does not name their source with {machine}."""
    return [f"{name} in {para.strip()[:80]!r}…" for para in paragraphs(page) for name in measures.names_in(para)
            if name in measures.MEASURES and measures.MEASURES[name].source not in measures.sources_in(para)]


@pytest.mark.parametrize("lang,path", PAGES, ids=[f"{lang}/{p.stem}" for lang, p in PAGES])
def test_every_quoted_measure_resolves_and_names_its_machine(lang, path):
    page = path.read_text(encoding="utf-8")
    rendered = measures.render(page, lang)  # raises MeasureError for any name that does not resolve
    assert "{measure}" not in rendered and "{machine}" not in rendered
    assert not unnamed_machines(page), "a quoted measurement needs {machine}`source` in its paragraph"


def test_quiz_texts_quote_measures_the_same_way():
    for qid, lang, body in quiz_texts():
        assert "{measure}" not in text({lang: body}, lang), qid
        assert not unnamed_machines(body), qid


@pytest.mark.parametrize("stem", sorted({p.stem for _, p in PAGES}))
def test_zh_and_en_quote_the_same_measures_in_each_section(stem):
    pages = {lang: sections((ROOT / "lessons" / lang / f"{stem}.md").read_text(encoding="utf-8")) for lang in LANGS}
    for sid in pages["en"]:
        assert sorted(measures.names_in(pages["zh"].get(sid, ""))) == sorted(measures.names_in(pages["en"][sid])), sid


def test_every_registered_measure_is_quoted_somewhere():
    quoted = {name for _, p in PAGES for name in measures.names_in(p.read_text(encoding="utf-8"))}
    quoted |= {name for _, _, body in quiz_texts() for name in measures.names_in(body)}
    assert not set(measures.MEASURES) - quoted, "registered but never quoted: drop them from measures.py"
    assert not quoted - set(measures.MEASURES), "quoted but not registered"


def test_the_paragraph_rule_catches_a_missing_machine():
    assert unnamed_machines("heads at {measure}`trained.heads.speedup`.\n\nthe rest {machine}`trained`.")
    assert not unnamed_machines("heads at {measure}`trained.heads.speedup` {machine}`trained`.")


# ---------------------------------------------------------------- negative controls in tmp_path


@pytest.fixture()
def fake_source(tmp_path, monkeypatch):
    """A shipped result file of our own, `benchmarks/fake-cpu.json`, registered as source "fake"."""
    path = tmp_path / "benchmarks" / "fake-cpu.json"
    path.parent.mkdir()
    env = {"cpu": "Test CPU", "threads": 2, "date": "2026-12-03 10:00:00 UTC"}
    path.write_text(json.dumps({"environment": env, "summary": {"spec:x": {"speedup_vs_ar": 1.5}}}))
    monkeypatch.setattr(measures, "ROOT", tmp_path)
    monkeypatch.setitem(measures.SOURCES, "fake", measures.Source("benchmarks/fake-cpu.json", "§0"))
    monkeypatch.setitem(measures.MEASURES, "fake.x", measures.Measure("fake", ("summary", "spec:x", "speedup_vs_ar"),
                                                                       "{:.2f}×"))
    return path


def test_a_measure_renders_with_its_machine(fake_source):
    out = measures.render("x runs at {measure}`fake.x` {machine}`fake`.", "en")
    assert out == "x runs at 1.50× (Test CPU, 2 threads, 2026-12-03; BENCHMARKS.md §0)."
    assert "Test CPU，2 线程" in measures.render("{machine}`fake`", "zh")


def test_an_unresolvable_measure_is_an_error_not_a_blank(fake_source, monkeypatch):
    with pytest.raises(measures.MeasureError, match="unknown measure 'fake.y'"):
        measures.render("{measure}`fake.y`", "en")
    monkeypatch.setitem(measures.MEASURES, "fake.y", measures.Measure("fake", ("summary", "spec:y", "speedup_vs_ar")))
    with pytest.raises(measures.MeasureError, match=r"fake-cpu.json for 'fake.y': no key 'spec:y'"):
        measures.render("{measure}`fake.y`", "en")
    fake_source.unlink()
    with pytest.raises(measures.MeasureError, match="fake-cpu.json .* is missing"):
        measures.render("{measure}`fake.x`", "en")
    with pytest.raises(measures.MeasureError, match="unknown measurement source"):
        measures.render("{machine}`nowhere`", "en")


def _build_notebooks(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "scripts" / "build_notebooks.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    monkeypatch.setattr(build, "ROOT", tmp_path)
    monkeypatch.setattr(build, "LESSONS", tmp_path / "lessons")
    monkeypatch.setattr(build, "NOTEBOOKS", tmp_path / "notebooks")
    for lang in LANGS:
        lesson = tmp_path / "lessons" / lang / "01-fake.md"
        lesson.parent.mkdir(parents=True)
        lesson.write_text("---\njupytext:\n  text_representation:\n    format_name: myst\n---\n\n# Fake\n\n"
                          "x runs at {measure}`fake.x` {machine}`fake`.\n\n```{code-cell} python\nprint(1)\n```\n",
                          encoding="utf-8")
    return build


def test_a_changed_result_file_makes_its_notebooks_stale(fake_source, tmp_path, monkeypatch):
    """The deliberately stale number: a notebook built when the file said 1.50× is stale once it says 2.00×."""
    build = _build_notebooks(tmp_path, monkeypatch)
    build.build()
    assert build.check() == []
    notebook = tmp_path / "notebooks" / "en" / "01-fake.ipynb"
    assert "x runs at 1.50× (Test CPU" in notebook.read_text(encoding="utf-8")
    fake_source.write_text(fake_source.read_text().replace("1.5", "2.25"))
    assert sorted(build.check()) == ["stale: notebooks/en/01-fake.ipynb", "stale: notebooks/zh/01-fake.ipynb"]
    build.build()
    assert "x runs at 2.25×" in notebook.read_text(encoding="utf-8") and build.check() == []


def test_a_broken_measure_stops_the_notebook_build(fake_source, tmp_path, monkeypatch):
    build = _build_notebooks(tmp_path, monkeypatch)
    fake_source.write_text(json.dumps({"environment": {}, "summary": {}}))
    with pytest.raises(measures.MeasureError, match=r"01-fake.md \(zh\).*no key 'spec:x'"):
        build.build()


# ---------------------------------------------------------------- the app renders them too


def test_app_renders_measures_in_both_languages():
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    name = "trained.heads.speedup"
    for lang, note in (("en", "(AMD EPYC, 2 threads"), ("zh", "（AMD EPYC，2 线程")):
        at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=300)
        at.query_params["lang"] = lang
        at.query_params["lesson"] = "13-training-a-drafter"
        at.run()
        at.switch_page("views/lessons.py")
        at.run()
        assert not at.exception, at.exception
        shown = "\n".join(str(e.value) for e in at.markdown)
        assert measures.formatted(name) in shown and note in shown, lang
        assert "{measure}" not in shown and "{machine}" not in shown


# ---------------------------------------------------------------- the baseline guard in the prose


def _flagged(path: Path, flags: list[str] | None) -> None:
    body = {"environment": {"cpu": "Test CPU", "threads": 2, "date": "2026-12-07 10:00:00 UTC"},
            "summary": {"spec:x": {"speedup_vs_ar": 6.2, "mean_accepted_length": 4.9, "draft_k": 4}}}
    if flags is not None:
        body["flags"] = flags
    path.write_text(json.dumps(body))


FLAG = "spec:x: speedup 6.20x with k = 4 (ceiling k + 1 = 5): the plain step is slower than a verify"


def test_a_flagged_figure_renders_only_with_its_caveat(fake_source, monkeypatch):
    """A result file whose guard flags its run: its speedup is refused bare, rendered with the caveat."""
    _flagged(fake_source, [FLAG])
    monkeypatch.setitem(measures.MEASURES, "fake.tau", measures.Measure("fake", ("summary", "spec:x", "mean_accepted_length")))
    assert measures.guard_state("fake") == "flagged" and measures.flags("fake.x") == [FLAG]
    with pytest.raises(measures.MeasureError, match=r"'fake.x' .* flagged by the baseline guard: spec:x: speedup 6.20x"):
        measures.render("x runs at {measure}`fake.x` {machine}`fake`.", "en")
    out = measures.render("x runs at {measure}`fake.x|caveat` {machine}`fake`.", "en")
    assert out.startswith("x runs at 6.20× (flagged: this run's one-token step was slower") and "(Test CPU" in out
    assert "6.20×（已被标记" in measures.render("{measure}`fake.x|caveat`", "zh")
    assert measures.names_in("{measure}`fake.x|caveat` and {measure}`fake.tau`") == ["fake.x", "fake.tau"]
    assert measures.render("{measure}`fake.tau`", "en") == "4.90"  # a count: a slow step does not change it
    assert not measures.is_timed("fake.tau") and measures.is_timed("fake.x")


def test_a_flagged_figure_cannot_be_a_quiz_key(fake_source, tmp_path):
    from specdec_core.course.quiz import SCHEMA_PATH, QuizError, load_bank

    folder = tmp_path / "quiz"
    folder.mkdir()
    (folder / "08-applications.yaml").write_text(
        "- id: q08-read-x\n  type: numeric\n  difficulty: mid\n  lesson: 08-applications\n  tags: [speedup]\n"
        "  source: new\n  prompt: {zh: 题, en: q}\n  answer: {measure: fake.x, tolerance: 0.1}\n"
        "  explanation: {zh: 解, en: x}\n", encoding="utf-8")
    _flagged(fake_source, [])
    assert load_bank(folder, SCHEMA_PATH)[0].answer.value == 6.2
    _flagged(fake_source, [FLAG])
    with pytest.raises(QuizError, match="q08-read-x.*'fake.x' is flagged by the baseline guard"):
        load_bank(folder, SCHEMA_PATH)


def test_a_clean_or_older_file_renders_plainly_and_says_which_it_is(fake_source):
    _flagged(fake_source, [])
    assert measures.guard_state("fake") == "clean" and measures.render("{measure}`fake.x`", "en") == "6.20×"
    assert measures.render("{measure}`fake.x|caveat`", "en") == "6.20×"  # no flag, no caveat
    _flagged(fake_source, None)  # written before the guard: unchecked, rendered as before ...
    assert measures.guard_state("fake") == "predates" and measures.render("{measure}`fake.x`", "en") == "6.20×"
    assert measures.recomputed_flags("fake")[0].startswith("spec:x: speedup 6.20x with k = 4")  # ... but listed


def test_recomputed_flags_read_the_raw_ratios_of_the_same_machine(fake_source, monkeypatch):
    profile = fake_source.parent / "cost-fake.json"
    profile.write_text(json.dumps({"forward_s": [{"tokens": 1, "batch": 1, "seconds": 0.063},
                                                 {"tokens": 3, "batch": 1, "seconds": 0.039}]}))
    _flagged(fake_source, None)
    data = json.loads(fake_source.read_text())
    data["summary"]["spec:x"]["speedup_vs_ar"] = 1.9  # below k + 1: only the profile can tell
    fake_source.write_text(json.dumps(data))
    assert measures.recomputed_flags("fake") == []
    monkeypatch.setitem(measures.SOURCES, "fake", measures.Source("benchmarks/fake-cpu.json", "§0",
                                                                  profile="benchmarks/cost-fake.json"))
    (flag,) = measures.recomputed_flags("fake")
    assert flag.startswith("r(2) = 0.619 < 0.95")


def test_which_shipped_figures_carry_the_guard_and_which_would_be_refused():
    """Explicit: the re-measurement (§17b, §18b, §18c) carries `flags`, and only the legacy table's profile raised
    one (r(2) just below the floor on the EPYC it was tuned on); the older files predate the guard, and its
    checks redone from their raw data flag exactly the Intel Xeon's (§16, r(k) 0.60-0.72) and that legacy
    profile. Re-pointing a measure at another file changes these lists."""
    assert {src: measures.guard_state(src) for src in measures.SOURCES if measures.guard_state(src) != "predates"} == {
        "baseline": "clean", "trained-k": "clean", "profile-measured": "clean", "profile-legacy": "flagged"}
    assert {src for src in measures.SOURCES if measures.recomputed_flags(src)} == {
        "retrained", "retrained-fresh", "trees-retrained", "retrained-block", "xeon-profile", "profile-legacy"}
