"""Build notebooks/<lang>/<stem>.ipynb from the lesson sources lessons/<lang>/<stem>.md.

The lessons (Jupytext MyST Markdown) are the one source of the prose; the notebooks are generated,
without outputs, byte-for-byte reproducible so that the committed files stay stable. Measured numbers
the prose quotes ({measure}`name`, {machine}`source`) are filled in from the shipped result files
(`specdec_core.course.measures`, as the app's lesson page fills them in), so a changed benchmark file
makes the notebooks that quote it stale.

    python scripts/build_notebooks.py           # (re)write every notebook
    python scripts/build_notebooks.py --check   # exit 1 and list stale / missing / extra notebooks
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from specdec_core.course import measures  # noqa: E402
LESSONS = ROOT / "lessons"
NOTEBOOKS = ROOT / "notebooks"
LANGS = ("zh", "en")
LESSON_GLOB = "[0-9][0-9]-*.md"  # lessons only: the glossary (and other pages) get no notebook

# A MyST target line such as "(goals)=" becomes an HTML anchor, which Jupyter renders invisibly.
TARGET = re.compile(r"^\(([A-Za-z0-9_-]+)\)=[ \t]*$", re.MULTILINE)


def render(md_path: Path) -> str:
    """The notebook JSON (as text) for one lesson source."""
    nb = jupytext.read(md_path, fmt="md:myst")
    for i, cell in enumerate(nb.cells):
        cell.id = f"{md_path.stem[:2]}-{i:03d}"  # stable ids instead of random ones
        cell.metadata = {}
        if cell.cell_type == "markdown":
            try:
                cell.source = measures.render(TARGET.sub(r'<a id="\1"></a>', cell.source), md_path.parent.name)
            except measures.MeasureError as err:
                raise measures.MeasureError(f"{md_path.name} ({md_path.parent.name}): {err}") from None
        elif cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    nb.nbformat, nb.nbformat_minor = 4, 5
    return nbformat.writes(nb) + "\n"


def targets() -> dict[Path, Path]:
    """Map each notebook that should exist to its lesson source."""
    return {
        NOTEBOOKS / lang / f"{md.stem}.ipynb": md
        for lang in LANGS
        for md in sorted((LESSONS / lang).glob(LESSON_GLOB))
    }


def check() -> list[str]:
    """Problems with the committed notebooks; empty when all are up to date."""
    wanted = targets()
    problems = [
        f"{'missing' if not nb.exists() else 'stale'}: {nb.relative_to(ROOT)}"
        for nb, md in wanted.items()
        if not nb.exists() or nb.read_text(encoding="utf-8") != render(md)
    ]
    problems += [
        f"extra (no lesson source): {nb.relative_to(ROOT)}"
        for lang in LANGS
        for nb in sorted((NOTEBOOKS / lang).glob("*.ipynb"))
        if nb not in wanted
    ]
    return problems


def build() -> None:
    wanted = targets()
    for nb, md in wanted.items():
        nb.parent.mkdir(parents=True, exist_ok=True)
        text = render(md)
        if not nb.exists() or nb.read_text(encoding="utf-8") != text:
            nb.write_text(text, encoding="utf-8")
            print(f"wrote {nb.relative_to(ROOT)}")
    for nb in sorted(NOTEBOOKS.glob("*/*.ipynb")):
        if nb not in wanted:  # its lesson was renamed or removed
            nb.unlink()
            print(f"removed {nb.relative_to(ROOT)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report out-of-date notebooks")
    if parser.parse_args().check:
        problems = check()
        print("\n".join(problems) or "notebooks are up to date")
        return 1 if problems else 0
    build()
    return 0


if __name__ == "__main__":
    sys.exit(main())
