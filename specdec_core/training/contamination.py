"""The contamination check: no training prompt may be an eval prompt or a near copy of one.

A trained drafter is measured on `specdec_core/prompts/*.jsonl`; one that has seen the benchmark's
questions would report an acceptance it does not have on new ones. Every training text is compared with
every user turn of the eval files by token 3-grams (`trigram_overlap`) and as text, up to case and spacing.
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from ..errors import SpecDecError
from ..suite import PROMPTS_DIR, load_prompts

EVAL_DIR = PROMPTS_DIR
OVERLAP_THRESHOLD = 0.5  # a training prompt sharing this much of its 3-grams with an eval prompt is refused


def trigrams(ids: Sequence[int]) -> set[tuple[int, int, int]]:
    return {tuple(ids[i:i + 3]) for i in range(len(ids) - 2)}


def trigram_overlap(train: set, held: set) -> float:
    """How much two prompts share, from their sets of distinct token 3-grams T (training) and E (eval):
    max(|T ∩ E| / |T|, |T ∩ E| / |E|). The first term catches a training prompt built from an eval
    prompt's pieces, the second an eval prompt contained in a longer training prompt. A prompt of fewer
    than 3 tokens has no 3-grams and overlaps nothing this way (`check_contamination` also compares the
    texts themselves)."""
    if not train or not held:
        return 0.0
    shared = len(train & held)
    return max(shared / len(train), shared / len(held))


@dataclass
class ContaminationReport:
    """The check of a training prompt list against every user turn of the eval prompt files."""

    threshold: float
    training_prompts: int
    eval_files: list[str]
    eval_turns: int
    pairs_checked: int
    max_overlap: float
    worst_training: str  # the training prompt of the largest overlap ("" when nothing overlaps at all)
    worst_eval: str  # where its partner is: file:id turn n
    worst_eval_text: str
    flagged: int  # training prompts at or above the threshold

    @property
    def ok(self) -> bool:
        return self.flagged == 0

    def refusal(self) -> str:
        return (f"{self.flagged} training prompt(s) overlap the eval prompts; worst: {self.worst_training!r} shares "
                f"{self.max_overlap:.0%} of its token 3-grams with {self.worst_eval} (limit {self.threshold:.0%})")

    def to_dict(self) -> dict:
        return asdict(self)


def normalised(text: str) -> str:
    """A text up to case and spacing: what counts as "the same prompt"."""
    return " ".join(text.split()).casefold()


@functools.lru_cache(maxsize=4)
def _eval_turns(tokenizer, eval_dir: Path) -> tuple[tuple[str, str, str, frozenset], ...]:
    """(where, text, normalised text, 3-grams) of every user turn of `eval_dir/*.jsonl`."""
    files = sorted(eval_dir.glob("*.jsonl"))
    if not files:
        raise SpecDecError(f"no eval prompt files (*.jsonl) in {eval_dir}")
    turns = [(f"{path.name}:{case.id} turn {t + 1}", text) for path in files for case in load_prompts(path)
             for t, text in enumerate(case.turns)]
    ids = tokenizer([t for _, t in turns], add_special_tokens=False)["input_ids"]
    return tuple((where, text, normalised(text), frozenset(trigrams(i))) for (where, text), i in zip(turns, ids))


def closest(texts: Sequence[str], tokenizer, eval_dir: Path = EVAL_DIR) -> list[tuple[float, str, str]]:
    """(overlap, where, eval text) of each text's closest eval user turn: `trigram_overlap` over the
    tokenizer's plain tokens (no chat template, no special tokens); an identical text (up to case and
    spacing) counts as overlap 1."""
    held = _eval_turns(tokenizer, eval_dir)
    out = []
    for text, ids in zip(texts, tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []):
        grams, norm = trigrams(ids), normalised(text)
        best = (0.0, "", "")
        for where, eval_text, eval_norm, eval_grams in held:
            overlap = 1.0 if norm == eval_norm else trigram_overlap(grams, eval_grams)
            if overlap > best[0]:
                best = (overlap, where, eval_text)
        out.append(best)
    return out


def overlaps(texts: Sequence[str], tokenizer, eval_dir: Path = EVAL_DIR) -> list[float]:
    """Each text's largest overlap with an eval prompt's user turn (`closest`)."""
    return [o for o, _, _ in closest(texts, tokenizer, eval_dir)]


def check_contamination(texts: Sequence[str], tokenizer, eval_dir: Path = EVAL_DIR,
                        threshold: float = OVERLAP_THRESHOLD) -> ContaminationReport:
    """Compare every training text with every user turn of `eval_dir/*.jsonl` (multi-turn prompts: each
    turn) by `closest`; the report counts those at or above `threshold`."""
    found = closest(texts, tokenizer, eval_dir)
    worst = max(range(len(found)), key=lambda i: found[i][0], default=None)
    overlap, where, eval_text = found[worst] if worst is not None else (0.0, "", "")
    held = len(_eval_turns(tokenizer, eval_dir))
    return ContaminationReport(threshold, len(texts), sorted(p.name for p in eval_dir.glob("*.jsonl")), held,
                               len(texts) * held, overlap, texts[worst] if worst is not None and overlap > 0 else "",
                               where, eval_text, sum(o >= threshold for o, _, _ in found))
