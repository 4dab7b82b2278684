"""Lessons: the lesson text from lessons/<lang>/*.md, with its notebook and its quiz."""
import streamlit as st

import common
from common import t

ss = st.session_state
lang = common.lang()

st.title(t("lessons_title"))
stems = common.lesson_stems()
if not stems:
    st.info(t("lessons_none"))
    st.stop()

wanted = st.query_params.get("lesson")
if wanted in stems and "lessons_pick" not in ss:
    ss.lessons_pick = wanted
stem = common.selectbox(st, t("lessons_pick"), stems, "lessons_pick", lambda s: f"{s[:2]} · {common.lesson_title(s)}")

path, used = common.lesson_file(stem)
if path is None:
    st.error(t("lessons_missing", stem=stem))
    st.stop()
if used != lang:
    st.info(t("lessons_other_lang"))
source = path.read_text(encoding="utf-8")

top = st.columns([3, 2, 2])
notebook = common.ROOT / "notebooks" / used / f"{stem}.ipynb"
rel = notebook.relative_to(common.ROOT)
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

sections = common.lesson_sections(source)
if sections:
    with st.expander(t("lessons_contents")):
        st.markdown("\n".join(f"- [{title}](#{anchor})" for anchor, title in sections))

st.divider()
st.markdown(common.myst_to_markdown(source), unsafe_allow_html=True)
st.divider()
st.caption(t("lessons_source", path=str(path.relative_to(common.ROOT))))
