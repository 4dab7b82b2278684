"""`load-test --learners N`: a classroom of N learners asking related questions of one served model.

`prompts/classroom.jsonl` holds groups of related prompts (a category each: paraphrases and variants of
one question, e.g. eight ways of asking what a KV cache is). Learner j asks variant j of every group, one
group after another, starting from group j (mod the number of groups): all N ask at once, each asks in
sequence, and at any moment the learners in flight ask about different groups, so a question finds the
answers earlier learners got to its neighbours in the shared suffix history, never its own answer. With
N at most the smallest group's size no prompt is asked twice; with more learners, variants repeat (as a
real classroom's do).
"""
from __future__ import annotations

from ..errors import SpecDecError
from ..suite import PROMPTS_DIR, PromptCase, load_prompts

CLASSROOM_FILE = PROMPTS_DIR / "classroom.jsonl"


def learner_order(cases: list[PromptCase], learners: int) -> list[PromptCase]:
    """The classroom's requests in arrival order: round r holds every learner's r-th question (learner j:
    group (j + r) mod G, variant j mod the group's size); a closed loop of C = N keeps each learner one
    question in flight. N × G requests, each case labelled by its learner."""
    if learners < 1:
        raise SpecDecError(f"learners must be >= 1 (got {learners})")
    groups: dict[str, list[PromptCase]] = {}
    for case in cases:
        if len(case.turns) != 1:
            raise SpecDecError(f"classroom prompt {case.id} has {len(case.turns)} turns: a learner asks one at a time")
        groups.setdefault(case.category, []).append(case)
    names = list(groups)
    order = []
    for r in range(len(names)):
        for j in range(learners):
            group = groups[names[(j + r) % len(names)]]
            case = group[j % len(group)]
            order.append(PromptCase(f"{case.id}@learner-{j + 1}", case.category, case.turns))
    return order


def classroom(learners: int) -> list[PromptCase]:
    return learner_order(load_prompts(CLASSROOM_FILE), learners)
