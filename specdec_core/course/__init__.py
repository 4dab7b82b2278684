"""The course's engine side: what lessons, the quiz and the app's course pages call.

`experiments.py` (the registry of measured experiments the quiz and the notebooks share, cached) and
`measures.py` (the named measurements of the shipped result files that lesson prose and quiz texts
quote) → `quiz.py` (the question bank, its widget and grading) and `lesson_outputs.py` (recorded outputs
of the lessons' code cells, keyed by cell source and the files it reads) → `quiz_keys.py` (the
predict-then-run answers checked against what their experiments measured). Sits on top of
everything: it runs the engine, the bench's load test and the training code's offline evaluation;
nothing below imports it.
"""
