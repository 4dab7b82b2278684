"""Home: parallel decoding through a kitchen, a map of the app, the model's status."""
import streamlit as st

from app import course, model_store
from app.language import t

import specdec_core as sd

st.title(t("home_title"))
st.markdown(t("home_tagline"))

left, right = st.columns([3, 2], gap="large")
with left:
    st.subheader(t("home_kitchen_h"))
    st.markdown(t("home_kitchen"))
    st.subheader(t("home_terms_h"))
    st.markdown(t("home_terms"))
with right:
    st.subheader(t("home_map_h"))
    for path, key in [("views/race.py", "race"), ("views/inspector.py", "inspector"), ("views/lab.py", "lab"),
                      ("views/pays.py", "pays"), ("views/quiz.py", "quiz"), ("views/lessons.py", "lessons")]:
        st.page_link(path, label=t(f"nav_{key}"))
        st.caption(t(f"home_map_{key}"))

st.subheader(t("home_lessons_h"))
cols = st.columns(3)
for i, stem in enumerate(course.lesson_stems()):
    cols[i % 3].markdown(f"**{stem[:2]}** · {course.lesson_title(stem)}")
st.page_link("views/lessons.py", label=t("home_open_lessons"), icon="📚")

st.subheader(t("home_status_h"))
lm = model_store.loaded_model()
name = model_store.model_name()
if lm is None:
    device = sd.models.resolve_device("auto")
    dtype = sd.models.resolve_dtype("auto", name, device)
    st.markdown(t("home_status_planned", name=name, device=str(device), dtype=str(dtype).replace("torch.", "")))
    if st.button(t("home_load_model"), key="home_load"):
        lm = model_store.get_model()
        if lm is not None:
            st.rerun()
else:
    st.success(t("home_status_loaded", name=lm.name, device=str(lm.device), dtype=str(lm.dtype).replace("torch.", ""),
                 ctx=lm.context_length))
st.info(t("home_weights_note"))
if name == "tiny":
    st.warning(t("home_tiny_note"))
st.caption(t("home_lang_note"))
