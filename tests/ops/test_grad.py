"""Gradients of jtblas.matmul: its custom_vjp against float64 formulas and jax.grad of jnp.dot.

The loss is sum(C · R) for a random R, so dA and dB have closed forms (R·op(B)ᵀ and op(A)ᵀ·R,
mapped back to the stored layouts) computed in float64 from the dtype-rounded inputs; the
tolerances are the forward ones (tests/reference.py), since each gradient is one more GEMM.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jtblas
import jtblas.model
from jtblas import interpreter
from jtblas.kernels.matmul import matmul_kernel
from tests.reference import DTYPES, lower_for_cuda, record_planned_problems, relative_error, tolerance

LAYOUTS = list(itertools.product([False, True], repeat=2))
LAYOUT_IDS = ["NN", "NT", "TN", "TT"]
HIGHEST = jax.lax.Precision.HIGHEST


def operands(rng, m, n, k, dtype, transpose_a, transpose_b, batch=()):
    a_shape = (k, m) if transpose_a else (*batch, m, k)
    b_shape = (n, k) if transpose_b else (k, n)
    a = jnp.asarray(rng.standard_normal(a_shape), DTYPES[dtype])
    b = jnp.asarray(rng.standard_normal(b_shape), DTYPES[dtype])
    return a, b


def float64_grads(a, b, r, transpose_a, transpose_b):
    """dA, dB of sum(op(A)·op(B) · R) in float64, in the stored layouts of A and B."""
    a64, b64, r64 = (np.asarray(x, np.float64) for x in (a, b, r))
    op_a = a64.T if transpose_a else a64.reshape(-1, a64.shape[-1])
    op_b = b64.T if transpose_b else b64
    r2 = r64.reshape(-1, r64.shape[-1])
    d_op_a = r2 @ op_b.T  # [M, K]
    d_op_b = op_a.T @ r2  # [K, N]
    da = d_op_a.T if transpose_a else d_op_a.reshape(a64.shape)
    db = d_op_b.T if transpose_b else d_op_b
    return da, db


def linear_loss(r, **options):
    def loss(a, b):
        return jnp.sum(jtblas.matmul(a, b, **options).astype(jnp.float32) * r)

    return loss


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
def test_grads_match_float64(transpose_a, transpose_b, dtype, jit, rng):
    m, n, k = 19, 23, 37
    a, b = operands(rng, m, n, k, dtype, transpose_a, transpose_b)
    # R rounded to the dtype: the backward casts the cotangent to the operands' dtype.
    r = jnp.asarray(rng.standard_normal((m, n)), DTYPES[dtype]).astype(jnp.float32)
    grad = jax.grad(linear_loss(r, transpose_a=transpose_a, transpose_b=transpose_b), argnums=(0, 1))
    da, db = (jax.jit(grad) if jit else grad)(a, b)
    da64, db64 = float64_grads(a, b, r, transpose_a, transpose_b)
    assert da.dtype == a.dtype and db.dtype == b.dtype
    assert da.shape == a.shape and db.shape == b.shape
    assert relative_error(da, da64) < tolerance(dtype, dtype)
    assert relative_error(db, db64) < tolerance(dtype, dtype)


@pytest.mark.parametrize("transpose_b", [False, True], ids=["N", "T"])
def test_grads_with_leading_batch_dims(transpose_b, rng):
    """dB contracts over every folded row of A [2, 3, M, K]."""
    a, b = operands(rng, 5, 11, 13, "float32", False, transpose_b, batch=(2, 3))
    r = jnp.asarray(rng.standard_normal((2, 3, 5, 11)), jnp.float32)
    loss = linear_loss(r, transpose_b=transpose_b, precision=HIGHEST)
    da, db = jax.jit(jax.grad(loss, argnums=(0, 1)))(a, b)
    da64, db64 = float64_grads(a, b, r, False, transpose_b)
    assert relative_error(da, da64) < tolerance("float32", "float32", "ieee")
    assert relative_error(db, db64) < tolerance("float32", "float32", "ieee")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_grads_with_float32_output(dtype, rng):
    """preferred_element_type=float32: the fp32 cotangent is cast to the operand dtype and the
    gradients come back in the operands' dtype."""
    m, n, k = 17, 9, 33
    a, b = operands(rng, m, n, k, dtype, False, True)
    r = jnp.asarray(rng.standard_normal((m, n)), DTYPES[dtype]).astype(jnp.float32)
    loss = linear_loss(r, transpose_b=True, preferred_element_type=jnp.float32)
    da, db = jax.grad(loss, argnums=(0, 1))(a, b)
    assert da.dtype == DTYPES[dtype] and db.dtype == DTYPES[dtype]
    da64, db64 = float64_grads(a, b, r, False, True)
    assert relative_error(da, da64) < tolerance(dtype, dtype)
    assert relative_error(db, db64) < tolerance(dtype, dtype)


def two_layer(matmul):
    def loss(x, w1, w2):
        h = jnp.tanh(matmul(x, w1))
        return jnp.mean(jnp.sin(matmul(h, w2)) ** 2)

    return loss


def test_value_and_grad_of_a_network_matches_jnp_dot(rng):
    x = jnp.asarray(rng.standard_normal((4, 6, 20)), jnp.float32)
    w1 = jnp.asarray(rng.standard_normal((20, 24)) / 4, jnp.float32)
    w2 = jnp.asarray(rng.standard_normal((24, 7)) / 5, jnp.float32)
    ours = jax.jit(jax.value_and_grad(two_layer(lambda u, v: jtblas.matmul(u, v, precision=HIGHEST)), (1, 2)))
    ref = jax.value_and_grad(two_layer(lambda u, v: jnp.dot(u, v, precision=HIGHEST)), (1, 2))
    (value, grads), (value_ref, grads_ref) = ours(x, w1, w2), ref(x, w1, w2)
    np.testing.assert_allclose(value, value_ref, rtol=1e-5)
    for g, g_ref in zip(grads, grads_ref):
        assert relative_error(g, np.asarray(g_ref, np.float64)) < 1e-5


def test_second_order_reverse_mode(rng):
    """The backward GEMMs are public matmuls, so grad of grad works too."""
    a = jnp.asarray(rng.standard_normal((9, 12)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((12, 10)), jnp.float32)

    def curvature(dot):
        return jax.grad(lambda x: jnp.sum(jax.grad(lambda y: jnp.sum(jnp.sin(dot(y, b))))(x) ** 2))

    ours = curvature(lambda u, v: jtblas.matmul(u, v, precision=HIGHEST))(a)
    ref = curvature(lambda u, v: jnp.dot(u, v, precision=HIGHEST))(a)
    assert relative_error(ours, np.asarray(ref, np.float64)) < 1e-5


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="counts the interpreter's kernel runs (CPU backend)")
@pytest.mark.parametrize("policy", ["nothing_saveable", "save_only_these_names"])
def test_checkpoint_policies(policy, rng, monkeypatch):
    """Under jax.checkpoint the output is named "jtblas_matmul": saving it skips recomputing the
    forward GEMMs in the backward pass (counted as kernel runs, eagerly: under jit XLA drops the
    unused first forward anyway), with the same gradients."""
    runs = []
    interpreted = interpreter._interpreted
    monkeypatch.setattr(
        interpreter, "_interpreted", lambda k: (runs.append(k is matmul_kernel), interpreted(k))[1]
    )
    x = jnp.asarray(rng.standard_normal((8, 16)), jnp.float32)
    w1 = jnp.asarray(rng.standard_normal((16, 16)) / 4, jnp.float32)
    w2 = jnp.asarray(rng.standard_normal((16, 8)) / 4, jnp.float32)
    loss = two_layer(lambda u, v: jtblas.matmul(u, v, precision=HIGHEST))
    chosen = (
        jax.checkpoint_policies.nothing_saveable
        if policy == "nothing_saveable"
        else jax.checkpoint_policies.save_only_these_names("jtblas_matmul")
    )
    remat = jax.grad(jax.checkpoint(loss, policy=chosen), (1, 2))
    grads = jax.block_until_ready(remat(x, w1, w2))
    # 2 forward GEMMs and 3 backward ones (no dx for the data input x), plus the recomputed
    # forward GEMMs (2, as the policy saves nothing) of the rematerialised backward pass.
    assert sum(runs) == (7 if policy == "nothing_saveable" else 5)
    for g, g_ref in zip(grads, jax.grad(loss, (1, 2))(x, w1, w2)):
        np.testing.assert_allclose(g, g_ref, rtol=1e-6, atol=1e-7)
    for g, g_ref in zip(jax.jit(remat)(x, w1, w2), grads):
        np.testing.assert_allclose(g, g_ref, rtol=1e-6, atol=1e-7)


def test_backward_reads_transposes_through_strides_with_model_configs(rng, monkeypatch):
    """A forced forward config does not leak into the backward: the model is asked for dx and dw,
    whose problems carry transpose flags (no transposed copy appears in the jaxpr)."""
    asked = record_planned_problems(monkeypatch)
    forced = jtblas.Config(block_m=32, block_n=32, block_k=32, group_m=1, num_warps=4, num_stages=2)
    a = jnp.asarray(rng.standard_normal((21, 30)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((30, 18)), jnp.float32)
    grad = jax.grad(lambda x, y: jnp.sum(jtblas.matmul(x, y, config=forced)), (0, 1))
    jaxpr = str(jax.make_jaxpr(grad)(a, b))
    assert "transpose[" not in jaxpr  # the primitive (the static arguments name transpose flags)
    assert sorted((p.m, p.n, p.k, p.layout) for p in asked) == [(21, 30, 18, "NT"), (30, 18, 21, "TN")]


@pytest.mark.parametrize(
    "transform",
    [
        lambda f, a: jax.jvp(f, (a,), (a,)),
        lambda f, a: jax.jacfwd(f)(a),
        lambda f, a: jax.jit(lambda x: jax.jvp(f, (x,), (x,)))(a),
    ],
    ids=["jvp", "jacfwd", "jit-jvp"],
)
def test_forward_mode_raises_a_clear_error(transform):
    b = jnp.ones((4, 3), jnp.float32)
    with pytest.raises(TypeError, match="reverse-mode differentiation only"):
        transform(lambda x: jtblas.matmul(x, b), jnp.ones((2, 4), jnp.float32))


def test_empty_contraction_has_zero_grads():
    a, b = jnp.ones((3, 0), jnp.float32), jnp.ones((0, 5), jnp.float32)
    da, db = jax.grad(lambda x, y: jnp.sum(jtblas.matmul(x, y)), (0, 1))(a, b)
    assert da.shape == (3, 0) and db.shape == (0, 5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_grad_and_vmap_on_gpu(dtype, rng):
    """The CUDA path (jax-triton) under jit(grad(vmap(...)))."""
    gpu = jax.devices("gpu")[0]
    a = jax.device_put(jnp.asarray(rng.standard_normal((3, 64, 96)), DTYPES[dtype]), gpu)
    b = jax.device_put(jnp.asarray(rng.standard_normal((3, 80, 96)), DTYPES[dtype]), gpu)
    r = jax.device_put(jnp.asarray(rng.standard_normal((3, 64, 80)), DTYPES[dtype]).astype(jnp.float32), gpu)

    def loss(x, y):
        out = jax.vmap(lambda u, v: jtblas.matmul(u, v, transpose_b=True))(x, y)
        return jnp.sum(out.astype(jnp.float32) * r)

    da, db = jax.jit(jax.grad(loss, (0, 1)))(a, b)
    a64, b64, r64 = (np.asarray(x, np.float64) for x in (a, b, r))
    assert relative_error(da, np.einsum("bmn,bnk->bmk", r64, b64)) < tolerance(dtype, dtype)
    assert relative_error(db, np.einsum("bmn,bmk->bnk", r64, a64)) < tolerance(dtype, dtype)


def test_grad_of_vmap_lowers_for_cuda_sm90():
    """The CUDA path of grad(vmap(matmul)) — batch grid axis, transposed reads — compiles with
    jax-triton for sm_90 on a machine without a GPU (one forward and two gradient launches)."""
    a = jax.ShapeDtypeStruct((3, 256, 512), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((3, 384, 512), jnp.bfloat16)

    def loss(x, y):
        out = jax.vmap(lambda u, v: jtblas.matmul(u, v, transpose_b=True))(x, y)
        return jnp.sum(out.astype(jnp.float32) ** 2)

    assert lower_for_cuda(jax.grad(loss, (0, 1)), a, b).count("triton_kernel_call") == 3
