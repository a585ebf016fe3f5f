"""Shared test fixtures: the `gpu` mark is skipped where JAX sees no CUDA device."""

import functools
import os

# Four CPU devices for the sharding tests (tests/nn/test_sharding.py): XLA reads the flag when JAX
# first creates its CPU backend, which no test module does at import. Tests that do not shard
# place their arrays on the first device, as with one.
_FORCED_DEVICES = "--xla_force_host_platform_device_count"
if _FORCED_DEVICES not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FORCED_DEVICES}=4".strip()

import jax  # noqa: E402 (after the flag above)
import numpy as np  # noqa: E402
import pytest  # noqa: E402


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
