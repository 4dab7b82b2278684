"""One typed error for everything a user can get wrong.

The CLI turns it into a one-line message and exit code 2; the app into `st.error`.
"""
from __future__ import annotations

from pathlib import Path


class SpecDecError(ValueError):
    """Bad input or a missing resource, with a message meant for the user."""


def ensure_writable(path: Path) -> None:
    """Fail before an expensive run, not after it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a"):
            pass
    except OSError as err:
        raise SpecDecError(f"cannot write {path}: {err.strerror or err}")
