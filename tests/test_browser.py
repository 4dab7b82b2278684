"""Real-browser tests: a Streamlit server on a free port, driven by Debian's chromium via Playwright.

- every page opens without a Streamlit exception box (a screenshot of each lands in
  test-output/screenshots/<page>.png);
- the race replays a shipped trace to the end, and the exact lanes show exactly the AR text;
- a quiz question is answered and graded;
- the language follows ?lang= and the sidebar switch;
- "Your server" runs its small bench and load test against two real llama-servers (plain and with
  n-gram speculation) started on loopback, and draws its charts (skipped without a llama-server binary);
- 6 simultaneous sessions (one browser, 6 contexts) each run a short live race on the real model
  and every one shows exactly what `sd.generate` gives in this process, with the app's batched
  decoding and again with ?decode=lock; the test reports how much sooner the last one finishes batched.

The browser is Debian's chromium at /usr/bin/chromium (`apt-get install -y chromium`, or `make browser`
as root); never a browser downloaded by `playwright install`. Without it the tests skip, except
under CI (CI=true), where a missing browser is a failure.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser  # every test here drives a real Chromium

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("SPECDEC_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = ROOT / "test-output" / "screenshots"
VIEWPORT = {"width": 1400, "height": 900}
PAGES = {"home": "", "race": "race", "inspector": "inspector", "lab": "lab", "pays": "pays", "server": "server",
         "quiz": "quiz", "lessons": "lessons"}  # page -> url path
TITLES = {"home": "home_title", "race": "race_title", "inspector": "insp_title", "lab": "lab_title",
          "pays": "pays_title", "server": "server_title", "quiz": "quiz_title",
          "lessons": "lessons_title"}  # page -> i18n key of its h1
ROUND_TRIP = ("inspector", "lab", "quiz", "lessons")  # pages with selectboxes of translated labels
LANES = ("ar", "nar", "jacobi", "spec")
EXACT_LANES = ("ar", "jacobi", "spec")  # lanes whose text must equal AR's (NAR garbles on purpose)
LIVE_TOKENS = 8  # the live-race slider's minimum
SESSIONS = 6  # concurrent live races, run twice: batched and under the lock

# Torch threads of the server (and of this process while it computes the expected text, so both sum
# floats the same way). One thread: on a 2-core machine shared with other work, two torch threads
# fight over the cores and decode several times slower than one (measured here under load: 8.7 s vs 1.4 s for 8 tokens).
THREADS = int(os.environ.get("SPECDEC_TEST_THREADS") or os.environ.get("OMP_NUM_THREADS") or 1)

# Budgets (ms). The first model load (and the lab's cost-model measurement) is slow on a busy CPU.
RERUN_MS = 60_000
MODEL_MS = 240_000
RACES_MS = 600_000  # concurrent live races: under the lock they run one after another


def _strings(lang: str) -> dict:
    return json.loads((ROOT / "app" / "i18n" / f"{lang}.json").read_text(encoding="utf-8"))


EN, ZH = _strings("en"), _strings("zh")
STRINGS = {"en": EN, "zh": ZH}
LANG_NAMES = {"zh": "中文", "en": "English"}  # the sidebar switch's labels


def _missing(message: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} (CI=true: a missing browser is a failure, not a skip)")
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser():
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        _missing(f"chromium not found at {CHROMIUM}: install it with `apt-get install -y chromium` "
                 "(as root; or `make browser`). Never `playwright install`.")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright Python package is missing: pip install -r requirements-dev.txt")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(browser):
    """A Streamlit server for this module; its log is kept in test-output/streamlit-browser.log."""
    port = _free_port()
    log_path = ROOT / "test-output" / "streamlit-browser.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPECDEC_ANIMATION_DELAY": "0", "PYTHONUNBUFFERED": "1",
           "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false", "OMP_NUM_THREADS": str(THREADS)}
    env.pop("SPECDEC_APP_MODEL", None)  # the real model, whatever the caller's shell says
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app/streamlit_app.py", "--server.address", "127.0.0.1",
         "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"streamlit exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"streamlit did not answer /_stcore/health in 90 s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def context(browser):
    ctx = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
    yield ctx
    ctx.close()


@pytest.fixture()
def page(context):
    p = context.new_page()
    yield p
    p.close()


# ------------------------------------------------------------------------------------------ helpers

_STATE_JS = """(wanted) => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app) return false;
  const state = app.getAttribute('data-test-script-state');
  if (wanted === 'running') return state === 'running';
  const widget = document.querySelector('[data-testid="stStatusWidget"]');
  return app.getAttribute('data-test-connection-state') === 'CONNECTED' && state === 'notRunning'
    && !(widget && /running/i.test(widget.innerText));
}"""


def wait_idle(page, timeout: int = RERUN_MS, settle_ms: int = 1500) -> None:
    """Wait until the script run a click/goto started is over: the app is connected, its script state
    is notRunning and the running indicator is gone. Polls on a timer (not on animation frames,
    which a busy or background page may not draw)."""
    from playwright.sync_api import TimeoutError as PWTimeout

    if settle_ms > 0:  # give a rerun the moment it needs to start; a fast one may be over before we look
        try:  # (a timeout of 0 would mean "no timeout" to Playwright)
            page.wait_for_function(_STATE_JS, arg="running", timeout=settle_ms, polling=100)
        except PWTimeout:
            pass
    page.wait_for_function(_STATE_JS, arg="idle", timeout=timeout, polling=250)


def assert_no_exception(page, where: str) -> None:
    boxes = page.locator('[data-testid="stException"]')
    if boxes.count():
        pytest.fail(f"{where}: Streamlit exception box:\n{boxes.first.inner_text()[:3000]}")


def open_page(page, base: str, name: str, lang: str = "en", timeout: int = RERUN_MS) -> None:
    page.goto(f"{base}/{PAGES[name]}?lang={lang}", wait_until="domcontentloaded", timeout=timeout)
    wait_idle(page, timeout=timeout, settle_ms=5000)
    assert_no_exception(page, f"{name} ({lang})")


def title_text(page) -> str:
    return page.locator('[data-testid="stMain"] h1').first.inner_text().strip()


def screenshot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.wait_for_timeout(600)  # let CSS transitions (progress bars, alerts) finish
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def scroll_to(locator, above: int = 160) -> None:
    """Scroll Streamlit's scrolling container so the element sits `above` px below the top (for
    screenshots that show the interesting part of a page)."""
    locator.first.evaluate("""(el, above) => {
      el.scrollIntoView({block: 'start'});
      let box = el.parentElement;
      while (box && !(box.scrollHeight > box.clientHeight && /auto|scroll/.test(getComputedStyle(box).overflowY)))
        box = box.parentElement;
      (box || document.scrollingElement).scrollBy(0, -above);
    }""", above)


def click(locator, timeout: int = RERUN_MS) -> None:
    """Click an element after scrolling it to the middle of the view (Streamlit's sticky header
    would otherwise sit over an element Playwright scrolled to the top edge)."""
    locator.wait_for(state="visible", timeout=timeout)
    locator.evaluate("el => el.scrollIntoView({block: 'center'})")
    locator.click(timeout=timeout)


def click_key(page, key: str, timeout: int = RERUN_MS) -> None:
    """Click the button of the widget with this key (Streamlit tags keyed elements with st-key-<key>)."""
    click(page.locator(f".st-key-{key} button").first, timeout)


_LANES_JS = """(titles) => {
  const out = {};
  for (const col of document.querySelectorAll('[data-testid="stColumn"]')) {
    const h = col.querySelector('h4');
    if (!h) continue;
    const name = Object.keys(titles).find(k => h.textContent.trim() === titles[k]);
    if (!name) continue;
    const lane = col.querySelector('.sd-lane');
    if (!lane) { out[name] = null; continue; }
    out[name] = Array.from(lane.querySelectorAll('span.sd-tok:not(.sd-rejected)'))
      .map(s => s.textContent).join('');
  }
  return out;
}"""


def lane_texts(page, lang: str) -> dict:
    """lane -> the text its token spans show (struck-through rejected drafts left out)."""
    titles = {lane: STRINGS[lang][f"lane_{lane}"] for lane in LANES}
    raw = page.evaluate(_LANES_JS, titles)
    return {lane: None if text is None else text.replace("\u200b", "") for lane, text in raw.items()}


def shown(pieces: list[str]) -> str:
    """Token pieces as the page's token spans show them (newline -> ↵)."""
    return "".join(pieces).replace("\r", "").replace("\n", "↵")


def trace_pieces(trace) -> list[str]:
    return [tok.piece for step in trace.steps for tok in step.emitted]


# ------------------------------------------------------------------------------------------ tests

def switch_language(page, lang: str) -> None:
    """Use the sidebar's 中文 / English switch, wait for the rerun and for the title in that language."""
    click(page.locator(".st-key-lang_widget").get_by_text(LANG_NAMES[lang], exact=True))
    wait_idle(page)
    page.wait_for_function(
        """(langs) => { const h = document.querySelector('[data-testid="stMain"] h1');
                        return !!document.querySelector('[data-testid="stException"]')
                               || (h && langs.includes(h.innerText.trim())); }""",
        arg=[STRINGS[lang][key] for key in TITLES.values()], timeout=RERUN_MS, polling=250)


def test_every_page_opens(server, page):
    """Every page opens in English, then switches to Chinese with the sidebar switch (and back, where
    it has selectboxes of translated labels): no exception box, the right title each time. The lab page loads the model and measures this machine's costs
    (slow the first time). Every page is checked and shot before the test reports what went wrong,
    so one broken page does not hide another."""
    problems = []
    for name in PAGES:
        start = time.monotonic()
        # Back to English too where a selectbox shows language-dependent labels: Streamlit 1.67 keeps
        # a selectbox's value as its label, so a stale label can come back after a round trip.
        for visit, lang in enumerate(("en", "zh", "en") if name in ROUND_TRIP else ("en", "zh")):
            first = visit == 0
            try:
                if first:
                    open_page(page, server, name, "en", timeout=MODEL_MS if name == "lab" else RERUN_MS)
                else:
                    switch_language(page, lang)
                    assert_no_exception(page, f"{name} ({lang})")
                got = title_text(page)
                if got != STRINGS[lang][TITLES[name]]:
                    problems.append(f"{name} ({lang}): title {got!r}, expected {STRINGS[lang][TITLES[name]]!r}")
                if name == "inspector" and first:  # step on to a step with drafts: a richer view
                    click_key(page, "insp_jump_reject")
                    wait_idle(page)
                    click_key(page, "insp_next")
                    wait_idle(page)
                    assert_no_exception(page, "inspector (en) after 'first rejection' and 'next'")
            except (Exception, pytest.fail.Exception) as err:  # an exception box, a timeout: note it, go on
                message = " | ".join(str(err).splitlines()[:3]) or repr(err)
                where = f"{name} ({lang})"
                problems.append(message if message.startswith(where) else f"{where}: {message}")
            # English: race, quiz and server are shot after their own tests; Chinese: every page (docs/screenshots/<page>-zh.png)
            if (first and name not in ("race", "quiz", "server")) or lang == "zh":
                screenshot(page, name if lang == "en" else f"{name}-zh")
        print(f"{name}: {time.monotonic() - start:.1f} s")
    assert not problems, "\n".join(problems)


def test_race_replays_to_the_end(server, page):
    import specdec_core as sd

    index = json.loads((ROOT / "app" / "traces" / "index.json").read_text(encoding="utf-8"))
    first = index[0]  # the race's example selectbox starts on the first entry
    ar = sd.Trace.load(ROOT / "app" / "traces" / first["lanes"]["ar"])
    expected = shown(trace_pieces(ar))

    open_page(page, server, "race", "en")
    assert title_text(page) == EN["race_title"]
    click_key(page, "race_end")
    wait_idle(page)
    assert_no_exception(page, "race after jump to end")
    page.get_by_text(EN["race_summary_h"], exact=True).wait_for(timeout=RERUN_MS)
    texts = lane_texts(page, "en")
    assert set(texts) == set(LANES), texts
    for lane in EXACT_LANES:
        assert texts[lane] == expected, f"{lane} lane shows {texts[lane]!r}, AR trace says {expected!r}"
    assert texts["nar"], "the NAR lane shows nothing"
    # Play from the start runs to the end by itself (animation delay 0 in tests).
    click_key(page, "race_reset")
    wait_idle(page)
    click_key(page, "race_play")
    wait_idle(page)
    assert_no_exception(page, "race after play")
    assert lane_texts(page, "en")["ar"] == expected
    scroll_to(page.locator('[data-testid="stColumn"] h4'), 110)
    screenshot(page, "race")


def test_quiz_answer_is_graded(server, page):
    from specdec_core import quiz

    q = next(q for q in quiz.questions_for() if q.type == "single" and not q.experiment)
    open_page(page, server, "quiz", "en")
    radio = page.locator(f".st-key-quiz_in_{q.id}")
    radio.wait_for(timeout=RERUN_MS)
    click(radio.locator('[data-testid="stRadioOption"]').first)
    wait_idle(page)
    click_key(page, f"quiz_submit_{q.id}")
    wait_idle(page)
    assert_no_exception(page, "quiz after submit")
    # st.success/st.error turn a leading emoji into the alert's icon: match the words after it.
    right, wrong = (EN[k].split(" ", 1)[-1] for k in ("quiz_right", "quiz_wrong"))
    verdict = page.get_by_text(right, exact=True).or_(page.get_by_text(wrong, exact=True))
    verdict.first.wait_for(timeout=RERUN_MS)
    page.get_by_text(EN["quiz_explanation"]).first.wait_for(timeout=RERUN_MS)
    scroll_to(page.locator(f".st-key-quiz_retry_{q.id}").locator("xpath=ancestor::*[@data-testid='stVerticalBlock'][1]"), 80)
    screenshot(page, "quiz")


@pytest.mark.llama_server
def test_your_server_page_measures_real_llama_servers(server, page):
    """The page's whole path in a browser: two llama-servers (plain, and ngram-simple speculation) on
    free loopback ports, their URLs typed in, a small run (2 prompts, 16 tokens, C = 1, 2), then the
    bench, speculative-figures and load-test sections with their charts, and no exception box."""
    from playwright.sync_api import TimeoutError as PWTimeout
    from test_remote import llama_server_binary, start_llama_server

    binary = llama_server_binary()
    if binary is None:
        pytest.skip("no llama-server binary: run `make llama-server` or set SPECDEC_LLAMA_SERVER")
    plain, plain_url = start_llama_server(binary, parallel=2)
    spec, spec_url = start_llama_server(binary, "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                                        "--spec-ngram-simple-size-m", "16", parallel=2)
    try:
        open_page(page, server, "server", "en")
        for key, value in (("server_endpoint", spec_url), ("server_baseline", plain_url), ("server_prompts", "2"),
                           ("server_max_tokens", "16"), ("server_levels", "1,2")):
            box = page.locator(f".st-key-{key} input").first
            box.fill(value)
            box.press("Enter")
            wait_idle(page)
        click_key(page, "server_run", timeout=RERUN_MS)
        for heading in ("server_bench_h", "server_spec_h", "server_load_h"):
            page.get_by_text(EN[heading], exact=True).first.wait_for(timeout=MODEL_MS)
        wait_idle(page)
        assert_no_exception(page, "server after a run")
        for chart in ("server_tps", "server_per_pos", "server_throughput"):
            # Plotly draws after the script run is over (its component loads lazily): wait for each plot
            # rather than counting at once — a busy CI machine counted 0 for the first one.
            plot = page.locator(f".st-key-{chart} .js-plotly-plot")
            try:
                plot.first.wait_for(timeout=RERUN_MS)
            except PWTimeout:
                pytest.fail(f"no {chart} chart; its element: {page.locator(f'.st-key-{chart}').count()}")
            assert plot.count() == 1, f"{plot.count()} {chart} charts"
        scroll_to(page.get_by_text(EN["server_bench_h"], exact=True), 80)
        screenshot(page, "server")
    finally:
        for proc in (plain, spec):
            proc.kill()
            proc.wait()


def test_language_query_and_sidebar_switch(server, page):
    open_page(page, server, "race", "zh")
    assert title_text(page) == ZH["race_title"]
    switch_language(page, "en")
    assert_no_exception(page, "race after switching to English")
    assert title_text(page) == EN["race_title"]
    assert "lang=en" in page.url
    switch_language(page, "zh")
    assert_no_exception(page, "race after switching back to Chinese")
    assert title_text(page) == ZH["race_title"]
    assert "lang=zh" in page.url
    scroll_to(page.locator('[data-testid="stColumn"] h4'), 110)
    screenshot(page, "race-zh")


def _each(pages, action) -> None:
    """Do `action` on every page before waiting on any: the server works on all sessions at once."""
    for p in pages:
        action(p)


def _concurrent_races(browser, server: str, langs: list[str], expected: dict, decode: str) -> float:
    """Open one session per entry of `langs` on the race page with ?decode=`decode`, set each to a live
    race of LIVE_TOKENS tokens, click every Run at once, and check that every session ends showing
    `expected[lang]` in its exact lanes. Returns the seconds from the clicks until the last was done."""
    phase = time.monotonic()
    contexts = [browser.new_context(viewport=VIEWPORT) for _ in langs]
    try:
        pages = [c.new_page() for c in contexts]
        sessions = list(zip(pages, langs))
        # One page after the other, switching to live as soon as the toggle shows: that cuts the first
        # visit's autoplay short (a widget change interrupts the running script), which all sessions
        # would otherwise draw at once on 2 cores.
        for p, lang in sessions:
            p.goto(f"{server}/race?lang={lang}&decode={decode}", wait_until="commit", timeout=RERUN_MS)
            click(p.locator(".st-key-race_live label").first)
        for i, p in enumerate(pages):
            p.locator(".st-key-race_max_new input[type='range']").wait_for(state="attached", timeout=RERUN_MS)
            wait_idle(p, settle_ms=0)
            assert_no_exception(p, f"[{decode}] session {i} race page, live mode")

        def fewest_tokens(p):
            slider = p.locator(".st-key-race_max_new input[type='range']")
            slider.focus(timeout=RERUN_MS)
            slider.press("Home")  # the slider's minimum

        _each(pages, fewest_tokens)
        for i, p in enumerate(pages):
            p.wait_for_function(
                "(n) => document.querySelector('.st-key-race_max_new [data-testid=stSliderThumbValue]')"
                "?.innerText.trim() === n", arg=str(LIVE_TOKENS), timeout=RERUN_MS, polling=250)
            wait_idle(p, settle_ms=0)
            assert p.locator(".st-key-race_max_new input[type='range']").input_value() == str(LIVE_TOKENS)
            assert p.locator(".st-key-race_end button").is_disabled(), f"[{decode}] session {i}: lanes before the run"

        start = time.monotonic()
        print(f"[{decode}] {len(pages)} sessions set up: {start - phase:.1f} s")
        _each(pages, lambda p: click(p.locator(".st-key-race_run button")))  # all at once
        for i, p in enumerate(pages):
            # Done when the run's closing rerun has enabled the replay controls and the app is idle.
            # An error (exception box or st.error) ends the wait too, and fails with its text.
            p.wait_for_function("""() => { const b = document.querySelector('.st-key-race_end button');
                return (b && !b.disabled) || !!document.querySelector(
                  '[data-testid="stException"], [data-testid="stAlertContentError"]'); }""",
                                timeout=RACES_MS, polling=500)
            wait_idle(p, timeout=RACES_MS, settle_ms=0)
            assert_no_exception(p, f"[{decode}] session {i} after its live race")
            errors = p.locator('[data-testid="stAlertContentError"]')
            assert not errors.count(), f"[{decode}] session {i}: {errors.first.inner_text()}"
        elapsed = time.monotonic() - start
        _each(pages, lambda p: click(p.locator(".st-key-race_end button")))
        for i, (p, lang) in enumerate(sessions):
            p.get_by_text(STRINGS[lang]["race_summary_h"], exact=True).wait_for(timeout=RERUN_MS)
            wait_idle(p, settle_ms=0)
            assert_no_exception(p, f"[{decode}] session {i} after jump to end")
            texts = lane_texts(p, lang)
            for lane in EXACT_LANES:
                assert texts.get(lane) == expected[lang], (
                    f"[{decode}] session {i} ({lang}) {lane}: {texts.get(lane)!r} != {expected[lang]!r}")
            assert texts.get("nar"), f"[{decode}] session {i}: empty NAR lane"
        print(f"[{decode}] {len(pages)} live races ({LIVE_TOKENS} tokens, 4 lanes each): the last done {elapsed:.1f} s "
              "after the clicks")
        if decode == "batched" and len(pages) > 1:
            scroll_to(pages[0].locator('[data-testid="stColumn"] h4'), 110)
            screenshot(pages[0], "race-live")
        return elapsed
    finally:
        for c in contexts:
            c.close()


def test_concurrent_live_races_match_single_session(server, browser):
    """SESSIONS sessions (one browser, a context each) start a live race (4 lanes, 8 new tokens) at
    once, first with the app's batched decoding (ar and spec lanes of all sessions share the batch
    server's forwards), then with ?decode=lock (every decode under the one model lock, one session
    after another). Every session must end showing exactly the output `sd.generate` gives in this
    process, both times. Half the sessions are Chinese (the zh default prompt), so two different
    prompts are decoded side by side. One race alone runs first, so that neither timed round pays for
    the server's one-time work (loading the model, measuring the n-gram drafter's verify costs). The
    test reports how much sooner the last session finishes when batched (printed, and kept in
    test-output/browser-concurrency.json)."""
    import specdec_core as sd

    import torch

    lm = sd.load_model("smollm2-135m")
    langs = ["en" if i % 2 == 0 else "zh" for i in range(SESSIONS)]
    expected = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        for lang in sorted(set(langs)):
            res = sd.generate(lm, STRINGS[lang]["race_default_prompt"],
                              sd.GenerationConfig(mode="ar", max_new_tokens=LIVE_TOKENS))
            expected[lang] = shown(trace_pieces(res.trace))
    finally:
        torch.set_num_threads(threads)
    assert expected["en"] != expected["zh"]

    _concurrent_races(browser, server, ["en"], expected, "batched")  # the warm-up race
    batched = _concurrent_races(browser, server, langs, expected, "batched")
    locked = _concurrent_races(browser, server, langs, expected, "lock")
    report = {"sessions": SESSIONS, "new_tokens": LIVE_TOKENS, "lanes": len(LANES), "threads": THREADS,
              "last_done_s": {"batched": round(batched, 2), "lock": round(locked, 2)},
              "lock_over_batched": round(locked / batched, 3)}
    (ROOT / "test-output" / "browser-concurrency.json").write_text(json.dumps(report, indent=1))
    print(f"the last of {SESSIONS} sessions finished {locked / batched:.2f}x sooner batched ({batched:.1f} s) "
          f"than under the lock ({locked:.1f} s)")
