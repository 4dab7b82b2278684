"""Predict-then-run answers checked against what their experiments measured.

A predict-then-run question (one with an `experiment`) grades the learner's prediction against its key
before showing the measurement, so a key whose accepted range excludes the measurement marks a
correct prediction wrong. Two sets of measurements are checked:

- the recorded ones: every lesson recording (`lessons/outputs/<lang>/<stem>.json`, `experiments`)
  keeps the value of each experiment its cells ran or its quiz names (`tests/test_quiz_keys.py`);
- this run's: the experiment cache the notebooks just filled, `$SPECDEC_CACHE/experiments`
  (`make test` runs `python -m specdec_core.course.quiz_keys --cache` after the notebooks).

    misses(load_bank(), recorded_values())   # [] when every key covers every recorded value

A key must also stay inside its `answer.bounds` (`quiz.bounds_of`: 1 <= tau <= k + 1, r >= R_FLOOR, a
speedup <= k + 1, ...): a key that accepts an impossible number grades a broken machine right, and
then the question tests the machine instead of the learner's reasoning. `out_of_bounds` lists them,
and every predict-then-run question must declare its bounds (`unbounded`).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from . import lesson_outputs
from .quiz import Question, load_bank

Values = Mapping[str, Sequence[tuple[str, float]]]  # experiment -> [(where it was measured, value), ...]


@dataclass(frozen=True)
class Miss:
    question: str
    experiment: str
    where: str
    value: float
    low: float
    high: float

    def __str__(self) -> str:
        return (f"{self.question}: {self.experiment} = {self.value:.4g} ({self.where}) is outside the key's "
                f"range {self.low:.4g}–{self.high:.4g}")


@dataclass(frozen=True)
class OutOfBounds:
    question: str
    low: float  # the key's accepted interval
    high: float
    bound_low: float  # where the quantity can lie at all
    bound_high: float

    def __str__(self) -> str:
        return (f"{self.question}: the key accepts {self.low:.4g}–{self.high:.4g}, outside the bounds "
                f"{self.bound_low:.4g}–{self.bound_high:.4g} of what the quantity can be")


def recorded_values(outputs_dir=None) -> dict[str, list[tuple[str, float]]]:
    """Every experiment value kept by the lesson recordings, with the recording it came from."""
    found: dict[str, list[tuple[str, float]]] = {}
    for path in sorted((outputs_dir or lesson_outputs.OUTPUTS_DIR).glob("*/*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for name, value in data.get("experiments", {}).items():
            found.setdefault(name, []).append((f"{path.parent.name}/{path.stem}, {data['machine']}", value))
    return found


def cached_values(model: str = "smollm2-135m") -> dict[str, list[tuple[str, float]]]:
    """The values this machine's experiment cache holds (what the last notebooks measured or read)."""
    from .experiments import CACHE_VERSION, EXPERIMENTS, _cache_file

    found = {}
    for name in EXPERIMENTS:
        path = _cache_file(name, model)
        if path.is_file():
            data = json.loads(path.read_text())
            if data.get("fingerprint", {}).get("version") == CACHE_VERSION:
                found[name] = [(f"cache {path.name}", data["value"])]
    return found


def misses(bank: Iterable[Question], values: Values) -> list[Miss]:
    """Each (question, measurement) pair whose value lies outside the question's accepted range."""
    out = []
    for q in bank:
        if not q.experiment or q.answer is None:
            continue
        low, high = q.answer.value - q.answer.tolerance, q.answer.value + q.answer.tolerance
        for where, value in values.get(q.experiment, ()):
            if not low - 1e-9 <= value <= high + 1e-9:
                out.append(Miss(q.id, q.experiment, where, value, low, high))
    return out


def out_of_bounds(bank: Iterable[Question]) -> list[OutOfBounds]:
    """Each numeric question whose accepted range (value ± tolerance) leaves its declared bounds."""
    out = []
    for q in bank:
        if q.answer is None or q.answer.bounds is None:
            continue
        low, high = q.answer.value - q.answer.tolerance, q.answer.value + q.answer.tolerance
        bound_low, bound_high = q.answer.bounds
        if low < bound_low - 1e-9 or high > bound_high + 1e-9:
            out.append(OutOfBounds(q.id, low, high, bound_low, bound_high))
    return out


def unbounded(bank: Iterable[Question]) -> list[str]:
    """Predict-then-run questions that declare no bounds for their answer."""
    return [q.id for q in bank if q.experiment and q.answer is not None and q.answer.bounds is None]


def impossible(bank: Iterable[Question], values: Values) -> list[Miss]:
    """Measurements outside their question's bounds: a figure the hardware cannot produce (r < R_FLOOR,
    a speedup above k + 1), which the machine's slow one-token step made. Reported, not failed: the
    guard (`specdec_core.guard`) flags them where they are measured."""
    out = []
    for q in bank:
        if not q.experiment or q.answer is None or q.answer.bounds is None:
            continue
        low, high = q.answer.bounds
        out += [Miss(q.id, q.experiment, where, value, low, high)
                for where, value in values.get(q.experiment, ()) if not low - 1e-9 <= value <= high + 1e-9]
    return out


def unmeasured(bank: Iterable[Question], values: Values) -> list[str]:
    """Predict-then-run questions with no measurement of their experiment in `values`."""
    return [q.id for q in bank if q.experiment and not values.get(q.experiment)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", action="store_true", help="check this machine's experiment cache "
                        "(after the notebooks ran) instead of the recorded lesson outputs")
    args = parser.parse_args(argv)
    bank = load_bank()
    values = cached_values() if args.cache else recorded_values()
    found = misses(bank, values)
    checked = sum(1 for q in bank if q.experiment and values.get(q.experiment))
    print(f"{checked} predict-then-run questions checked against {'this run' if args.cache else 'the recordings'}"
          + (f"; not measured here: {', '.join(unmeasured(bank, values))}" if unmeasured(bank, values) else ""))
    for miss in found:
        print(f"  KEY EXCLUDES ITS MEASUREMENT  {miss}")
    outside, bare = out_of_bounds(bank), unbounded(bank)
    for key in outside:
        print(f"  KEY LEAVES ITS BOUNDS  {key}")
    for qid in bare:
        print(f"  PREDICT-THEN-RUN KEY WITHOUT BOUNDS  {qid}")
    for miss in impossible(bank, values):
        print(f"  note: impossible measurement (a slow one-token step?)  {miss.question}: {miss.experiment} = "
              f"{miss.value:.4g} ({miss.where}) is outside the bounds {miss.low:.4g}–{miss.high:.4g}")
    return 1 if found or outside or bare else 0


if __name__ == "__main__":
    sys.exit(main())
