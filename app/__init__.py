"""specdec-lab's Streamlit app. `streamlit_app.py` is the entry point (Streamlit runs it as a script)
and `views/` holds the pages it registers with st.navigation, one file each. Beside them:

- modules several pages share: `language` (the UI language: ?lang= and the session, `t` for UI strings,
  the 中文 / English switch), `charts` (the one palette, series styles, result-file captions),
  `tokens_html` (tokens as HTML spans, a colour plus a second cue per role, and the legend),
  `widgets` (choice widgets that survive a language switch, the drafter choice, the empty-prompt hint),
  `model_store` (the model, its locks and batch server), `course` (the lesson and quiz files) and
  `trace_store` (the shipped example traces in app/traces/, for the race and the inspector);
- a page's own helper, at the root under the name of what it draws: `race_lanes` (race), `tree_view`
  (inspector), `load_view` (pays; the server page draws its load charts with it too), `server_view`
  (server);
- a page with several helpers gets a package: `lab/` (the acceptance & speedup lab).

Pages stay thin: layout and widgets. Every number they show comes from `specdec_core`; these modules
only turn engine data into HTML, tables and Streamlit state.
"""
from pathlib import Path

APP_DIR = Path(__file__).resolve().parent
ROOT = APP_DIR.parent  # the repository root: specdec_core/, lessons/, benchmarks/
