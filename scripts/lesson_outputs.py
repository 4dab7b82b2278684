"""Execute every lesson and record its code cells' outputs for the app (`make lesson-outputs`).

    python scripts/lesson_outputs.py                       # every lesson, both languages
    python scripts/lesson_outputs.py --only 06-speedup     # some lessons (the others are kept)

Each lesson's notebook is built from its source exactly as `scripts/build_notebooks.py` builds it,
run top to bottom in a fresh kernel (working directory notebooks/<lang>/, as in CI), and the outputs
are written to lessons/outputs/<lang>/<stem>.json keyed by `specdec_core.course.lesson_outputs.cell_key`.
Kept: printed text, plotly figures (as JSON) and small HTML; dropped: stderr (warnings, progress
bars) and widgets (the quiz, which the app shows on its own page). Beside them go the values of the
registry experiments the lesson's cells ran and its predict-then-run questions name (those the cells
did not run are measured here, or read from the cache), for `specdec_core.course.quiz_keys`.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import os
import platform
import subprocess
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from specdec_core.course import experiments  # noqa: E402
from specdec_core.course.lesson_outputs import (LESSON_GLOB, LessonOutputs, cell_key, code_cells,  # noqa: E402
                                                experiments_named, outputs_path)
from specdec_core.course.quiz import questions_for  # noqa: E402
from specdec_core.models import load_model  # noqa: E402

PLOTLY = "application/vnd.plotly.v1+json"
MAX_HTML = 50_000  # characters; a bigger HTML output is left out


def _build_notebooks():
    spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "scripts" / "build_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or platform.machine())
    usable = len(os.sched_getaffinity(0))  # a recording pinned to fewer cores times differently: say so
    cores = f"{os.cpu_count()} cores" if usable == os.cpu_count() else f"{usable} of {os.cpu_count()} cores"
    return f"{model}, {cores}, {platform.system()}"


def commit() -> str:
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def convert(outputs: list) -> list[dict]:
    """Notebook outputs of one cell -> the app's plain records (consecutive stdout joined)."""
    records: list[dict] = []
    for out in outputs:
        if out.output_type == "stream":
            if out.name != "stdout":
                continue
            if records and records[-1]["kind"] == "text" and records[-1].get("stream"):
                records[-1]["text"] += out.text
            else:
                records.append({"kind": "text", "text": out.text, "stream": True})
        elif out.output_type in ("execute_result", "display_data"):
            data = out.get("data", {})
            if PLOTLY in data:
                figure = dict(data[PLOTLY])
                figure.pop("config", None)
                records.append({"kind": "plotly", "figure": figure})
            elif "application/vnd.jupyter.widget-view+json" in data:
                continue
            elif "text/html" in data and len(data["text/html"]) <= MAX_HTML:
                records.append({"kind": "html", "html": data["text/html"]})
            elif "text/plain" in data:
                records.append({"kind": "text", "text": data["text/plain"]})
    for r in records:
        r.pop("stream", None)
    return records


@functools.lru_cache(maxsize=1)
def target_model():
    """This process's copy of the model, loaded at the first lesson that needs it."""
    return load_model("smollm2-135m")


def experiment_values(stem: str, sources: list[str]) -> dict[str, float]:
    """The value of each registry experiment the lesson's cells ran or its predict-then-run questions
    name: read from the cache the kernel just filled, or measured now."""
    names = {name for src in sources for name in experiments_named(src)}
    names |= {q.experiment for q in questions_for(stem) if q.experiment}
    return {name: experiments.run(name, target_model()).value for name in sorted(names)}


def record(lang: str, md: Path, build) -> LessonOutputs:
    text = md.read_text(encoding="utf-8")
    sources = code_cells(text)
    nb = nbformat.reads(build.render(md), as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT / "notebooks" / lang)}})
    client.execute()
    executed = [cell for cell in nb.cells if cell.cell_type == "code"]
    if len(executed) != len(sources):
        raise SystemExit(f"{md}: {len(sources)} code cells in the source but {len(executed)} in the notebook")
    cells = {cell_key(src): convert(cell.outputs) for src, cell in zip(sources, executed)}
    return LessonOutputs(machine(), datetime.date.today().isoformat(), commit(), cells,
                         experiment_values(md.stem, sources))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="lesson stems to record (default: all)")
    parser.add_argument("--lang", choices=("zh", "en"), nargs="*", default=["zh", "en"])
    args = parser.parse_args()
    os.environ["PLOTLY_RENDERER"] = "plotly_mimetype"  # inherited by the kernels: figures as JSON, no plotly.js
    build = _build_notebooks()
    jobs = [(lang, md) for lang in args.lang for md in sorted((ROOT / "lessons" / lang).glob(LESSON_GLOB))
            if args.only is None or md.stem in args.only]
    for lang, md in tqdm(jobs, desc="lessons", unit="lesson"):
        path = outputs_path(lang, md.stem)
        record(lang, md, build).save(path)
        tqdm.write(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
