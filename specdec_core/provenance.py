"""Where a result came from: the code's commit and the machine's processor, recorded in every result file."""
from __future__ import annotations

import hashlib
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


def engine_version() -> str | None:
    """The engine's code without the course: a hash of specdec_core/ minus specdec_core/course/ at HEAD
    (with "-dirty" for uncommitted changes there). A long benchmark resumed in a later session continues
    only on the same engine, but a lesson or quiz edit committed meanwhile does not change what it measures."""
    root = Path(__file__).parent
    try:
        listing = subprocess.run(["git", "ls-tree", "-r", "HEAD", "."], cwd=root, capture_output=True, text=True,
                                 timeout=10, check=True).stdout
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)course"],
                               cwd=root, capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    engine = [line for line in listing.splitlines() if not line.split("\t", 1)[-1].startswith("course/")]
    if not engine:
        return None
    return hashlib.sha1("\n".join(engine).encode()).hexdigest()[:12] + ("-dirty" if dirty.strip() else "")
