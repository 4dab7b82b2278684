"""The house: layers without circles or upward imports, the size budgets README states, and the size caps
(functions, bench files) and command modules of issue 50."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_layers = _script("check_layers")


def test_no_import_circles_and_no_upward_imports():
    result = check_layers.check(ROOT)
    assert result["circles"] == [] and result["upward"] == [] and result["unplaced"] == [], result


def test_the_layer_check_finds_a_circle_hidden_in_a_function_and_an_upward_import(tmp_path):
    """The negative check: today's old circle in miniature (the loop importing the drafters inside a
    function, the drafters importing the loop), and a core module reaching up into bench."""
    package = tmp_path / "specdec_core"
    (package / "drafters").mkdir(parents=True)
    (package / "bench").mkdir()
    (package / "__init__.py").write_text("")
    (package / "errors.py").write_text("")
    (package / "decode.py").write_text("def make():\n    from .drafters import make_drafter\n    return make_drafter\n")
    (package / "drafters" / "__init__.py").write_text("from ..decode import make\n\ndef make_drafter():\n    pass\n")
    (package / "bench" / "__init__.py").write_text("")
    (package / "bench" / "run.py").write_text("X = 1\n")
    (package / "metrics.py").write_text("from .bench.run import X\n")
    result = check_layers.check(tmp_path)
    assert result["circles"] == [["specdec_core.decode", "specdec_core.drafters"]]
    assert ("specdec_core.decode", "specdec_core.drafters") in result["upward"]
    assert ("specdec_core.metrics", "specdec_core.bench.run") in result["upward"]
    assert ("specdec_core.metrics", "specdec_core.bench") in result["upward"]  # the package's __init__ runs too


# --- budgets -------------------------------------------------------------------------------------

BUDGET_LINE = re.compile(r"tracked tree ≤ (\d+) MB.*shipped drafter weights ≤ (\d+) MB.*training corpus .*≤ (\d+) MB")


def budgets() -> tuple[int, int, int]:
    """(tracked tree, shipped drafter weights, training corpus) in bytes, from README's one budget line."""
    matches = [BUDGET_LINE.search(line) for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()]
    found = [m for m in matches if m]
    assert len(found) == 1, "README must state the budgets in exactly one line"
    return int(found[0][1]) * 10**6, int(found[0][2]) * 10**6, int(found[0][3]) * 10**6


def over_budget(sizes: dict[str, int], tree_budget: int, weights_budget: int, data_budget: int) -> list[str]:
    """What exceeds its budget: the tracked tree, the weights it ships (every tracked .safetensors, not
    only the drafters in specdec_core/weights/: a curve point's weights beside its JSON count too), and
    the training corpus committed in data/."""
    tree = sum(sizes.values())
    weights = sum(size for path, size in sizes.items() if path.endswith(".safetensors"))
    data = sum(size for path, size in sizes.items() if path.startswith("data/"))
    problems = []
    if tree > tree_budget:
        problems.append(f"tracked tree {tree / 1e6:.1f} MB > {tree_budget / 1e6:.0f} MB")
    if weights > weights_budget:
        problems.append(f"drafter weights {weights / 1e6:.1f} MB > {weights_budget / 1e6:.0f} MB")
    if data > data_budget:
        problems.append(f"training corpus {data / 1e6:.1f} MB > {data_budget / 1e6:.0f} MB")
    return problems


def tracked_sizes() -> dict[str, int]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    paths = [p for p in out.decode().split("\0") if p]
    return {p: (ROOT / p).stat().st_size for p in paths if (ROOT / p).is_file()}


def test_tracked_tree_and_shipped_weights_fit_their_budgets():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing is tracked")
    assert over_budget(tracked_sizes(), *budgets()) == []


def test_the_budget_check_fails_on_an_oversized_tree_and_oversized_weights():
    tree_budget, weights_budget, data_budget = budgets()
    sizes = {"README.md": 1000, "specdec_core/weights/smollm2-135m/heads.safetensors": weights_budget + 1}
    assert over_budget(sizes, tree_budget, weights_budget, data_budget) == [
        f"drafter weights {(weights_budget + 1) / 1e6:.1f} MB > {weights_budget / 1e6:.0f} MB"]
    sizes["data/smollm2-135m/shard-00000.npz"] = data_budget + 1
    assert len(over_budget(sizes, tree_budget, weights_budget, data_budget)) == 2
    sizes["benchmarks/big.json"] = tree_budget
    assert len(over_budget(sizes, tree_budget, weights_budget, data_budget)) == 3
    # weights outside specdec_core/weights/ count as well: two points of 1 byte over half the budget
    points = {f"benchmarks/curve/{p}/heads.safetensors": weights_budget // 2 + 1 for p in ("a", "b")}
    assert over_budget({"README.md": 1000, **points}, tree_budget, weights_budget, data_budget) == [
        f"drafter weights {(weights_budget + 2) / 1e6:.1f} MB > {weights_budget / 1e6:.0f} MB"]


# --- size caps -----------------------------------------------------------------------------------

PACKAGE = ROOT / "specdec_core"
MAX_FUNCTION_LINES = 80  # a function reads on one screen (gpt-fast, nanoGPT)
MAX_BENCH_FILE_LINES = 500


def long_functions(root: Path, limit: int) -> list[str]:
    """`path:line name (n lines)` for every function or method of the package's files over `limit` lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_the_package_is_over_80_lines():
    assert long_functions(PACKAGE, MAX_FUNCTION_LINES) == []


def test_the_function_cap_finds_a_long_function(tmp_path):
    package = tmp_path / "specdec_core"
    package.mkdir()
    (package / "a.py").write_text("def short():\n    pass\n\n\ndef long():\n" + "    x = 1\n" * 80)
    assert long_functions(package, MAX_FUNCTION_LINES) == ["specdec_core/a.py:5 long (81 lines)"]


def test_no_file_in_bench_is_over_500_lines():
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in (PACKAGE / "bench").rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > MAX_BENCH_FILE_LINES} == {}


def test_each_subsystem_declares_its_commands_in_commands_py():
    """One shell, `cli.py`, which only assembles: every command it offers is declared in some subsystem's
    `commands.py`, and every command declared there is offered."""
    from specdec_core import cli

    assert [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("cli.py")] == ["cli.py"]
    declared = []
    for path in sorted(PACKAGE.rglob("commands.py")):
        module = importlib.import_module(".".join(("specdec_core", *path.relative_to(PACKAGE).with_suffix("").parts)))
        declared += [command.name for command in module.COMMANDS]
    assert sorted(command.name for command in cli.COMMANDS) == sorted(declared)
