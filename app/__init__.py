"""specdec-lab's Streamlit app. `streamlit_app.py` is the entry point (Streamlit runs it as a script)
and `views/` holds the pages it registers with st.navigation; the modules they share:

- `language`: the UI language (?lang= and the session), `t` for UI strings, the 中文 / English switch;
- `tokens_html`: tokens as HTML spans, a colour plus a second cue per role, and the legend;
- `trace_store`: the shipped example traces (app/traces/);
- `widgets`: choice widgets that survive a language switch, the drafter choice, the empty-prompt hint;
- `model_store`: the model, its locks and batch server; `course`: the lesson files.

Helpers of one page live beside it: `race_lanes` (race), `lab_prompts`, `survival` and `calibration_view` (lab),
`load_view` (pays).

Pages stay thin: layout and widgets. Every number they show comes from `specdec_core`; these modules
only turn engine data into HTML, tables and Streamlit state.
"""
from pathlib import Path

APP_DIR = Path(__file__).resolve().parent
ROOT = APP_DIR.parent  # the repository root: specdec_core/, lessons/, benchmarks/
