"""Shared test fixtures: the `gpu` mark is skipped where JAX sees no CUDA device."""

import functools

import jax
import numpy as np
import pytest


@functools.cache
def cuda_available() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; run `pytest -m gpu` on the GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request) -> np.random.Generator:
    """Fresh random inputs each run, reproducible from the seed printed on failure."""
    seed = np.random.SeedSequence().entropy % 2**32
    request.node.user_properties.append(("seed", seed))
    print(f"seed={seed}")
    return np.random.default_rng(seed)
