"""Operands of two dtypes (bf16 activations x an fp32 weight): each loaded as stored and converted
in registers to the compute dtype, never copied converted. Every cast combination against a
float64 reference of the operands rounded to the compute dtype (fp32 output: only accumulation
error remains, so a missing or wrong rounding fails), in every layout and kernel form; gradients
in each operand's dtype; vmap; the model's bytes; no convert outside the kernel; the CUDA lowering.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jtblas
from jtblas import hardware
from jtblas.config import Config, Problem
from jtblas.model import candidates, cost, resources
from jtblas.operands import compute_dtype
from tests.reference import DTYPES, count_equations, kernel_calls, lower_for_cuda, relative_error

LAYOUTS = list(itertools.product([False, True], repeat=2))
H200 = hardware.BUILTIN["h200"]
# (a's dtype, b's dtype, the compute dtype): the narrower operand's; fp32 for two 16-bit ones.
PAIRS = [
    ("bfloat16", "float32", "bfloat16"),
    ("float32", "bfloat16", "bfloat16"),
    ("float16", "float32", "float16"),
    ("float32", "float16", "float16"),
    ("bfloat16", "float16", "float32"),
]
FORMS = {
    "plain": Config(block_m=32, block_n=32, block_k=16, group_m=1, num_warps=4, num_stages=2),
    "swapped": Config(block_m=16, block_n=64, block_k=16, group_m=1, num_warps=4, num_stages=2, swap_ab=True),
    "split_k": Config(block_m=32, block_n=32, block_k=16, group_m=1, num_warps=4, num_stages=2, split_k=2),
}
# fp32 output: accumulation error only; fp32 compute at DEFAULT precision is tf32 on a GPU (the
# interpreter multiplies in full fp32).
TOLERANCE = {"bfloat16": 2e-5, "float16": 2e-5, "float32": 4e-3}


def stored(rng, shape, dtype):
    return jnp.asarray(rng.standard_normal(shape), DTYPES[dtype])


def as_used(x, compute, transposed):
    """x rounded to the compute dtype (the kernel's conversion), in float64, as op(x)."""
    value = np.asarray(jnp.asarray(x).astype(DTYPES[compute]), np.float64)
    return value.T if transposed else value


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("a_dtype,b_dtype,compute", PAIRS)
def test_every_cast_combination_matches_float64(a_dtype, b_dtype, compute, form, rng):
    m, n, k = 37, 48, 70
    transpose_a, transpose_b = LAYOUTS[(PAIRS.index((a_dtype, b_dtype, compute)) + list(FORMS).index(form)) % 4]
    a = stored(rng, (k, m) if transpose_a else (m, k), a_dtype)
    b = stored(rng, (n, k) if transpose_b else (k, n), b_dtype)
    out = jax.jit(lambda x, y: jtblas.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b,
                                             preferred_element_type=jnp.float32, config=FORMS[form]))(a, b)
    reference = as_used(a, compute, transpose_a) @ as_used(b, compute, transpose_b)
    assert out.dtype == jnp.float32
    assert relative_error(out, reference) < TOLERANCE[compute], (transpose_a, transpose_b)


def test_compute_dtype_rule():
    bf16, f16, f32 = (jnp.ones((2, 2), t) for t in (jnp.bfloat16, jnp.float16, jnp.float32))
    assert compute_dtype(bf16, f32) == jnp.bfloat16 and compute_dtype(f32, f16) == jnp.float16
    assert compute_dtype(bf16, f16) == jnp.float32
    assert compute_dtype(bf16, f32, jax.lax.Precision.HIGHEST) == jnp.float32
    assert compute_dtype(bf16, bf16, jax.lax.Precision.HIGHEST) == jnp.bfloat16
    with pytest.raises(TypeError, match="unsupported dtype int8 of b"):
        compute_dtype(bf16, jnp.ones((2, 2), jnp.int8))


def test_default_output_is_the_compute_dtype_and_highest_is_exact(rng):
    a, b = stored(rng, (20, 33), "bfloat16"), stored(rng, (33, 24), "float32")
    out = jtblas.matmul(a, b, config=FORMS["plain"])
    assert out.dtype == jnp.bfloat16
    exact = jtblas.matmul(a, b, precision=jax.lax.Precision.HIGHEST, preferred_element_type=jnp.float32,
                          config=FORMS["plain"])
    reference = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    assert relative_error(exact, reference) < 2e-6


def test_with_the_epilogue_and_the_model_pick(rng):
    """An fp32 weight with a bias, gelu and a residual: fused kernel and a deep-K split's reduction."""
    for m, k in ((24, 64), (4, 2048)):
        a, b = stored(rng, (m, k), "bfloat16"), stored(rng, (k, 40), "float32")
        bias, residual = stored(rng, (40,), "float32"), stored(rng, (m, 40), "bfloat16")
        out = jtblas.matmul(a, b, bias=bias, residual=residual, activation="gelu", preferred_element_type=jnp.float32)
        pre = as_used(a, "bfloat16", False) @ as_used(b, "bfloat16", False) + np.asarray(bias, np.float64)
        reference = np.asarray(jax.nn.gelu(pre, approximate=False)) + np.asarray(residual, np.float64)
        assert relative_error(out, reference) < 1e-5, (m, k)


@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=["NN", "NT", "TN", "TT"])
def test_gradients_come_back_in_each_operands_dtype(transpose_a, transpose_b, rng):
    """bf16 activations x an fp32 weight: dx in bf16, dw in fp32, against float64 formulas (the
    cotangent is rounded to bf16, the compute dtype, as in the same-dtype backward)."""
    m, n, k = 19, 24, 30
    a = stored(rng, (k, m) if transpose_a else (m, k), "bfloat16")
    w = stored(rng, (n, k) if transpose_b else (k, n), "float32")
    r = stored(rng, (m, n), "bfloat16")

    def loss(x, y):
        out = jtblas.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b)
        return jnp.sum(out.astype(jnp.float32) * r.astype(jnp.float32))

    da, dw = jax.jit(jax.grad(loss, argnums=(0, 1)))(a, w)
    assert da.dtype == jnp.bfloat16 and dw.dtype == jnp.float32
    assert da.shape == a.shape and dw.shape == w.shape
    op_a, op_w = as_used(a, "bfloat16", transpose_a), as_used(w, "bfloat16", transpose_b)
    r64 = np.asarray(r, np.float64)
    d_op_a, d_op_w = r64 @ op_w.T, op_a.T @ r64
    assert relative_error(da, d_op_a.T if transpose_a else d_op_a) < 8e-3
    assert relative_error(dw, d_op_w.T if transpose_b else d_op_w) < 2e-5


def test_vmap_over_mixed_operands(rng):
    a, w = stored(rng, (3, 9, 16), "bfloat16"), stored(rng, (3, 16, 20), "float32")
    out = jax.vmap(lambda x, y: jtblas.matmul(x, y, preferred_element_type=jnp.float32,
                                              config=FORMS["plain"]))(a, w)
    for i in range(3):
        reference = as_used(a[i], "bfloat16", False) @ as_used(w[i], "bfloat16", False)
        assert relative_error(out[i], reference) < 2e-5, i


def test_no_converted_copy_of_the_weight_outside_the_kernel(rng):
    """The fp32 weight reaches the launch as stored: no convert_element_type in the program."""
    a, w = stored(rng, (8, 16), "bfloat16"), stored(rng, (16, 32), "float32")
    jaxpr = jax.make_jaxpr(lambda x, y: jtblas.matmul(x, y))(a, w)
    assert count_equations(jaxpr, "convert_element_type") == 0
    assert kernel_calls(lambda x, y: jtblas.matmul(x, y), a, w) == 1


def test_model_counts_each_operands_own_bytes():
    """An fp32 B read by a bf16 product: B's DRAM bytes and shared memory are fp32's, the rate
    bf16's; no TMA kernel, no K phases."""
    same = Problem(m=2048, n=4096, k=4096)
    mixed = Problem(m=2048, n=4096, k=4096, b_dtype="float32")
    config = Config(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3)
    assert resources.shared_memory_bytes(config, mixed) == (3 * (128 * 2 + 128 * 4) * 64 + 128 * 2 * 64)
    extra = cost.estimate(config, mixed, H200).dram_bytes - cost.estimate(config, same, H200).dram_bytes
    assert extra > 4096 * 4096 * 2 - 1
    assert cost.estimate(config, mixed, H200).step_mma == cost.estimate(config, same, H200).step_mma
    space = candidates.candidates_for_problem(mixed, H200)
    assert space and not any(c.tma or c.k_phases > 1 for c in space)
    odd = Problem(m=64, n=50257, k=1600, a_dtype="float32")
    assert resources.k_phase_counts(odd) == () and "a=float32" in odd.short()
    assert jtblas.model.select_for_problem(mixed, H200) in space


def test_mixed_products_compile_for_sm90():
    """An fp32 weight converted to bf16 in registers, plain (with an epilogue) and split, compiles
    to PTX for sm_90 (jax-triton's CUDA lowering, no GPU needed)."""
    a = jax.ShapeDtypeStruct((64, 512), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((512, 256), jnp.float32)
    bias = jax.ShapeDtypeStruct((256,), jnp.float32)
    for config in (Config(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=3),
                   Config(block_m=16, block_n=64, block_k=64, num_warps=4, num_stages=3, swap_ab=True, split_k=2)):
        text = lower_for_cuda(lambda x, y, z, config=config: jtblas.matmul(x, y, bias=z, activation="relu",
                                                                          config=config), a, w, bias)
        assert text.count("triton_kernel_call") == config.k_slices


def test_model_converts_first_only_where_that_is_predicted_faster():
    """A decode product reads the fp32 weight as stored (its one pass is all it reads); a large
    one converts it first (the kernel would read it from L2 at twice the width per tile row)."""
    decode = jtblas.explain(16, 14336, 4096, hardware="h200", b_dtype="fp32").plan
    large = jtblas.explain(4096, 14336, 4096, hardware="h200", b_dtype="fp32").plan
    assert not decode.convert_b and decode.kernel_problem.b_dtype == "float32"
    assert "converts in the kernel" in decode.reason
    assert large.convert_b and not large.kernel_problem.casts and "converts first" in large.reason
    assert large.predicted_seconds == pytest.approx(
        large.predicted_seconds - large.copy_seconds + jtblas.model.repack.convert_seconds(large.problem, "b", H200))


def test_converted_first_plan_runs(monkeypatch, rng):
    """The ops side of a plan that converts B first (forced: any predicted gain suffices)."""
    monkeypatch.setattr(jtblas.model.repack, "REPACK_MIN_GAIN", -100.0)
    jtblas.selection.clear_cache()
    try:
        a, b = stored(rng, (20, 33), "bfloat16"), stored(rng, (33, 24), "float32")
        jaxpr = jax.make_jaxpr(lambda x, y: jtblas.matmul(x, y, preferred_element_type=jnp.float32))(a, b)
        assert count_equations(jaxpr, "convert_element_type") >= 1  # B converted (and repacked: any gain)
        out = jtblas.matmul(a, b, preferred_element_type=jnp.float32)
        reference = as_used(a, "bfloat16", False) @ as_used(b, "bfloat16", False)
        assert relative_error(out, reference) < 2e-5
    finally:
        jtblas.selection.clear_cache()
