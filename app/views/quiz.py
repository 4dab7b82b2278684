"""Quiz: every question of the bank, graded with per-choice feedback; "predict, then run" questions
run their experiment on the model after the learner answers."""
import streamlit as st

from app import course, language, model_store, widgets
from app.language import t

import specdec_core as sd
from specdec_core import quiz

ss = st.session_state
lang = language.lang()

st.title(t("quiz_title"))
st.markdown(t("quiz_intro"))

try:
    bank = quiz.questions_for()  # the whole bank, loaded and validated once per process
except sd.SpecDecError as err:  # QuizError: a malformed bank
    st.error(t("quiz_bad_bank", cause=str(err)))
    st.stop()

lessons = sorted({q.lesson for q in bank})
if ss.get("quiz_lesson") not in (None, "all", *lessons):
    del ss["quiz_lesson"]  # e.g. a lesson without questions, picked on the lessons page
c = st.columns([3, 2, 2])
LESSONS = ["all", *lessons]
DIFFICULTIES = ["all", "easy", "mid", "hard"]
lesson = widgets.selectbox(c[0], t("quiz_lesson"), LESSONS, "quiz_lesson",
                           lambda s: t("all") if s == "all" else f"{s[:2]} · {course.lesson_title(s)}")
difficulty = widgets.selectbox(c[1], t("quiz_difficulty"), DIFFICULTIES, "quiz_difficulty",
                               lambda d: t("all") if d == "all" else t(f"difficulty_{d}"))
only_experiments = c[2].checkbox(t("quiz_only_experiments"), key="quiz_only_exp")
questions = quiz.questions_for(None if lesson == "all" else lesson, None if difficulty == "all" else difficulty, bank=bank)
if only_experiments:
    questions = [q for q in questions if q.experiment]

answers = ss.setdefault("quiz_answers", {})  # question id -> {"answer": ..., "correct": bool}
results = ss.setdefault("quiz_experiments", {})  # question id -> ExperimentResult (or an error string)

answered = [q for q in questions if q.id in answers]
right = sum(answers[q.id]["correct"] for q in answered)
s = st.columns([2, 2, 2, 3])
s[0].metric(t("quiz_score"), f"{right} / {len(questions)}")
s[1].metric(t("quiz_answered"), f"{len(answered)} / {len(questions)}")
s[2].metric(t("quiz_total_bank"), len(bank))


def _retry_all():
    for q in questions:
        answers.pop(q.id, None)
        results.pop(q.id, None)
        for key in list(ss.keys()):
            if isinstance(key, str) and key.startswith(f"quiz_in_{q.id}"):
                del ss[key]


s[3].button("↺ " + t("quiz_retry_all"), on_click=_retry_all, key="quiz_retry_all", disabled=not answered)
if not questions:
    st.info(t("quiz_none"))


def _retry(qid: str):
    answers.pop(qid, None)
    results.pop(qid, None)
    for key in list(ss.keys()):
        if isinstance(key, str) and key.startswith(f"quiz_in_{qid}"):
            del ss[key]


def read_answer(q):
    """The learner's answer in the form quiz.grade expects, or None when nothing was picked."""
    if q.type == "single":
        picked = ss.get(f"quiz_in_{q.id}")
        return None if picked is None else {picked}
    if q.type == "multi":
        picked = {i for i in range(len(q.choices)) if ss.get(f"quiz_in_{q.id}_{i}")}
        return picked or None
    value = ss.get(f"quiz_in_{q.id}")
    return None if value is None else float(value)


def run_experiment(q):
    lm = model_store.require_model()
    with st.spinner(t("quiz_running_experiment", name=bi_title(q.experiment))):
        try:
            with model_store.model_session():
                results[q.id] = sd.experiments.run(q.experiment, lm=lm)  # cached on disk per model
        except Exception as err:  # SpecDecError or a model failure: shown, never a traceback
            results[q.id] = f"{type(err).__name__}: {err}"


def bi_title(name: str) -> str:
    exp = sd.experiments.EXPERIMENTS.get(name)
    return language.bi(exp.title) if exp else name


for number, q in enumerate(questions, start=1):
    done = answers.get(q.id)
    with st.container(border=True):
        tags = f"`{t('difficulty_' + q.difficulty)}` · `{q.lesson}`" + (" · 🔬" if q.experiment else "")
        st.markdown(f"**Q{number}.** {quiz.text(q.prompt, lang)}  \n{tags}")
        labels = [f"{chr(65 + i)}. {quiz.text(ch.text, lang)}" for i, ch in enumerate(q.choices)]
        if q.experiment:
            st.caption(t("quiz_predict_then_run", name=bi_title(q.experiment)))

        if done is None:  # the inputs; once answered, the graded choices replace them
            if q.type == "single":
                st.radio(t("quiz_pick_one"), range(len(q.choices)), index=None, key=f"quiz_in_{q.id}",
                         format_func=lambda i, labels=labels: labels[i])
            elif q.type == "multi":
                st.caption(t("quiz_pick_all"))
                for i, label in enumerate(labels):
                    st.checkbox(label, key=f"quiz_in_{q.id}_{i}")
            else:
                st.number_input(t("quiz_your_number"), value=None, step=0.01, format="%.3f", key=f"quiz_in_{q.id}")
            answer = read_answer(q)
            if st.button(t("quiz_submit"), key=f"quiz_submit_{q.id}", disabled=answer is None, type="primary"):
                grade = quiz.grade(q, answer, lang)
                answers[q.id] = {"answer": answer, "correct": grade.correct}
                done = answers[q.id]
                if q.experiment:
                    run_experiment(q)
                st.rerun()
            if answer is None:
                st.caption(t("quiz_answer_first"))
            continue

        grade = quiz.grade(q, done["answer"], lang)
        (st.success if grade.correct else st.error)(t("quiz_right") if grade.correct else t("quiz_wrong"))
        for fb in grade.per_choice:
            mark = "✅" if fb.correct else "❌"
            mine = f" ← **{t('quiz_your_choice')}**" if fb.chosen else ""
            st.markdown(f"{mark} {labels[fb.index]}{mine}  \n&nbsp;&nbsp;&nbsp;&nbsp;*{fb.feedback}*")
        if grade.expected is not None:
            st.markdown(t("quiz_expected", expected=f"{grade.expected:g}", tolerance=f"{grade.tolerance:g}",
                          given=f"{done['answer']:g}"))
        st.markdown(f"**{t('quiz_explanation')}** {grade.explanation}")
        if q.experiment:
            res = results.get(q.id)
            if res is None:
                if st.button("🔬 " + t("quiz_run_experiment"), key=f"quiz_run_{q.id}"):
                    run_experiment(q)
                    st.rerun()
            elif isinstance(res, str):
                st.error(t("err_model", cause=res))
            else:
                cols = st.columns(3)
                prediction = done["answer"] if q.type == "numeric" else None
                if prediction is not None:
                    cols[0].metric(t("quiz_prediction"), f"{prediction:g}")
                cols[1].metric(t("quiz_measured", model=model_store.model_name()), f"{res.value:.3g}",
                               delta=f"{res.value - prediction:+.3g}" if prediction is not None else None,
                               delta_color="off")
                if grade.expected is not None:
                    cols[2].metric(t("quiz_theory"), f"{grade.expected:g} ± {grade.tolerance:g}")
                st.caption(t("quiz_experiment_note", name=bi_title(q.experiment), unit=res.unit,
                             seconds=f"{res.seconds:.1f}", cached=t("yes") if res.cached else t("no")))
        st.button("↺ " + t("quiz_retry"), key=f"quiz_retry_{q.id}", on_click=_retry, args=(q.id,))
