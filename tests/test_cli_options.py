"""Every command's option set, snapshotted: flags, defaults, choices, types, help. A change to any option
must update tests/cli_options.json in the same commit (regenerate from the checkout:
PYTHONPATH=. python tests/test_cli_options.py)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import specdec_core
from specdec_core.cli import build_parser

SNAPSHOT = Path(__file__).with_name("cli_options.json")
CHECKOUT = Path(specdec_core.__file__).resolve().parents[1]  # default paths are stored relative to it


def _plain(value: object) -> object:
    """A default or const as JSON: paths as strings (relative to the checkout), tuples as lists."""
    if isinstance(value, Path):
        return str(value.relative_to(CHECKOUT) if value.is_relative_to(CHECKOUT) else value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _type(kind: object) -> str | None:
    """A type's name; a list parser's with the item type it closes over (`parse(int)`)."""
    if kind is None:
        return None
    inner = [c.cell_contents.__name__ for c in getattr(kind, "__closure__", None) or () if callable(c.cell_contents)]
    return kind.__name__ + (f"({', '.join(inner)})" if inner else "")


def _option(action: argparse.Action) -> dict:
    return {"flags": action.option_strings or [action.dest], "dest": action.dest, "action": type(action).__name__,
            "type": _type(action.type), "default": _plain(action.default),
            "const": _plain(action.const), "nargs": action.nargs, "choices": _plain(action.choices),
            "required": action.required, "metavar": action.metavar, "help": action.help}


def option_sets() -> dict:
    """{command: {"help": ..., "options": [...]}}, options sorted by their first flag (the order in --help
    is not part of the snapshot: shared helpers may add an option earlier or later)."""
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    return {name: {"help": helps[name],
                   "options": sorted((_option(a) for a in sub._actions if not isinstance(a, argparse._HelpAction)),
                                     key=lambda o: o["flags"][0])}
            for name, sub in sorted(commands.choices.items())}


def test_every_commands_options_match_the_snapshot():
    assert option_sets() == json.loads(SNAPSHOT.read_text(encoding="utf-8"))


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(option_sets(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
