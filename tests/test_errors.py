"""Bad input raises an error that names the argument and the values; nothing runs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jtblas

A = jnp.ones((8, 16), jnp.bfloat16)
B = jnp.ones((16, 4), jnp.bfloat16)


@pytest.mark.parametrize(
    "a,b,kwargs,error,words",
    [
        (jnp.ones(16, jnp.bfloat16), B, {}, ValueError, ["rank", "a.shape=(16,)"]),
        (A, jnp.ones((2, 16, 4), jnp.bfloat16), {}, ValueError, ["rank", "b.shape=(2, 16, 4)"]),
        (A, jnp.ones((15, 4), jnp.bfloat16), {}, ValueError, ["contract", "16 != 15"]),
        (A, B, {"transpose_b": True}, ValueError, ["contract", "16 != 4"]),
        (jnp.ones((2, 16, 8), jnp.bfloat16), B, {"transpose_a": True}, ValueError, ["transpose_a", "2-D"]),
        (A, B.astype(jnp.float16), {}, TypeError, ["same dtype", "bfloat16", "float16"]),
        (A.astype(jnp.int32), B.astype(jnp.int32), {}, TypeError, ["unsupported dtype int32"]),
        (A.astype(jnp.complex64), B.astype(jnp.complex64), {}, TypeError, ["complex64"]),
        (np.ones((8, 16)), np.ones((16, 4)), {}, TypeError, ["float64"]),
        ([[1.0]], B, {}, TypeError, ["a must be", "list"]),
        (A, "b", {}, TypeError, ["b must be", "str"]),
        (A, B, {"preferred_element_type": jnp.int8}, TypeError, ["preferred_element_type", "int8"]),
        (A, B, {"precision": "fastest-please"}, ValueError, ["precision", "fastest-please"]),
        (A, B, {"config": {"block_m": 64}}, TypeError, ["config", "dict"]),
    ],
)
def test_bad_operands(a, b, kwargs, error, words):
    with pytest.raises(error) as info:
        jtblas.matmul(a, b, **kwargs)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    "fields,words",
    [
        ({"block_m": 48}, ["block_m", "power of two", "48"]),
        ({"block_n": 8}, ["block_n", "8"]),
        ({"block_k": 1024}, ["block_k", "1024"]),
        ({"num_warps": 3}, ["num_warps", "3"]),
        ({"num_stages": 0}, ["num_stages", "0"]),
        ({"group_m": 6}, ["group_m", "6"]),
        ({"split_k": 3}, ["split_k", "3"]),
        ({"block_m": 64.0}, ["block_m", "64.0"]),
        ({"swap_ab": 1}, ["swap_ab", "bool", "1"]),
        ({"swap_ab": True, "tma": True}, ["tma", "swap_ab", "cannot both"]),
    ],
)
def test_invalid_config_values(fields, words):
    with pytest.raises(ValueError) as info:
        jtblas.Config(**fields)
    for word in words:
        assert word in str(info.value)


def test_config_over_shared_memory_names_the_budget():
    config = jtblas.Config(block_m=256, block_n=256, block_k=128, num_stages=4)
    with pytest.raises(ValueError) as info:
        jtblas.matmul(A, B, config=config)
    message = str(info.value)
    assert "shared memory" in message and "524288" in message and str(232448) in message


def test_config_is_hashable_and_static():
    config = jtblas.Config(block_m=32, block_n=32, block_k=32, num_warps=4, num_stages=2)
    assert hash(config) == hash(jtblas.Config(block_m=32, block_n=32, block_k=32, num_warps=4, num_stages=2))
    f = jax.jit(lambda x, y, c: jtblas.matmul(x, y, config=c), static_argnums=2)
    assert f(A, B, config).shape == (8, 4)
