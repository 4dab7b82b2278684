"""Check specdec_core's layering: no import circles, no import that runs up a layer.

    python scripts/check_layers.py            # prints the layers, every circle and every upward import; exit 1 if any
    python scripts/check_layers.py --root DIR # another checkout (e.g. an old commit unpacked somewhere)

Every import counts, including the ones inside functions (where a circle hides from Python: it only
fails when the function runs). An import of `specdec_core.a.b` also runs the package `a`'s __init__,
so it counts as an import of that too (unless the importer lives in `a`). The package's own
__init__.py is left out: it imports lazily, on attribute access, for everybody.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = "specdec_core"
# Bottom to top; a module imports only from its own layer or the ones below it. A layer names modules
# or packages (a package covers everything in it).
LAYERS = (
    ("leaves", ("errors", "offline", "suite", "provenance")),
    ("core", ("llama", "kvcache", "kernels", "batch", "models", "target", "sampling", "trace", "metrics", "theory",
              "costmodel", "guard", "drafting", "decode", "quant", "trees")),
    ("drafters", ("drafters",)),
    ("generation", ("generation", "options")),
    ("serving", ("serving",)),
    ("training", ("training",)),
    ("bench", ("bench",)),
    ("bridge", ("bridge",)),
    ("course", ("course",)),
    ("shell", ("cli", "commands", "__main__")),
)


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package (a package's name -> its __init__)."""
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports anywhere in its file, resolved to known modules."""
    is_package = path.name == "__init__.py"
    here = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[:len(here) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            # `from pkg import sub` imports a module; `from mod import name` imports mod.
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]
        for target in targets:
            while target and target not in known:  # a.b.C (a class) -> a.b
                target = target.rpartition(".")[0]
            if not target.startswith(PACKAGE) or target in (PACKAGE, name):
                continue
            found.add(target)
            parts = target.split(".")
            for i in range(2, len(parts)):  # parent packages run first, unless the importer lives in them
                parent = ".".join(parts[:i])
                if not name.startswith(parent + ".") and name != parent:
                    found.add(parent)
    return found


def layer_of(name: str) -> int | None:
    short = name.removeprefix(PACKAGE + ".")
    for rank, (_, members) in enumerate(LAYERS):
        if any(short == m or short.startswith(m + ".") for m in members):
            return rank
    return None


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check(root: Path) -> dict:
    known = modules(root)
    graph = {name: imports(name, path, known) for name, path in known.items() if name != PACKAGE}
    unplaced = sorted(n for n in graph if layer_of(n) is None)
    upward = sorted((a, b) for a, targets in graph.items() for b in targets
                    if layer_of(a) is not None and layer_of(b) is not None and layer_of(b) > layer_of(a))
    return {"modules": len(graph), "circles": circles(graph), "upward": upward, "unplaced": unplaced}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    result = check(args.root)
    print(f"{result['modules']} modules; layers bottom to top: " + " < ".join(name for name, _ in LAYERS))
    for component in result["circles"]:
        print("circle: " + " <-> ".join(component))
    for a, b in result["upward"]:
        print(f"upward: {a} imports {b}")
    for name in result["unplaced"]:
        print(f"unplaced: {name} (add it to a layer in scripts/check_layers.py)")
    print(f"circles {len(result['circles'])}, upward imports {len(result['upward'])}, unplaced {len(result['unplaced'])}")
    return 1 if result["circles"] or result["upward"] or result["unplaced"] else 0


if __name__ == "__main__":
    sys.exit(main())
