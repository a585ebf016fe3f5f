"""jtblas.dot_general against lax.dot_general over a table of dimension numbers.

Supported cases must run the jtblas kernel (an interpreted kernel launch in the jaxpr on CPU, so a silent
fallback cannot pass); the others must be lax.dot_general's own result, bit for bit.
"""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jtblas
from tests.reference import DTYPES, kernel_calls, relative_error, tolerance

HIGHEST = lax.Precision.HIGHEST

# (lhs shape, rhs shape, dimension numbers, needs a transpose copy)
KERNEL_CASES = {
    "mk,kn": ((6, 9), (9, 5), (((1,), (0,)), ((), ())), False),
    "km,kn": ((9, 6), (9, 5), (((0,), (0,)), ((), ())), False),
    "mk,nk": ((6, 9), (5, 9), (((1,), (1,)), ((), ())), False),
    "km,nk": ((9, 6), (5, 9), (((0,), (1,)), ((), ())), False),
    "abk,kn (Dense on 3-D input)": ((2, 3, 9), (9, 5), (((2,), (0,)), ((), ())), False),
    "k,kn (vector-matrix)": ((9,), (9, 5), (((0,), (0,)), ((), ())), False),
    "mk,k (matrix-vector)": ((6, 9), (9,), (((1,), (0,)), ((), ())), False),
    "bmk,bkn": ((3, 6, 9), (3, 9, 5), (((2,), (1,)), ((0,), (0,))), False),
    "bkm,bnk": ((3, 9, 6), (3, 5, 9), (((1,), (2,)), ((0,), (0,))), False),
    "abmk,abkn (two batch dims)": ((2, 3, 6, 9), (2, 3, 9, 5), (((3,), (2,)), ((0, 1), (0, 1))), False),
    "kpq,kn (free dims after K)": ((9, 2, 3), (9, 5), (((0,), (0,)), ((), ())), False),
    "mk,kpq (rhs free dims)": ((6, 9), (9, 2, 3), (((1,), (0,)), ((), ())), False),
    "mkp,kn (K in the middle)": ((6, 9, 2), (9, 5), (((1,), (0,)), ((), ())), True),
    "mbk,bkn (batch not leading)": ((6, 3, 9), (3, 9, 5), (((2,), (1,)), ((1,), (0,))), True),
    "bqhd,bkhd (attention scores)": ((2, 5, 3, 8), (2, 7, 3, 8), (((3,), (3,)), ((0, 2), (0, 2))), True),
    "abmk,bakn (batch order swapped)": ((2, 3, 6, 9), (3, 2, 9, 5), (((3,), (2,)), ((0, 1), (1, 0))), True),
    "mk,kn zero M": ((0, 9), (9, 5), (((1,), (0,)), ((), ())), False),
}

FALLBACK_CASES = {
    "int32": (jnp.int32, jnp.int32, (((1,), (0,)), ((), ())), {}),
    "complex64": (jnp.complex64, jnp.complex64, (((1,), (0,)), ((), ())), {}),
    "mixed f32 x bf16": (jnp.float32, jnp.bfloat16, (((1,), (0,)), ((), ())), {}),
    "two contracting dims": (jnp.float32, jnp.float32, (((1, 0), (0, 1)), ((), ())), {}),
    "no contracting dim (outer product)": (jnp.float32, jnp.float32, (((), ()), ((), ())), {}),
    "int8 x int8 -> int32": (
        jnp.int8,
        jnp.int8,
        (((1,), (0,)), ((), ())),
        {"preferred_element_type": jnp.int32},
    ),
    "DotAlgorithmPreset": (
        jnp.float32,
        jnp.float32,
        (((1,), (0,)), ((), ())),
        {"precision": lax.DotAlgorithmPreset.F32_F32_F32},
    ),
}


def launches(fn, *args) -> int:
    return kernel_calls(fn, *args)


def test_signature_is_lax_dot_generals():
    ours = inspect.signature(jtblas.dot_general)
    theirs = inspect.signature(lax.dot_general)
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
        (p.name, p.kind, p.default) for p in theirs.parameters.values()
    ]
    assert "jax.lax.dot_general" in jtblas.dot_general.__doc__


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", list(KERNEL_CASES))
def test_kernel_cases_match_lax(case, dtype, rng):
    lhs_shape, rhs_shape, dims, needs_copy = KERNEL_CASES[case]
    lhs = jnp.asarray(rng.standard_normal(lhs_shape), DTYPES[dtype])
    rhs = jnp.asarray(rng.standard_normal(rhs_shape), DTYPES[dtype])
    fn = jax.jit(lambda x, y: jtblas.dot_general(x, y, dims))
    out = fn(lhs, rhs)
    reference = lax.dot_general(
        np.asarray(lhs, np.float64), np.asarray(rhs, np.float64), dims, precision=HIGHEST
    )
    assert out.shape == reference.shape and out.dtype == lhs.dtype
    assert relative_error(out, np.asarray(reference)) < tolerance(dtype, dtype)
    if out.size:
        assert launches(fn, lhs, rhs) == 1, "the jtblas kernel did not run (silent fallback?)"
        assert ("transpose[" in str(jax.make_jaxpr(fn)(lhs, rhs))) == needs_copy


@pytest.mark.parametrize("case", ["bmk,bkn", "mkp,kn (K in the middle)", "abk,kn (Dense on 3-D input)"])
def test_kernel_case_gradients_match_lax(case, rng):
    lhs_shape, rhs_shape, dims, _ = KERNEL_CASES[case]
    lhs = jnp.asarray(rng.standard_normal(lhs_shape), jnp.float32)
    rhs = jnp.asarray(rng.standard_normal(rhs_shape), jnp.float32)

    def loss(dot):
        return lambda x, y: jnp.sum(jnp.sin(dot(x, y, dims, precision=HIGHEST)))

    ours = jax.jit(jax.grad(loss(jtblas.dot_general), (0, 1)))(lhs, rhs)
    ref = jax.grad(loss(lax.dot_general), (0, 1))(lhs, rhs)
    for g, g_ref in zip(ours, ref):
        assert relative_error(g, np.asarray(g_ref, np.float64)) < 1e-5


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_preferred_element_type_float32(dtype, rng):
    lhs = jnp.asarray(rng.standard_normal((3, 7, 16)), DTYPES[dtype])
    rhs = jnp.asarray(rng.standard_normal((3, 16, 5)), DTYPES[dtype])
    dims = (((2,), (1,)), ((0,), (0,)))
    out = jtblas.dot_general(lhs, rhs, dims, preferred_element_type=jnp.float32)
    reference = np.einsum("bmk,bkn->bmn", np.asarray(lhs, np.float64), np.asarray(rhs, np.float64))
    assert out.dtype == jnp.float32
    assert relative_error(out, reference) < tolerance(dtype, "float32")


@pytest.mark.parametrize("case", list(FALLBACK_CASES))
def test_fallbacks_are_lax_dot_general(case, rng):
    lhs_dtype, rhs_dtype, dims, options = FALLBACK_CASES[case]
    lhs = jnp.asarray(
        rng.integers(-3, 4, (6, 9)) if case != "two contracting dims" else rng.integers(-3, 4, (9, 9))
    )
    rhs = jnp.asarray(
        rng.integers(-3, 4, (9, 5)) if case != "two contracting dims" else rng.integers(-3, 4, (9, 9))
    )
    lhs, rhs = lhs.astype(lhs_dtype), rhs.astype(rhs_dtype)
    fn = lambda x, y: jtblas.dot_general(x, y, dims, **options)
    np.testing.assert_array_equal(fn(lhs, rhs), lax.dot_general(lhs, rhs, dims, **options))
    assert launches(fn, lhs, rhs) == 0


def test_float64_falls_back(rng):
    with jax.enable_x64(True):
        lhs = jnp.asarray(rng.standard_normal((6, 9)))
        rhs = jnp.asarray(rng.standard_normal((9, 5)))
        assert lhs.dtype == jnp.float64
        dims = (((1,), (0,)), ((), ()))
        np.testing.assert_array_equal(jtblas.dot_general(lhs, rhs, dims), lax.dot_general(lhs, rhs, dims))
        assert launches(lambda x, y: jtblas.dot_general(x, y, dims), lhs, rhs) == 0


def test_invalid_dimension_numbers_raise_laxs_error():
    lhs, rhs = jnp.ones((6, 9)), jnp.ones((8, 5))
    with pytest.raises(TypeError, match="contracting dimensions"):
        jtblas.dot_general(lhs, rhs, (((1,), (0,)), ((), ())))


def test_vmap_of_dot_general_is_one_launch(rng):
    lhs = jnp.asarray(rng.standard_normal((4, 3, 6, 9)), jnp.float32)
    rhs = jnp.asarray(rng.standard_normal((4, 3, 9, 5)), jnp.float32)
    dims = (((2,), (1,)), ((0,), (0,)))
    fn = jax.vmap(lambda x, y: jtblas.dot_general(x, y, dims, precision=HIGHEST))
    reference = np.einsum("abmk,abkn->abmn", np.asarray(lhs, np.float64), np.asarray(rhs, np.float64))
    assert relative_error(fn(lhs, rhs), reference) < tolerance("float32", "float32", "ieee")
    assert launches(fn, lhs, rhs) == 1
