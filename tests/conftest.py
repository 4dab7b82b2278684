"""Shared fixtures: models are loaded once per test session (load_model caches per process)."""
import pytest

import specdec_core as sd


@pytest.fixture(scope="session")
def tiny() -> sd.LoadedModel:
    return sd.load_model("tiny")


@pytest.fixture(scope="session")
def smol() -> sd.LoadedModel:
    return sd.load_model("smollm2-135m")
