"""The recorded lesson outputs (lessons/outputs/) are there, fresh and small.

CI's clone is thrown away, so it cannot record anything: a stale key here means a lesson cell (or
what the experiments measure) changed after `make lesson-outputs` last ran. Run it and commit.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from specdec_core.course import lesson_outputs as lo

ROOT = Path(__file__).resolve().parents[1]
LESSONS = [(lang, md) for lang in ("zh", "en") for md in sorted((ROOT / "lessons" / lang).glob(lo.LESSON_GLOB))]
TARGET = re.compile(r"^\(([A-Za-z0-9_-]+)\)=\s*$", re.MULTILINE)
BUDGET_BYTES = 3 * 1024 * 1024


def experiment_cells(text: str) -> list[str]:
    """Code cells that sit in a section whose id starts with `experiment`."""
    cells = []
    for part in re.split(r"(?=^\([A-Za-z0-9_-]+\)=\s*$)", text, flags=re.MULTILINE):
        target = TARGET.match(part)
        if target and target.group(1).startswith("experiment"):
            cells += lo.code_cells(part)
    return cells


@pytest.mark.parametrize("lang,md", LESSONS, ids=[f"{lang}/{md.stem}" for lang, md in LESSONS])
def test_every_cell_has_a_fresh_recorded_output(lang, md):
    recorded = lo.load(lang, md.stem)
    assert recorded is not None, f"no recorded outputs for {lang}/{md.stem}: run `make lesson-outputs`"
    assert recorded.machine and recorded.date and recorded.commit
    text = md.read_text(encoding="utf-8")
    stale = [i for i, cell in enumerate(lo.code_cells(text)) if recorded.outputs_for(cell) is None]
    assert not stale, f"code cells {stale} of {lang}/{md.stem} changed since their output was recorded: run `make lesson-outputs --only {md.stem}`"
    silent = [i for i, cell in enumerate(experiment_cells(text)) if not recorded.outputs_for(cell)]
    assert not silent, f"experiment cells {silent} of {lang}/{md.stem} recorded no output"


def test_a_changed_cell_is_stale():
    """Negative control: one character more in a cell, or another experiments cache version, changes the key."""
    assert lo.cell_key("print(1)") == lo.cell_key("print(1)\n")
    assert lo.cell_key("print(1)") != lo.cell_key("print(2)")
    recorded = lo.LessonOutputs("m", "d", "c", {lo.cell_key("print(1)"): [{"kind": "text", "text": "1\n"}]})
    assert recorded.outputs_for("print(1)") and recorded.outputs_for("print(1) ") and recorded.outputs_for("print(2)") is None


def test_experiment_cells_are_found():
    text = "(goals)=\n## Goals\n\n```{code-cell} python\nsetup()\n```\n\n(experiment-2)=\n## Exp\n\n```{code-cell} python\nrun()\n```\n"
    assert experiment_cells(text) == ["run()"]


def test_recorded_outputs_fit_their_budget():
    total = sum(p.stat().st_size for p in lo.OUTPUTS_DIR.glob("*/*.json"))
    assert 0 < total <= BUDGET_BYTES, f"recorded outputs take {total / 2**20:.2f} MiB (budget 3 MiB)"
    stems = {md.stem for _, md in LESSONS}
    extra = [p for p in lo.OUTPUTS_DIR.glob("*/*.json") if p.stem not in stems]
    assert not extra, f"outputs of lessons that no longer exist: {extra}"


def test_cells_name_the_files_they_read():
    lesson = {lang: (ROOT / "lessons" / lang / "11-interview.md").read_text(encoding="utf-8") for lang in ("zh", "en")}
    bank_cell = next(c for c in lo.code_cells(lesson["en"]) if "load_bank" in c)
    assert ROOT / "lessons" / "quiz" / "08-applications.yaml" in lo.cell_inputs(bank_cell)
    table = 'json.loads((BENCH / "trained-draft-free-text-cpu.json").read_text())\nsd.experiments.run("trained_tau_chat_k4")'
    assert {p.name for p in lo.cell_inputs(table)} == {"trained-draft-free-text-cpu.json", "manifest.json"}
    assert lo.cell_inputs('sd.experiments.run("ngram_copy_a4")') == [ROOT / "specdec_core" / "prompts" / "suite.jsonl"]
    assert lo.cell_inputs("print(1)") == [] and lo.cell_key("print(1)") == lo.cell_key("print(1)\n")


def test_a_cell_whose_data_file_changed_is_stale(tmp_path, monkeypatch):
    """Negative control: an output recorded from one benchmark file (or one prompt file an experiment
    declares) is stale once the file changes, though the cell's source did not."""
    bench = tmp_path / "benchmarks" / "fake-cpu.json"
    bench.parent.mkdir()
    bench.write_text('{"summary": {"ar": 1.0}}')
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "a"}\n')
    monkeypatch.setattr(lo, "ROOT", tmp_path)
    monkeypatch.setitem(lo.EXPERIMENTS, "fake_experiment", lo.EXPERIMENTS["ngram_copy_a4"].__class__(
        "fake_experiment", {"zh": "假", "en": "fake"}, "x", lambda lm: (1.0, {}), reads=(prompts,)))
    cells = ['print(json.loads((BENCH / "fake-cpu.json").read_text()))', 'sd.experiments.run("fake_experiment")']
    recorded = lo.LessonOutputs("m", "d", "c", {lo.cell_key(c): [{"kind": "text", "text": "1\n"}] for c in cells})
    assert all(recorded.outputs_for(c) for c in cells)
    bench.write_text('{"summary": {"ar": 2.0}}')
    prompts.write_text('{"prompt": "b"}\n')
    assert recorded.outputs_for(cells[0]) is None and recorded.outputs_for(cells[1]) is None
