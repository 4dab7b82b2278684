"""`python -m specdec_core ...`: the shell. Each subsystem declares its commands beside the code they run
(`commands.py`, `bench/commands.py`, `training/commands.py`, `bridge/commands.py`); this module only
assembles their parsers and dispatches to the handler of the command given. Nothing imports it.

Bad input never shows a traceback: one line on stderr, exit code 2.
"""
from __future__ import annotations

import argparse
import sys

from . import commands as engine
from .bench import commands as bench
from .bridge import commands as bridge
from .errors import SpecDecError
from .options import Command, OneLineParser
from .training import commands as training

EXIT_USAGE = 2
COMMANDS: tuple[Command, ...] = (*engine.COMMANDS, *bench.COMMANDS, *training.COMMANDS, *bridge.COMMANDS)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m specdec_core", description="A real, exact, observable speculative-decoding engine.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help)
        command.add_options(p)
        p.set_defaults(handler=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        args.handler(args)
    except SpecDecError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return 0
