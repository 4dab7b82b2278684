"""Lessons: the lesson text from lessons/<lang>/NN-*.md with each code cell's recorded output, its
notebook and its quiz; and the glossary."""
import streamlit as st

from app import ROOT, course, language, widgets
from app.language import t

ss = st.session_state
lang = language.lang()

st.title(t("lessons_title"))
stems = course.lesson_stems()
if not stems:
    st.info(t("lessons_none"))
    st.stop()
pages = stems + [course.GLOSSARY]

wanted = st.query_params.get("lesson")
if wanted in pages and "lessons_pick" not in ss:
    ss.lessons_pick = wanted
stem = widgets.selectbox(st, t("lessons_pick"), pages, "lessons_pick",
                         lambda s: "📖 " + t("lessons_glossary") if s == course.GLOSSARY else f"{s[:2]} · {course.lesson_title(s)}")

path, used = course.lesson_file(stem)
if path is None:
    st.error(t("lessons_missing", stem=stem))
    st.stop()
if used != lang:
    st.info(t("lessons_other_lang"))
source = path.read_text(encoding="utf-8")

if stem == course.GLOSSARY:
    st.markdown(course.myst_to_markdown(source, used), unsafe_allow_html=True)
    st.caption(t("lessons_source", path=str(path.relative_to(ROOT))))
    st.stop()

top = st.columns([3, 2, 2])
notebook = ROOT / "notebooks" / used / f"{stem}.ipynb"
rel = notebook.relative_to(ROOT)
with top[0]:
    st.markdown(t("lessons_notebook", path=str(rel)))
if notebook.is_file():
    top[1].download_button("⬇ " + t("lessons_download_nb"), notebook.read_bytes(), file_name=notebook.name,
                           mime="application/x-ipynb+json", key="lessons_download")
else:
    top[1].caption(t("lessons_nb_missing"))


def _to_quiz():
    ss.quiz_lesson = stem


if top[2].button("❓ " + t("lessons_to_quiz"), on_click=_to_quiz, key="lessons_quiz"):
    st.switch_page("views/quiz.py")

sections = course.lesson_sections(source)
if sections:
    with st.expander(t("lessons_contents")):
        st.markdown("\n".join(f"- [{title}](#{anchor})" for anchor, title in sections))

st.divider()
course.show_lesson(source, used, stem)
st.divider()
st.caption(t("lessons_source", path=str(path.relative_to(ROOT))))
