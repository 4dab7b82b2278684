"""The course's engine side: what lessons, the quiz and the app's course pages call.

`experiments.py` (the registry of measured experiments the quiz and the notebooks share, cached) →
`quiz.py` (the question bank, its widget and grading) and `lesson_outputs.py` (recorded outputs of the
lessons' code cells, keyed by cell source). Sits on top of everything: it runs the engine, the bench's
load test and the training code's offline evaluation; nothing below imports it.
"""
