"""The course as the app shows it: lesson files, their titles and sections, MyST turned into
Streamlit Markdown, the code cells with the outputs recorded by `make lesson-outputs`, and the
glossary.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import streamlit as st

from app import ROOT
from app.language import LANGS, lang, t
from specdec_core import lesson_outputs
from specdec_core.course import measures

LESSONS = ROOT / "lessons"
GLOSSARY = "glossary"  # lessons/<lang>/glossary.md: a page of its own, not a lesson


def lesson_stems() -> list[str]:
    """Lesson file stems (NN-name) present in either language, in order."""
    return sorted({p.stem for lg in LANGS for p in (LESSONS / lg).glob(lesson_outputs.LESSON_GLOB)})


def lesson_file(stem: str, language: str | None = None) -> tuple[Path | None, str]:
    """The lesson (or glossary) in the wanted language, else in the other one: (path, language used)."""
    language = language or lang()
    for lg in (language, *[x for x in LANGS if x != language]):
        path = LESSONS / lg / f"{stem}.md"
        if path.is_file():
            return path, lg
    return None, language


@lru_cache(maxsize=64)
def _title_of(path: str, mtime: float) -> str:
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return Path(path).stem


def lesson_title(stem: str) -> str:
    path, _ = lesson_file(stem)
    if path is None:
        return stem
    title = _title_of(str(path), path.stat().st_mtime)
    return title.split("·", 1)[1].strip() if "·" in title else title


_FENCE = re.compile(r"^(\s*)```+\s*\{([\w-]+)\}\s*(\S*)\s*$")
_TARGET = re.compile(r"^\(([\w\-.:]+)\)=\s*$")
_ROLE = re.compile(r"\{[\w-]+\}`([^`]*)`")
_OPTION = re.compile(r"^\s*:[\w-]+:")


def myst_to_markdown(text: str, language: str = "en") -> str:
    """Jupytext MyST markdown -> Streamlit markdown: drop the YAML front matter, turn
    ```{code-cell} python fences (and their option lines) into ```python, `(id)=` targets into
    HTML anchors, other directives into plain fenced text, {measure} and {machine} roles into the
    shipped measurement they name (`measures.render`), and any other {role}`x` into `x`."""
    lines = measures.render(text, language).splitlines()
    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
        if end is not None:
            lines = lines[end + 1:]
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        target = _TARGET.match(line)
        if fence:
            indent, name, arg = fence.groups()
            lang_ = "python" if name == "code-cell" else "text"
            out.append(f"{indent}```{lang_}")
            i += 1
            # cell options: ":key: value" lines, or a "---" ... "---" YAML block right after the fence
            if i < len(lines) and lines[i].strip() == "---":
                close = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "---"), i)
                i = close + 1
            while i < len(lines) and _OPTION.match(lines[i]):
                i += 1
            continue
        if target:
            out += [f'<a id="{target.group(1)}"></a>', ""]
        else:
            out.append(_ROLE.sub(r"`\1`", line))
        i += 1
    return "\n".join(out).strip() + "\n"


def lesson_sections(text: str) -> list[tuple[str, str]]:
    """(anchor id, heading) of every `(id)=` target followed by a heading, in order."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines[:-1]):
        m = _TARGET.match(line)
        if m and lines[i + 1].lstrip().startswith("#"):
            found.append((m.group(1), lines[i + 1].lstrip("# ").strip()))
    return found


def lesson_blocks(text: str) -> list[tuple[str, str]]:
    """The lesson as ("markdown", text) and ("code", cell source) blocks, in order. A code block's
    source is the cell body as `lesson_outputs.code_cells` reads it (the key of its outputs)."""
    blocks: list[tuple[str, str]] = []
    last = 0
    for match in lesson_outputs.CODE_CELL.finditer(text):
        blocks.append(("markdown", text[last:match.start()]))
        blocks.append(("code", match.group(1).strip()))
        last = match.end()
    blocks.append(("markdown", text[last:]))
    return [(kind, body) for kind, body in blocks if kind == "code" or body.strip()]


def _show_output(output: dict, key: str) -> None:
    if output["kind"] == "plotly":
        st.plotly_chart(output["figure"], key=key)
    elif output["kind"] == "html":
        st.html(output["html"])
    else:
        st.code(output["text"].rstrip("\n"), language=None)


def show_lesson(text: str, language: str, stem: str) -> None:
    """Render a lesson: its prose, each code cell and, under it, the output recorded for that cell."""
    recorded = lesson_outputs.load(language, stem)
    if recorded:
        st.caption(t("lessons_outputs_recorded", machine=recorded.machine, date=recorded.date, commit=recorded.commit))
    else:
        st.caption(t("lessons_outputs_none"))
    for i, (kind, body) in enumerate(lesson_blocks(text)):
        if kind == "markdown":
            try:
                st.markdown(myst_to_markdown(body, language), unsafe_allow_html=True)
            except measures.MeasureError as err:  # a measurement the shipped files no longer hold
                st.error(str(err))
            continue
        st.code("\n".join(line for line in body.splitlines() if not _OPTION.match(line)), language="python")
        outputs = recorded.outputs_for(body) if recorded else None
        if outputs is None:
            if recorded:
                st.caption(t("lessons_output_stale"))
            continue
        for j, output in enumerate(outputs):
            _show_output(output, key=f"lesson-out-{stem}-{i}-{j}")
