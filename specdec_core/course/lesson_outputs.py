"""Recorded outputs of the lessons' code cells, so a reader of the app sees what each experiment prints.

The lessons (`lessons/<lang>/NN-*.md`) are executed once by `make lesson-outputs`
(`scripts/lesson_outputs.py`), and every code cell's outputs are stored in
`lessons/outputs/<lang>/<stem>.json` under a key: the SHA-256 of the cell's source, of the
experiments' cache version and of every shipped file the cell reads (`cell_inputs`: a benchmark
result or the weights' manifest it names, the quiz bank it loads, the files its registry experiments
declare). Change a cell, what the experiments measure or a file it reads, and its key changes, so the
recorded output is stale; `tests/test_lesson_outputs.py` fails until the command is run again. With
the outputs, a recording keeps the value of every registry experiment the lesson ran or its quiz
asks about (`experiments`), which `quiz_keys` checks the predict-then-run answers against.
A CI clone is thrown away, so nothing is refreshed there: outputs are recorded here and committed.

    cells = code_cells(text)                   # the code cells of one lesson source, in order
    record = load("en", "06-speedup")          # the recorded file, or None
    record.outputs_for(cells[0])               # the outputs recorded for that cell, or None if stale
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..drafters import TRAINED
from ..drafters.weights import WEIGHTS_DIR
from . import measures
from .experiments import CACHE_VERSION, EXPERIMENTS, PROMPTS_FILE
from .quiz import QUIZ_DIR, SCHEMA_PATH

ROOT = Path(__file__).resolve().parents[2]
OUTPUTS_DIR = ROOT / "lessons" / "outputs"
LESSON_GLOB = "[0-9][0-9]-*.md"
# A code cell in Jupytext MyST: ```{code-cell} python ... ``` (option lines are part of the fence's body).
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)

# How a cell reads shipped data: by naming a file, through the quiz bank, the shipped weights or the
# prompt suite, or by running a registry experiment / quoting a measure (a string literal).
FILE_NAME = re.compile(r"""["']([\w.-]+\.(?:json|jsonl|yaml))["']""")
DATA_DIRS = ("benchmarks", "specdec_core/weights/smollm2-135m", "specdec_core/prompts")
QUIZ_READERS = re.compile(r"\b(?:load_bank|questions_for)\(")
WEIGHT_READERS = re.compile(r"\b(?:shipped_drafters|drafter_module)\(|\bWEIGHTS_DIR\b")
PROMPT_READERS = re.compile(r"\bsuite_prompts\(")
LITERAL = re.compile(r"""["']([\w.-]+)["']""")
MANIFEST = WEIGHTS_DIR / "smollm2-135m" / "manifest.json"


def code_cells(text: str) -> list[str]:
    """The source of every code cell of a lesson, stripped, in order."""
    return [body.strip() for body in CODE_CELL.findall(text)]


def experiments_named(source: str) -> list[str]:
    """The registry experiments a cell runs (their names appear in it as string literals)."""
    return sorted({word for word in LITERAL.findall(source) if word in EXPERIMENTS})


def cell_inputs(source: str) -> list[Path]:
    """The shipped files a cell reads besides its own source: what can make its recorded output stale."""
    found: set[Path] = set()
    for name in FILE_NAME.findall(source):
        found |= {ROOT / folder / name for folder in DATA_DIRS if (ROOT / folder / name).is_file()}
    if QUIZ_READERS.search(source):
        found |= {*QUIZ_DIR.glob("*.yaml"), SCHEMA_PATH}
    if PROMPT_READERS.search(source):
        found.add(PROMPTS_FILE)
    for word in set(LITERAL.findall(source)):
        if word in EXPERIMENTS:
            found |= set(EXPERIMENTS[word].files())
        elif word in measures.MEASURES:
            found.add(ROOT / measures.SOURCES[measures.MEASURES[word].source].file)
    if WEIGHT_READERS.search(source) or set(LITERAL.findall(source)) & set(TRAINED):
        found.add(MANIFEST)  # the weights themselves are checked against the manifest's checksums at load
    return sorted(found)


@lru_cache(maxsize=256)
def _sha256(path: Path, mtime_ns: int, size: int) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cell_key(source: str) -> str:
    """What a recorded output is valid for: this exact cell source, under this experiments cache version,
    with these contents of the files it reads (a cell that reads none keeps the key of its source alone)."""
    digest = hashlib.sha256(f"experiments-cache-v{CACHE_VERSION}\n{source.strip()}".encode())
    for path in cell_inputs(source):
        stat = path.stat()
        digest.update(f"\n{os.path.relpath(path, ROOT)} {_sha256(path, stat.st_mtime_ns, stat.st_size)}".encode())
    return digest.hexdigest()


def outputs_path(lang: str, stem: str) -> Path:
    return OUTPUTS_DIR / lang / f"{stem}.json"


@dataclass
class LessonOutputs:
    """One lesson's recorded outputs: {cell key: [output, ...]} plus where and when they were recorded.

    An output is {"kind": "text", "text": ...}, {"kind": "plotly", "figure": {...}} (plotly's JSON) or
    {"kind": "html", "html": ...}. `experiments` holds the value of every registry experiment the lesson's
    cells ran or its predict-then-run questions name, as this recording measured (or read from the cache).
    """

    machine: str
    date: str
    commit: str
    cells: dict[str, list[dict]] = field(default_factory=dict)
    experiments: dict[str, float] = field(default_factory=dict)  # registry experiment -> value in this recording

    def outputs_for(self, source: str) -> list[dict] | None:
        return self.cells.get(cell_key(source))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {"machine": self.machine, "date": self.date, "commit": self.commit, "experiments": self.experiments,
                "cells": self.cells}
        path.write_text(json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")


def load(lang: str, stem: str) -> LessonOutputs | None:
    """The recorded outputs of one lesson, or None when there are none (or the file is unreadable)."""
    path = outputs_path(lang, stem)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return LessonOutputs(data["machine"], data["date"], data["commit"], data["cells"], data.get("experiments", {}))
    except (OSError, ValueError, KeyError, TypeError):
        return None
