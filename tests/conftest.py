"""Shared fixtures and helpers: models are loaded once per test session (load_model caches per process).

Every test process (and the CLI, app and notebook processes tests start) follows one pinned kernel table,
`legacy`, so that no exactness test depends on which kernels this machine's measured table picked;
tests/test_kernels.py measures and checks the measured table itself.

Markers (pyproject.toml): `slow` (loads SmolLM2 and takes over 10 s), `browser` (a real Chromium),
`llama_server` (starts llama.cpp's server), `notebook` (executes lessons). `make test-fast` runs the rest.
"""
import os

os.environ.setdefault("SPECDEC_KERNELS", "legacy")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import specdec_core as sd  # noqa: E402
import specdec_core.sampling as sampling  # noqa: E402
from specdec_core.cli import main  # noqa: E402
from specdec_core.drafters import Draft, Drafter  # noqa: E402


@pytest.fixture(scope="session")
def tiny() -> sd.LoadedModel:
    return sd.load_model("tiny")


@pytest.fixture(scope="session")
def smol() -> sd.LoadedModel:
    return sd.load_model("smollm2-135m")


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    """The CLI in this process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


class UniformDrafter(Drafter):
    """A draft clearly different from the target but on the same support: q uniform over `support`
    (p's top 8 in the sampling tests), each draft with a fixed confidence."""

    def __init__(self, support: list[int], vocab_size: int) -> None:
        self.q = torch.zeros(vocab_size)
        self.q[support] = 1.0 / len(support)

    def propose(self, context, k, params, generator) -> Draft:
        return Draft([sampling.sample(self.q, generator) for _ in range(k)], self.q.expand(k, -1), confidence=[0.9] * k)


def llama_server_binary() -> Path | None:
    """llama.cpp's server: $SPECDEC_LLAMA_SERVER, else what `make llama-server` builds; None if neither."""
    from specdec_core.models import cache_dir

    for candidate in (os.environ.get("SPECDEC_LLAMA_SERVER"), cache_dir() / "llama-server" / "build" / "bin" / "llama-server"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


# Fixtures that make a test slow wherever it is used: SmolLM2 itself, and the smoke-trained drafters of every
# kind (~1 min to build once).
SLOW_FIXTURES = ("smol", "smoke_runs")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `slow` every test that uses a slow fixture, so that `make test-fast` leaves it out."""
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in SLOW_FIXTURES):
            item.add_marker(pytest.mark.slow)
