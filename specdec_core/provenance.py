"""Where a result came from: the code's commit and the machine's processor, recorded in every result file."""
from __future__ import annotations

import platform
import subprocess
from pathlib import Path


def cpu_name() -> str:
    """The processor's model name (from /proc/cpuinfo on Linux, else what `platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def git_commit() -> str | None:
    """The checkout's commit (with "-dirty" for uncommitted changes), so every result file names its code."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
