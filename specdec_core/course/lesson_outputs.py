"""Recorded outputs of the lessons' code cells, so a reader of the app sees what each experiment prints.

The lessons (`lessons/<lang>/NN-*.md`) are executed once by `make lesson-outputs`
(`scripts/lesson_outputs.py`), and every code cell's outputs are stored in
`lessons/outputs/<lang>/<stem>.json` under a key: the SHA-256 of the cell's source and of the
experiments' cache version. Change a cell (or what the experiments measure) and its key changes, so
the recorded output is stale; `tests/test_lesson_outputs.py` fails until the command is run again.
A CI clone is thrown away, so nothing is refreshed there: outputs are recorded here and committed.

    cells = code_cells(text)                   # the code cells of one lesson source, in order
    record = load("en", "06-speedup")          # the recorded file, or None
    record.outputs_for(cells[0])               # the outputs recorded for that cell, or None if stale
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .experiments import CACHE_VERSION

ROOT = Path(__file__).resolve().parents[2]
OUTPUTS_DIR = ROOT / "lessons" / "outputs"
LESSON_GLOB = "[0-9][0-9]-*.md"
# A code cell in Jupytext MyST: ```{code-cell} python ... ``` (option lines are part of the fence's body).
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def code_cells(text: str) -> list[str]:
    """The source of every code cell of a lesson, stripped, in order."""
    return [body.strip() for body in CODE_CELL.findall(text)]


def cell_key(source: str) -> str:
    """What a recorded output is valid for: this exact cell source, under this experiments cache version."""
    return hashlib.sha256(f"experiments-cache-v{CACHE_VERSION}\n{source.strip()}".encode()).hexdigest()


def outputs_path(lang: str, stem: str) -> Path:
    return OUTPUTS_DIR / lang / f"{stem}.json"


@dataclass
class LessonOutputs:
    """One lesson's recorded outputs: {cell key: [output, ...]} plus where and when they were recorded.

    An output is {"kind": "text", "text": ...}, {"kind": "plotly", "figure": {...}} (plotly's JSON) or
    {"kind": "html", "html": ...}.
    """

    machine: str
    date: str
    commit: str
    cells: dict[str, list[dict]] = field(default_factory=dict)

    def outputs_for(self, source: str) -> list[dict] | None:
        return self.cells.get(cell_key(source))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {"machine": self.machine, "date": self.date, "commit": self.commit, "cells": self.cells}
        path.write_text(json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")


def load(lang: str, stem: str) -> LessonOutputs | None:
    """The recorded outputs of one lesson, or None when there are none (or the file is unreadable)."""
    path = outputs_path(lang, stem)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return LessonOutputs(data["machine"], data["date"], data["commit"], data["cells"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
