"""vmap of jtblas.matmul: the custom_vmap rule launches one batched kernel (or folds a batched lhs
into M), checked against float64 einsum, with one kernel launch per product in the jaxpr."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jtblas
from tests.reference import DTYPES, kernel_calls, relative_error, tolerance

LAYOUTS = list(itertools.product([False, True], repeat=2))
LAYOUT_IDS = ["NN", "NT", "TN", "TT"]
HIGHEST = jax.lax.Precision.HIGHEST


def stored(rng, shape, transpose, dtype, batch=None):
    """A random operand [batch?, rows, cols] stored transposed if asked, and its float64 value
    as used by the product (op applied)."""
    rows, cols = shape
    stored_shape = (cols, rows) if transpose else (rows, cols)
    x = jnp.asarray(rng.standard_normal(((batch,) if batch else ()) + stored_shape), DTYPES[dtype])
    used = np.asarray(x, np.float64)
    return x, np.swapaxes(used, -1, -2) if transpose else used


def kernel_launches(fn, *args) -> int:
    return kernel_calls(fn, *args)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("batched", ["lhs", "rhs", "both"])
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
def test_vmap_matches_einsum(transpose_a, transpose_b, batched, dtype, rng):
    batch, m, n, k = 3, 13, 21, 27
    a, a64 = stored(rng, (m, k), transpose_a, dtype, batch if batched != "rhs" else None)
    b, b64 = stored(rng, (k, n), transpose_b, dtype, batch if batched != "lhs" else None)
    in_axes = (0 if batched != "rhs" else None, 0 if batched != "lhs" else None)
    fn = jax.vmap(
        lambda x, y: jtblas.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b), in_axes=in_axes
    )
    out = jax.jit(fn)(a, b)
    spec = {"lhs": "bmk,kn->bmn", "rhs": "mk,bkn->bmn", "both": "bmk,bkn->bmn"}[batched]
    assert out.shape == (batch, m, n) and out.dtype == DTYPES[dtype]
    assert relative_error(out, np.einsum(spec, a64, b64)) < tolerance(dtype, dtype)
    assert kernel_launches(fn, a, b) == 1  # one batched launch, not a loop over the batch


def test_batched_lhs_folds_into_m(rng):
    """Only the (non-transposed) lhs batched: one [B·M, K] x [K, N] launch, no batch grid axis."""
    a = jnp.asarray(rng.standard_normal((4, 5, 8)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((8, 6)), jnp.float32)
    jaxpr = str(jax.make_jaxpr(jax.vmap(jtblas.matmul, in_axes=(0, None)))(a, b))
    assert "float32[1,20,6]" in jaxpr  # the launch's output: batch 1, M = 4·5


def test_in_axes_not_leading(rng):
    a = jnp.asarray(rng.standard_normal((7, 3, 9)), jnp.float32)  # batch on axis 1
    b = jnp.asarray(rng.standard_normal((9, 5, 3)), jnp.float32)  # batch on axis 2
    out = jax.vmap(lambda x, y: jtblas.matmul(x, y, precision=HIGHEST), in_axes=(1, 2), out_axes=1)(a, b)
    reference = np.einsum("mbk,knb->mbn", np.asarray(a, np.float64), np.asarray(b, np.float64))
    assert relative_error(out, reference) < tolerance("float32", "float32", "ieee")


@pytest.mark.parametrize(
    "inner,outer,spec",
    [
        ((0, None), (None, 0), "amk,bkn->bamn"),  # lhs batched inside, rhs outside: broadcast copy
        ((0, 0), (0, 0), "abmk,abkn->abmn"),
        ((None, 0), (0, None), "amk,bkn->abmn"),
        ((0, 0), (0, None), "abmk,bkn->abmn"),
    ],
    ids=["lhs-in-rhs-out", "both-both", "rhs-in-lhs-out", "both-in-lhs-out"],
)
def test_nested_vmap(inner, outer, spec, rng):
    a_batch = "".join(c for c in spec.split(",")[0] if c in "ab")
    b_batch = "".join(c for c in spec.split(",")[1].split("->")[0] if c in "ab")
    sizes = {"a": 2, "b": 3}
    a = jnp.asarray(rng.standard_normal((*(sizes[c] for c in a_batch), 5, 7)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((*(sizes[c] for c in b_batch), 7, 4)), jnp.float32)
    product = lambda x, y: jtblas.matmul(x, y, precision=HIGHEST)
    fn = jax.jit(jax.vmap(jax.vmap(product, in_axes=inner), in_axes=outer))
    out = fn(a, b)
    reference = np.einsum(spec, np.asarray(a, np.float64), np.asarray(b, np.float64))
    assert relative_error(out, reference) < tolerance("float32", "float32", "ieee")
    assert kernel_launches(fn, a, b) == 1


def test_grad_of_vmap_and_vmap_of_grad(rng):
    a = jnp.asarray(rng.standard_normal((3, 6, 10)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((3, 10, 4)), jnp.float32)

    def loss(dot):
        return lambda x, y: jnp.sum(jnp.sin(jax.vmap(lambda u, v: dot(u, v))(x, y)))

    ours = jax.jit(jax.grad(loss(lambda u, v: jtblas.matmul(u, v, precision=HIGHEST)), (0, 1)))(a, b)
    ref = jax.grad(loss(lambda u, v: jnp.dot(u, v, precision=HIGHEST)), (0, 1))(a, b)
    for g, g_ref in zip(ours, ref):
        assert relative_error(g, np.asarray(g_ref, np.float64)) < 1e-5

    per_example = jax.vmap(jax.grad(lambda u, v: jnp.sum(jtblas.matmul(u, v, precision=HIGHEST) ** 2), 1))
    per_example_ref = jax.vmap(jax.grad(lambda u, v: jnp.sum(jnp.dot(u, v, precision=HIGHEST) ** 2), 1))
    assert relative_error(per_example(a, b), np.asarray(per_example_ref(a, b), np.float64)) < 1e-5


def test_vmap_over_empty_batch():
    out = jax.vmap(jtblas.matmul)(jnp.ones((0, 4, 5)), jnp.ones((0, 5, 3)))
    assert out.shape == (0, 4, 3)
