"""jtblas.matmul against a float64 reference: shapes with tails, layouts, dtypes, configs, backends.

On CPU the kernel runs under Triton's interpreter (poisoned NaN outputs, so an unwritten element
fails); the same cases run on a CUDA device under the `gpu` mark.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jtblas
from jtblas import launch
from jtblas.kernels.matmul import matmul_kernel
from jtblas.launch_specs import launch_spec
from tests.reference import DTYPES, kernel_calls, lower_for_cuda, random_operands, relative_error, tolerance

LAYOUTS = list(itertools.product([False, True], repeat=2))
# 1x1x1, primes, sizes that are multiples of no block, K below every block_k, tall-skinny.
SHAPES = [(1, 1, 1), (7, 13, 5), (37, 53, 71), (64, 32, 48), (97, 3, 131), (2, 67, 1)]
SMALL_CONFIGS = [
    jtblas.Config(block_m=32, block_n=32, block_k=32, group_m=1, num_warps=4, num_stages=2),
    jtblas.Config(block_m=16, block_n=64, block_k=16, group_m=8, num_warps=4, num_stages=3),
    jtblas.Config(block_m=64, block_n=16, block_k=64, group_m=2, num_warps=4, num_stages=2),
]

BACKENDS = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=pytest.mark.gpu),
]


def on_backend(backend, *arrays):
    device = jax.devices("gpu" if backend == "cuda" else "cpu")[0]
    return [jax.device_put(x, device) for x in arrays]


def check_product(product, backend, rng, m, n, k, dtype, transpose_a=False, transpose_b=False):
    """jit(product)(a, b) on `backend` for fresh random operands stored as the layout says: C has
    the operands' dtype and [m, n] shape and matches float64 within the dtype's tolerance.
    Returns (C, a, b)."""
    a, b, reference = random_operands(rng, m, n, k, dtype, transpose_a=transpose_a, transpose_b=transpose_b)
    a, b = on_backend(backend, a, b)
    out = jax.jit(product)(a, b)
    assert out.dtype == DTYPES[dtype] and out.shape == (m, n)
    assert relative_error(out, reference) < tolerance(dtype, dtype)
    return out, a, b


def check_config(config, backend, rng, m, n, k, dtype, transpose_a=False, transpose_b=False):
    """`check_product` of `jtblas.matmul` with `config` forced, operands stored as the layout says."""
    return check_product(
        lambda x, y: jtblas.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b, config=config),
        backend, rng, m, n, k, dtype, transpose_a, transpose_b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_matches_float64_reference(backend, dtype, transpose_a, transpose_b, m, n, k, rng):
    config = SMALL_CONFIGS[(m + n + k) % len(SMALL_CONFIGS)]
    check_config(config, backend, rng, m, n, k, dtype, transpose_a, transpose_b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("config", SMALL_CONFIGS, ids=lambda c: c.short())
def test_forced_configs_eager_and_jit_agree(backend, config, rng):
    a, b, reference = random_operands(rng, 75, 91, 83, "float16")
    a, b = on_backend(backend, a, b)
    eager = jtblas.matmul(a, b, config=config)
    jitted = jax.jit(lambda x, y: jtblas.matmul(x, y, config=config))(a, b)
    assert relative_error(eager, reference) < tolerance("float16", "float16")
    np.testing.assert_array_equal(np.asarray(eager), np.asarray(jitted))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_preferred_element_type_float32(backend, dtype, rng):
    a, b, reference = random_operands(rng, 33, 40, 100, dtype)
    a, b = on_backend(backend, a, b)
    out = jtblas.matmul(a, b, preferred_element_type=jnp.float32, config=SMALL_CONFIGS[0])
    assert out.dtype == jnp.float32
    assert relative_error(out, reference) < tolerance(dtype, "float32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_precision_highest_is_full_fp32(backend, rng):
    a, b, reference = random_operands(rng, 40, 24, 300, "float32")
    a, b = on_backend(backend, a, b)
    out = jtblas.matmul(a, b, precision=jax.lax.Precision.HIGHEST, config=SMALL_CONFIGS[0])
    assert relative_error(out, reference) < tolerance("float32", "float32", "ieee")


@pytest.mark.parametrize("backend", BACKENDS)
def test_leading_dims_fold_into_m(backend, rng):
    a, b, reference = random_operands(rng, 5, 19, 23, "float32", batch=(3, 2))
    a, b = on_backend(backend, a, b)
    out = jax.jit(lambda x, y: jtblas.matmul(x, y, config=SMALL_CONFIGS[1]))(a, b)
    assert out.shape == (3, 2, 5, 19)
    assert relative_error(out, reference) < tolerance("float32", "float32")


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_grid_axis_with_broadcast_operand(backend, rng):
    """The kernel's batch axis: A batched (stride M*K), B shared (stride 0)."""
    batch, m, n, k = 3, 21, 34, 40
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a_j, b_j = on_backend(backend, jnp.asarray(a), jnp.asarray(b))
    problem = jtblas.Problem(m=m, n=n, k=k, dtype="float32", out_dtype="float32", input_precision="ieee")
    spec = launch_spec(problem, SMALL_CONFIGS[0], batch=batch, batch_strides=(m * k, 0, m * n))
    out = launch.launch(
        matmul_kernel,
        grid=spec.grid,
        args=[a_j, b_j, *spec.scalars],
        out_shape=jax.ShapeDtypeStruct((batch, m, n), jnp.float32),
        num_warps=spec.num_warps,
        num_stages=spec.num_stages,
        metaparams=spec.metaparams,
    )
    assert relative_error(out, a.astype(np.float64) @ b) < 2e-5


@pytest.mark.parametrize("backend", BACKENDS)
def test_64_bit_index_path(backend, rng):
    """INDEX_64 forced on a small problem: the int64 offset code computes the same product."""
    m, n, k = 45, 29, 70
    a, b, reference = random_operands(rng, m, n, k, "float32", transpose_a=True)
    a, b = on_backend(backend, a, b)
    problem = jtblas.Problem(m=m, n=n, k=k, dtype="float32", out_dtype="float32", transpose_a=True,
                             input_precision="ieee")
    spec = launch_spec(problem, SMALL_CONFIGS[2])
    out = launch.launch(
        matmul_kernel,
        grid=spec.grid,
        args=[a, b, *spec.scalars],
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        num_warps=spec.num_warps,
        num_stages=spec.num_stages,
        metaparams={**spec.metaparams, "INDEX_64": True},
    )
    assert relative_error(out, reference) < 2e-5


def test_index_64_chosen_only_past_int32():
    small = jtblas.Problem(m=46340, n=46340, k=64)
    large = jtblas.Problem(m=65536, n=64, k=32768)  # M*K = 2^31
    assert not launch_spec(small, jtblas.Config()).metaparams["INDEX_64"]
    assert launch_spec(large, jtblas.Config()).metaparams["INDEX_64"]


def test_short_a_rows_are_masked_only_where_a_is_shorter_than_a_tile():
    """SHORT_A_ROWS (A's rows past M zero-filled instead of wrapped; M itself, a compile-time
    constant) is set where M < block_m and A's rows are K-contiguous (NN, NT); a TN/TT A
    (M-contiguous) keeps the wrap, so its loads stay wide, as does any A of at least a tile's rows."""
    config = SMALL_CONFIGS[1]  # block_m 16
    for m, transpose_a, masked in [(1, False, True), (15, False, True), (16, False, False),
                                   (40, False, False), (1, True, False), (7, True, False)]:
        for transpose_b in (False, True):
            problem = jtblas.Problem(m=m, n=64, k=96, transpose_a=transpose_a, transpose_b=transpose_b)
            rows = launch_spec(problem, config).metaparams["SHORT_A_ROWS"]
            assert rows == (m if masked else 0), (m, transpose_a, transpose_b)


@pytest.mark.parametrize("m,k", [(1, 96), (5, 77), (13, 33)])
def test_masked_and_wrapped_short_a_give_the_same_bits(m, k, rng):
    """Under the interpreter, one product of a short A (even and tailed K) masked and wrapped:
    the masked rows load zeros, the wrapped ones other rows' values; neither reaches C."""
    config = SMALL_CONFIGS[1]
    problem = jtblas.Problem(m=m, n=50, k=k)
    a, b, reference = random_operands(rng, m, 50, k, "float32")
    spec = launch_spec(problem, config)
    outputs = []
    for mask in (True, False):
        out = launch.launch(matmul_kernel, grid=spec.grid, args=[a, b, *spec.scalars],
                            out_shape=jax.ShapeDtypeStruct((m, 50), jnp.float32), num_warps=spec.num_warps,
                            num_stages=spec.num_stages,
                            metaparams=dict(spec.metaparams, SHORT_A_ROWS=m if mask else 0))
        outputs.append(np.asarray(out))
    assert relative_error(outputs[0], reference) < tolerance("float32", "float32")
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_empty_dimensions_return_without_a_kernel():
    a = jnp.ones((0, 8), jnp.float32)
    b = jnp.ones((8, 5), jnp.float32)
    assert jtblas.matmul(a, b).shape == (0, 5)
    zero_k = jtblas.matmul(jnp.ones((3, 0), jnp.bfloat16), jnp.ones((0, 4), jnp.bfloat16))
    assert zero_k.shape == (3, 4) and zero_k.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(zero_k, np.float32), 0.0)
    jaxpr = jax.make_jaxpr(lambda x, y: jtblas.matmul(x, y))(jnp.ones((3, 0)), jnp.ones((0, 4)))
    assert "callback" not in str(jaxpr) and "triton" not in str(jaxpr)


def test_kernel_really_runs_in_the_jaxpr():
    """A silent fallback to XLA cannot pass: the interpreted kernel's launch is in the program."""
    def product(x, y):
        return jtblas.matmul(x, y, config=SMALL_CONFIGS[0])

    operands = jnp.ones((8, 8)), jnp.ones((8, 8))
    assert kernel_calls(product, *operands) == 1 and "dot_general" not in str(jax.make_jaxpr(product)(*operands))


@pytest.mark.gpu
def test_cuda_program_holds_the_triton_call():
    a = jnp.ones((256, 256), jnp.bfloat16)
    text = jax.jit(lambda x, y: jtblas.matmul(x, y)).lower(a, a).as_text()
    assert "triton_kernel_call" in text


@pytest.mark.parametrize("m,transpose_a", [(1, False), (16, False), (5, True)])
def test_decode_picks_compile_for_sm90(m, transpose_a):
    """The model's decode picks (16-row tiles: on 2 warps, or swapped on 4 to run wgmma; A's short
    rows masked) compile to PTX for sm_90 through jax-triton's real CUDA lowering, no GPU needed."""
    config = jtblas.select(m, 4096, 4096, dtype="bf16", transpose_a=transpose_a, hardware="h200")
    assert config.block_m == 16 and config.num_warps == (4 if config.swap_ab else 2)
    a = jax.ShapeDtypeStruct((4096, m) if transpose_a else (m, 4096), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)
    text = lower_for_cuda(lambda x, y: jtblas.matmul(x, y, transpose_a=transpose_a, config=config), a, b)
    assert text.count("triton_kernel_call") == (2 if config.k_slices > 1 else 1)  # a split or phases add their sum


@pytest.mark.gpu
def test_64_bit_offsets_on_a_large_operand():
    """M*K > 2^31 elements (4.3 GB of bf16): the int64 offsets reach the far end of A."""
    m, n, k = 33_000, 16, 65_536
    key_a, key_b = jax.random.split(jax.random.key(np.random.SeedSequence().entropy % 2**31))
    a = jax.random.normal(key_a, (m, k), jnp.bfloat16)
    b = jax.random.normal(key_b, (k, n), jnp.bfloat16)
    out = jtblas.matmul(a, b, preferred_element_type=jnp.float32)
    reference = jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
    rows = np.r_[0:64, m - 64:m]  # the start and the far end of A
    error = np.linalg.norm(np.asarray(out[rows] - reference[rows])) / np.linalg.norm(np.asarray(reference[rows]))
    assert error < 1e-4
    del a, b
