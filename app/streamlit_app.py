"""specdec-lab: an interactive bilingual lab on parallel (speculative) decoding.

Run from the repository root:  make app   (or: .venv/bin/python -m streamlit run app/streamlit_app.py)

The pages live in app/views/, one file each, registered below with st.navigation. (Not app/pages/:
Streamlit treats a folder named `pages` as a legacy multipage app, and AppTest.switch_page then runs
a page without this script, i.e. without the language set-up and the sidebar.)
"""
from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:  # Streamlit runs this file and the views as scripts: the root makes `app.*` importable
    sys.path.insert(0, ROOT)

from app import language, model_store, tokens_html  # noqa: E402  (after the path fix)

st.set_page_config(page_title="specdec-lab", page_icon="🍳", layout="wide")
language.init_lang()
t = language.t

PAGES = [
    st.Page("views/home.py", title=t("nav_home"), icon="🏠", url_path="home", default=True),
    st.Page("views/race.py", title=t("nav_race"), icon="🏁", url_path="race"),
    st.Page("views/inspector.py", title=t("nav_inspector"), icon="🔍", url_path="inspector"),
    st.Page("views/lab.py", title=t("nav_lab"), icon="📈", url_path="lab"),
    st.Page("views/pays.py", title=t("nav_pays"), icon="⚖️", url_path="pays"),
    st.Page("views/server.py", title=t("nav_server"), icon="🛰️", url_path="server"),
    st.Page("views/quiz.py", title=t("nav_quiz"), icon="❓", url_path="quiz"),
    st.Page("views/lessons.py", title=t("nav_lessons"), icon="📚", url_path="lessons"),
]

page = st.navigation(PAGES)
language.language_switch()
with st.sidebar:
    st.caption(t("sidebar_model", name=model_store.model_name()))
    tokens_html.show_legend()
page.run()
