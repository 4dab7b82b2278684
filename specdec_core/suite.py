"""Prompt files: the suite, the quick set and any JSONL a user brings (one prompt object per line).

    {"id": "chat-01", "category": "chat", "prompt": "..."}          # one user message
    {"id": "mt-01", "category": "multi-turn", "turns": ["...", "..."]}  # several
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .errors import SpecDecError

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"


@dataclass
class PromptCase:
    id: str
    category: str
    turns: list[str]  # one user message, or several for multi-turn


def load_prompts(path: Path) -> list[PromptCase]:
    """Read a JSONL prompt suite; any problem names the file and line."""
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise SpecDecError(f"cannot read prompts file {path}: {err.strerror or err}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecDecError(f"prompts file {path} is not UTF-8")
    cases = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            turns = [item["prompt"]] if "prompt" in item else list(item["turns"])
            if not turns or not all(isinstance(t, str) and t.strip() for t in turns):
                raise ValueError("empty prompt")
            cases.append(PromptCase(str(item["id"]), str(item["category"]), turns))
        except (ValueError, KeyError, TypeError) as err:
            raise SpecDecError(f"{path}: line {number} is not a valid prompt object ({err})")
    if not cases:
        raise SpecDecError(f"prompts file {path} has no prompts")
    return cases


def only_categories(cases: list[PromptCase], categories: str | None, path: Path) -> list[PromptCase]:
    """The cases of the comma-separated `categories` (all of them for None or ""), in file order; a
    category the file does not have is an error naming the ones it has."""
    wanted = [c.strip() for c in (categories or "").split(",") if c.strip()]
    if not wanted:
        return cases
    have = {c.category for c in cases}
    unknown = sorted(set(wanted) - have)
    if unknown:
        raise SpecDecError(f"{path} has no category {unknown[0]!r}: it has {', '.join(sorted(have))}")
    return [c for c in cases if c.category in wanted]
