"""The training prompts: short chat requests composed from templates (`templates.py`).

A trained drafter is measured on `specdec_core/prompts/*.jsonl`, so its training prompts must not be
those prompts or near copies of them: a drafter that has seen the benchmark's questions would report
an acceptance it does not have on new ones (`contamination.py` checks it). The prompts here are written
for this project (templates × fillers, no outside text), in eight categories, in English and Chinese.

A run takes the first N prompts of `training_prompts(seed)`: each (category, language) pool is shuffled
with the seed, each category interleaves its pools two English to one Chinese, and the categories take
turns. Any prefix of the order therefore has every category in equal measure and about one third
Chinese, until a pool runs out (each has more than 120 prompts).
"""
from __future__ import annotations

import functools
import itertools
import random
import string
from dataclasses import dataclass

from .contamination import check_contamination  # noqa: F401  (lesson 13 imports it from here)
from .templates import CATEGORIES, FILLERS, LANGUAGES, TEMPLATES

LANGUAGE_PATTERN = ("en", "en", "zh")  # the order within a category: about two thirds English


@dataclass(frozen=True)
class TrainingPrompt:
    index: int  # place in the seeded order: a run of N prompts takes indices 0 .. N-1
    category: str
    language: str
    text: str


def expand(template: str) -> list[str]:
    """Every filling of a template's {fields} (a field used twice takes the same value both times)."""
    fields = list(dict.fromkeys(name for _, name, _, _ in string.Formatter().parse(template) if name))
    return [template.format(**dict(zip(fields, values))) for values in itertools.product(*(FILLERS[f] for f in fields))]


@functools.lru_cache(maxsize=1)
def prompt_pools() -> dict[tuple[str, str], tuple[str, ...]]:
    """(category, language) -> its distinct prompts, sorted (the order the seed shuffles)."""
    return {key: tuple(sorted({text for template in templates for text in expand(template)}))
            for key, templates in TEMPLATES.items()}


@functools.lru_cache(maxsize=4)
def training_prompts(seed: int = 0) -> tuple[TrainingPrompt, ...]:
    """All training prompts in the run order of `seed` (see the module docstring)."""
    rng = random.Random(seed)
    per_category = []
    for category in CATEGORIES:
        pools = {}
        for language in LANGUAGES:
            pool = list(prompt_pools()[category, language])
            rng.shuffle(pool)
            pools[language] = iter(pool)
        # Two English, one Chinese, ... until both pools are empty (then the other language fills in).
        pattern = itertools.cycle(LANGUAGE_PATTERN)
        merged = []
        while pools:
            language = next(pattern)
            if language in pools:
                text = next(pools[language], None)
                if text is None:
                    del pools[language]
                else:
                    merged.append((language, text))
        per_category.append([(category, language, text) for language, text in merged])
    # The categories take turns; a category that runs out drops out of the rotation.
    rotation = [item for row in itertools.zip_longest(*per_category) for item in row if item is not None]
    return tuple(TrainingPrompt(i, c, lang, text) for i, (c, lang, text) in enumerate(rotation))
