"""Your server: the lab's small bench and load test against any OpenAI-compatible server (and a baseline
with speculation off), drawn from that server's own numbers (`server_view.py`)."""
import streamlit as st

from app import server_view
from app.language import t

st.title(t("server_title"))
st.markdown(t("server_intro"))

c = st.columns(2)
endpoint = c[0].text_input(t("server_endpoint"), key="server_endpoint", placeholder="http://127.0.0.1:8080")
baseline = c[1].text_input(t("server_baseline"), key="server_baseline", placeholder="http://127.0.0.1:8081",
                           help=t("server_baseline_help"))
c = st.columns(4)
model = c[0].text_input(t("server_model_input"), key="server_model", help=t("server_model_help"))
prompts = c[1].number_input(t("server_prompts"), 1, server_view.suite_size(), 4, key="server_prompts",
                            help=t("server_prompts_help"))
max_tokens = c[2].number_input(t("server_max_tokens"), 1, 512, 32, key="server_max_tokens")
levels = c[3].text_input(t("server_levels"), "1,2", key="server_levels", help=t("server_levels_help"))
no_cache = st.checkbox(t("server_no_cache"), key="server_no_cache", help=t("server_no_cache_help"))

if st.button(t("server_run"), type="primary", key="server_run"):
    problem = server_view.check_inputs(endpoint, baseline, levels)
    if problem:
        st.warning(problem)
    else:
        settings = server_view.Settings(endpoint.strip(), baseline.strip(), model, int(prompts), int(max_tokens),
                                        server_view.parse_levels(levels), no_cache)
        bar = st.progress(0.0, text=t("server_starting"))
        st.session_state.server_result = server_view.run(
            settings, server_view.Progress(bar, server_view.total_steps(settings)))
        bar.empty()

result = st.session_state.get("server_result")
if result is None:
    st.caption(t("server_press_run"))
else:
    server_view.show(result)
