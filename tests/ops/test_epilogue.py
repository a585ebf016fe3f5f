"""The fused epilogue of `jtblas.matmul` (bias, activation, residual): every combination against a
float64 reference under Triton's interpreter (NaN-poisoned outputs and partials), in the GEMM
kernel (plain and swapped tiles) and in the split-K / K-phase reduction; gradients against
`jax.grad` of the unfused jnp reference; vmap; bad arguments; the model's terms; the CUDA lowering.
"""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jtblas
from jtblas import hardware, launch_specs, model
from jtblas.config import Config, Problem
from jtblas.kernels.matmul import activated
from jtblas.model import candidates, cost, resources
from tests.ops.test_matmul import BACKENDS, on_backend
from tests.reference import (
    FLOAT64_ACTIVATIONS,
    LAYOUTS,
    assert_value_and_grads_match,
    kernel_calls,
    lower_for_cuda,
    relative_error,
    stored,
    tolerance,
)

H200 = hardware.BUILTIN["h200"]
ACTIVATIONS = [None, *jtblas.ACTIVATIONS]
# The forms of the epilogue: the GEMM kernel's (a plain and a swapped tile), split-K's and
# K phases' reduction kernel (odd N with bf16 operands makes B's rows misaligned, so phases apply).
CONFIGS = {
    "plain": Config(block_m=32, block_n=32, block_k=16, group_m=1, num_warps=4, num_stages=2),
    "swapped": Config(block_m=16, block_n=64, block_k=16, group_m=1, num_warps=4, num_stages=2, swap_ab=True),
    "split_k": Config(block_m=32, block_n=32, block_k=16, group_m=1, num_warps=4, num_stages=2, split_k=3),
    "k_phases": Config(block_m=32, block_n=32, block_k=16, group_m=1, num_warps=4, num_stages=2, k_phases=2),
}


def operands(rng, m, n, k, dtype, transpose_a, transpose_b):
    return stored(rng, (k, m) if transpose_a else (m, k), dtype), stored(rng, (n, k) if transpose_b else (k, n), dtype)


def float64_reference(a, b, *, bias=None, activation=None, residual=None, transpose_a=False, transpose_b=False):
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    out = (a64.T if transpose_a else a64) @ (b64.T if transpose_b else b64)
    if bias is not None:
        out = out + np.asarray(bias, np.float64)
    out = FLOAT64_ACTIVATIONS[activation](out)
    if residual is not None:
        out = out + np.asarray(residual, np.float64)
    return out


def fused(a, b, config=None, **options):
    return jax.jit(lambda x, y, bias, residual: jtblas.matmul(x, y, bias=bias, residual=residual, config=config,
                                                              **options))


@pytest.mark.parametrize("form", list(CONFIGS))
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_every_activation_in_every_kernel_form(form, activation, rng):
    """Bias and residual in other dtypes than the operands'; the layout turns with the case."""
    m, n, k = 37, 53, 70
    layout = LAYOUTS[(ACTIVATIONS.index(activation) + list(CONFIGS).index(form)) % 4]
    a, b = operands(rng, m, n, k, "bfloat16", *layout)
    bias, residual = stored(rng, (n,), "float32"), stored(rng, (m, n), "bfloat16")
    out = fused(a, b, CONFIGS[form], activation=activation, transpose_a=layout[0], transpose_b=layout[1])(
        a, b, bias, residual)
    assert out.dtype == jnp.bfloat16 and out.shape == (m, n)
    reference = float64_reference(a, b, bias=bias, activation=activation, residual=residual,
                                  transpose_a=layout[0], transpose_b=layout[1])
    assert relative_error(out, reference) < tolerance("bfloat16", "bfloat16"), (form, layout)


@pytest.mark.parametrize("with_bias,with_residual", [(True, False), (False, True), (False, False)])
@pytest.mark.parametrize("form", ["plain", "split_k"])
def test_bias_or_residual_alone(with_bias, with_residual, form, rng):
    """Each part alone, fp32 operands at HIGHEST with an fp32 output (tight tolerance), fp16 and
    bf16 epilogue arrays; (False, False) with gelu is the activation alone."""
    m, n, k = 29, 40, 50
    a, b = operands(rng, m, n, k, "float32", False, True)
    bias = stored(rng, (n,), "float16") if with_bias else None
    residual = stored(rng, (m, n), "bfloat16") if with_residual else None
    activation = None if with_bias or with_residual else "gelu"
    out = jtblas.matmul(a, b, bias=bias, residual=residual, activation=activation, transpose_b=True,
                        precision=jax.lax.Precision.HIGHEST, config=CONFIGS[form])
    reference = float64_reference(a, b, bias=bias, activation=activation, residual=residual, transpose_b=True)
    assert relative_error(out, reference) < tolerance("float32", "float32", "ieee")


@pytest.mark.parametrize("deterministic", [True, False])
def test_model_pick_atomic_split_and_fp32_output(deterministic, rng):
    """The model's own config (a deep K splits), and an atomic split whose fp32 sum is not C until
    the reduction applies the epilogue."""
    m, n, k = 8, 48, 1024
    a, b = operands(rng, m, n, k, "float16", False, False)
    bias, residual = stored(rng, (n,), "float16"), stored(rng, (m, n), "float32")
    for config in (None, Config(block_m=16, block_n=16, block_k=64, group_m=1, num_warps=4, num_stages=2,
                                split_k=4)):
        out = jtblas.matmul(a, b, bias=bias, residual=residual, activation="silu", config=config,
                            preferred_element_type=jnp.float32, deterministic=deterministic)
        reference = float64_reference(a, b, bias=bias, activation="silu", residual=residual)
        assert out.dtype == jnp.float32
        assert relative_error(out, reference) < tolerance("float16", "float32")


def test_leading_dims_and_residual_shapes(rng):
    """a [2, 3, M, K]: the residual as the result's shape or folded to [M', N]; one launch."""
    a = stored(rng, (2, 3, 5, 24), "float32")
    b = stored(rng, (24, 20), "float32")
    bias, residual = stored(rng, (20,), "float32"), stored(rng, (2, 3, 5, 20), "float32")
    reference = float64_reference(a.reshape(30, 24), b, bias=bias, activation="relu",
                                  residual=residual.reshape(30, 20)).reshape(2, 3, 5, 20)
    for r in (residual, residual.reshape(30, 20)):
        out = jtblas.matmul(a, b, bias=bias, residual=r, activation="relu", config=CONFIGS["plain"],
                            precision="highest")
        assert out.shape == (2, 3, 5, 20)
        assert relative_error(out, reference) < tolerance("float32", "float32", "ieee")
    launches = kernel_calls(lambda x, y, z, w: jtblas.matmul(x, y, bias=z, residual=w, config=CONFIGS["plain"]),
                            a, b, bias, residual)
    assert launches == 1


def test_vmap_batches_operands_bias_and_residual(rng):
    """vmap over a, the bias and the residual (b shared): one batched launch; and over the bias
    alone (a broadcast operand)."""
    batch, m, n, k = 3, 11, 21, 30
    a = stored(rng, (batch, m, k), "float32")
    b = stored(rng, (k, n), "float32")
    bias, residual = stored(rng, (batch, n), "bfloat16"), stored(rng, (batch, m, n), "float32")

    def product(x, z, w):
        return jtblas.matmul(x, b, bias=z, residual=w, activation="gelu_tanh", config=CONFIGS["plain"],
                             precision="highest")

    out = jax.jit(jax.vmap(product))(a, bias, residual)
    for i in range(batch):
        reference = float64_reference(a[i], b, bias=bias[i], activation="gelu_tanh", residual=residual[i])
        assert relative_error(out[i], reference) < tolerance("float32", "float32", "ieee"), i
    assert kernel_calls(jax.vmap(product), a, bias, residual) == 1
    only_bias = jax.vmap(product, in_axes=(None, 0, None))(a[0], bias, residual[0])
    for i in range(batch):
        reference = float64_reference(a[0], b, bias=bias[i], activation="gelu_tanh", residual=residual[0])
        assert relative_error(only_bias[i], reference) < tolerance("float32", "float32", "ieee"), i


def unfused_reference(a, b, bias, residual, activation, transpose_a=False, transpose_b=False):
    """The epilogue in jnp around XLA's dot, fp32 throughout."""
    x = a.astype(jnp.float32).T if transpose_a else a.astype(jnp.float32)
    y = b.astype(jnp.float32).T if transpose_b else b.astype(jnp.float32)
    out = jnp.dot(x, y, precision=jax.lax.Precision.HIGHEST) + bias.astype(jnp.float32)
    if activation:
        out = {"relu": jax.nn.relu, "silu": jax.nn.silu, "gelu": lambda v: jax.nn.gelu(v, approximate=False),
               "gelu_tanh": lambda v: jax.nn.gelu(v, approximate=True)}[activation](out)
    return out + residual.astype(jnp.float32)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gradients_match_jax_grad_of_the_unfused_reference(activation, jit, rng):
    """d/d(a, b, bias, residual) of sum(out · R), each in its input's dtype."""
    m, n, k = 13, 24, 20
    layout = LAYOUTS[ACTIVATIONS.index(activation) % 4]
    a, b = operands(rng, m, n, k, "float32", *layout)
    bias, residual = stored(rng, (n,), "bfloat16"), stored(rng, (m, n), "float16")
    r = jnp.asarray(rng.standard_normal((m, n)), jnp.float32)

    def loss(x, y, z, w):
        out = jtblas.matmul(x, y, bias=z, residual=w, activation=activation, transpose_a=layout[0],
                            transpose_b=layout[1], precision=jax.lax.Precision.HIGHEST)
        return jnp.sum(out * r)

    def reference_loss(x, y, z, w):
        return jnp.sum(unfused_reference(x, y, z, w, activation, *layout) * r)

    grad = jax.grad(loss, argnums=(0, 1, 2, 3))
    grads = (jax.jit(grad) if jit else grad)(a, b, bias, residual)
    expected = jax.grad(reference_loss, argnums=(0, 1, 2, 3))(a, b, bias, residual)
    for name, got, want, x in zip(("a", "b", "bias", "residual"), grads, expected, (a, b, bias, residual)):
        assert got.dtype == x.dtype and got.shape == x.shape, name
        scale = {"bfloat16": 8e-3, "float16": 1.5e-3}.get(jnp.dtype(x.dtype).name, 1e-4)
        assert relative_error(got, np.asarray(want, np.float64)) < scale, name


def test_gradient_with_an_activation_saves_the_pre_activation(rng):
    """A differentiated product with an activation runs three GEMMs (forward, dx, dw): the
    backward pass reads the saved pre-activation instead of recomputing it."""
    a, b = stored(rng, (9, 16), "bfloat16"), stored(rng, (16, 24), "bfloat16")
    bias = stored(rng, (24,), "float32")

    def loss(x, y, z):
        return jnp.sum(jtblas.matmul(x, y, bias=z, activation="silu").astype(jnp.float32))

    assert kernel_calls(jax.grad(loss, argnums=(0, 1, 2)), a, b, bias) == 3
    assert kernel_calls(lambda x, y, z: jax.vjp(loss, x, y, z)[0], a, b, bias) == 1


def test_gradient_of_bf16_training_layer_with_vmap(rng):
    """grad through vmap of a bf16 layer with a bias and gelu: the backward products are jtblas's."""
    a = stored(rng, (2, 9, 16), "bfloat16")
    b = stored(rng, (16, 24), "bfloat16")
    bias = stored(rng, (24,), "float32")

    def loss(x, y, z):
        out = jax.vmap(lambda row: jtblas.matmul(row, y, bias=z, activation="gelu"))(x)
        return jnp.sum(out.astype(jnp.float32) ** 2)

    def reference(x, y, z):
        out = jax.nn.gelu(jnp.einsum("bmk,kn->bmn", x.astype(jnp.float32), y.astype(jnp.float32),
                                     precision="highest") + z, approximate=False)
        return jnp.sum(out ** 2)

    got = jax.grad(loss, argnums=(0, 1, 2))(a, b, bias)
    want = jax.grad(reference, argnums=(0, 1, 2))(a, b, bias)
    for g, w, x in zip(got, want, (a, b, bias)):
        assert g.dtype == x.dtype
        assert relative_error(g, np.asarray(w, np.float64)) < 3e-2


@pytest.mark.parametrize("kwargs,error,words", [
    (dict(bias=np.zeros(7, np.float32)), ValueError, "bias must have shape (N,) = (5,)"),
    (dict(bias=np.zeros((1, 5), np.float32)), ValueError, "bias.shape=(1, 5)"),
    (dict(residual=np.zeros((4, 5), np.float32)), ValueError, "residual.shape=(4, 5)"),
    (dict(residual=np.zeros(5, np.float32)), ValueError, "residual must have the result's shape (3, 5)"),
    (dict(activation="tanh"), ValueError, "activation must be None or one of"),
    (dict(activation=jax.nn.relu), ValueError, "activation must be None or one of"),
    (dict(bias=np.zeros(5, np.int32)), TypeError, "bias.dtype=int32"),
    (dict(residual=np.zeros((3, 5), np.complex64)), TypeError, "residual.dtype=complex64"),
    (dict(bias=np.zeros(5, np.float64)), TypeError, "bias.dtype=float64"),
    (dict(bias=[0.0] * 5), TypeError, "bias must be a jax.Array"),
])
def test_bad_epilogue_arguments_name_the_argument_and_values(kwargs, error, words):
    a, b = jnp.ones((3, 4), jnp.float32), jnp.ones((4, 5), jnp.float32)
    with pytest.raises(error) as raised:
        jtblas.matmul(a, b, **kwargs)
    assert words in str(raised.value)


def test_a_wrong_residual_is_told_the_shapes_it_may_have():
    """Unbatched, one shape; with leading dimensions folded into M, the result's and the folded one."""
    b = jnp.ones((4, 5), jnp.float32)
    with pytest.raises(ValueError) as raised:
        jtblas.matmul(jnp.ones((3, 4), jnp.float32), b, residual=jnp.ones((3, 4), jnp.float32))
    assert "shape (3, 5), got" in str(raised.value) and "(or" not in str(raised.value)
    with pytest.raises(ValueError) as raised:
        jtblas.matmul(jnp.ones((2, 3, 4), jnp.float32), b, residual=jnp.ones((3, 5), jnp.float32))
    assert "shape (2, 3, 5) (or (6, 5)), got residual.shape=(3, 5)" in str(raised.value)


def test_empty_product_applies_the_epilogue_to_zeros():
    bias = jnp.asarray([-1.0, 2.0], jnp.float32)
    residual = jnp.ones((3, 2), jnp.float32)
    out = jtblas.matmul(jnp.ones((3, 0)), jnp.ones((0, 2)), bias=bias, activation="relu", residual=residual)
    np.testing.assert_array_equal(np.asarray(out), [[1.0, 3.0]] * 3)


def test_model_knows_the_epilogue_costs():
    """The epilogue's reads are in the predicted bytes; the TMA kernel is offered with one too;
    the plain problem's candidates and pick are untouched."""
    plain = Problem(m=4096, n=4096, k=4096)
    epilogue = Problem(m=4096, n=4096, k=4096, bias_dtype="float32", activation="gelu", residual_dtype="bfloat16")
    config = Config(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=4)
    base, extra = cost.estimate(config, plain, H200), cost.estimate(config, epilogue, H200)
    assert extra.dram_bytes - base.dram_bytes == pytest.approx(4096 * 4096 * 2 + 4096 * 4)
    assert extra.epilogue > base.epilogue and extra.predicted_seconds > base.predicted_seconds
    assert H200.tma and any(c.tma for c in candidates.candidates_for_problem(plain, H200))
    assert any(c.tma for c in candidates.candidates_for_problem(epilogue, H200))
    assert "+bias(float32) gelu +residual(bfloat16)" in epilogue.short()
    split = Config(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=3, split_k=4)
    small_plain, small_epilogue = (Problem(m=64, n=256, k=8192, **fields) for fields in
                                   ({}, dict(bias_dtype="float32", residual_dtype="float32")))
    assert cost.estimate(split, small_epilogue, H200).reduction > cost.estimate(split, small_plain, H200).reduction
    assert model.select_for_problem(plain, H200) == jtblas.select(4096, 4096, 4096, hardware="h200")


def test_an_fp32_residual_keeps_the_fused_tile_within_registers():
    problem = Problem(m=4096, n=4096, k=4096, dtype="float32", out_dtype="float32", residual_dtype="float32")
    for config in candidates.candidates_for_problem(problem, H200):
        if config.k_slices == 1:
            assert resources.epilogue_registers_per_thread(config, problem) <= H200.max_regs_per_thread


@pytest.mark.parametrize("activation", [*jtblas.ACTIVATIONS])
def test_epilogue_kernels_compile_for_sm90(activation):
    """The fused GEMM kernel and the split-K reduction with every activation (erf, sigmoid) compile
    to PTX for sm_90 through jax-triton's CUDA lowering, no GPU needed."""
    a = jax.ShapeDtypeStruct((64, 512), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((512, 256), jnp.bfloat16)
    bias = jax.ShapeDtypeStruct((256,), jnp.float32)
    residual = jax.ShapeDtypeStruct((64, 256), jnp.bfloat16)
    for config in (Config(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=3),
                   Config(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=3, split_k=2)):
        text = lower_for_cuda(lambda x, y, z, w, config=config: jtblas.matmul(
            x, y, bias=z, residual=w, activation=activation, config=config), a, b, bias, residual)
        assert text.count("triton_kernel_call") == config.k_slices


@pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 CPU devices (tests/conftest.py forces them)")
@pytest.mark.parametrize("specs", [
    (P("x"), P(), P(), P("x")),              # data parallel: rows of x and of the residual
    (P(), P(None, "x"), P("x"), P(None, "x")),  # columns: w, the bias and the residual by N
    (P(None, "x"), P("x"), P(), P()),        # rows of w (K-sharded): epilogue after the sum
], ids=["data_parallel", "columns", "k_sharded"])
def test_sharded_jit_applies_the_epilogue_once(specs, rng):
    """Under jit with sharded operands the product is partitioned and the epilogue applied after
    it (once, after the cross-device sum of a K-sharded product); values and gradients."""
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    x, w = stored(rng, (16, 8), "float32"), stored(rng, (8, 12), "float32")
    bias, residual = stored(rng, (12,), "float32"), stored(rng, (16, 12), "float32")
    args = [jax.device_put(v, NamedSharding(mesh, spec)) for v, spec in zip((x, w, bias, residual), specs)]

    def loss(x, w, bias, residual):
        out = jtblas.matmul(x, w, bias=bias, residual=residual, activation="silu", precision="highest")
        return jnp.sum(out ** 2)

    def reference(x, w, bias, residual):
        return jnp.sum(unfused_reference(x, w, bias, residual, "silu") ** 2)

    assert_value_and_grads_match(loss, reference, args, (x, w, bias, residual))


@pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 CPU devices (tests/conftest.py forces them)")
def test_shard_map_body_runs_the_fused_kernel(rng):
    """Inside shard_map the body's product is the fused launch (one kernel call)."""
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    x, w = stored(rng, (16, 8), "float32"), stored(rng, (8, 12), "float32")
    bias = stored(rng, (12,), "float32")
    body = jax.shard_map(lambda a, b, c: jtblas.matmul(a, b, bias=c, activation="relu", precision="highest"),
                         mesh=mesh, in_specs=(P("x"), P(), P()), out_specs=P("x"))
    out = jax.jit(body)(x, w, bias)
    assert relative_error(out, float64_reference(x, w, bias=bias, activation="relu")) < 2e-5
    assert kernel_calls(body, x, w, bias) == 1


@pytest.mark.parametrize("transpose_a,transpose_b", [(True, False), (False, True)], ids=["TN", "NT"])
def test_repacked_product_pads_bias_and_residual_with_c(transpose_a, transpose_b, rng):
    """Repacking that pads M (a copied A stored [K, M]) or N (a copied B [K, N]) computes a padded C:
    the bias and residual are padded with it, and C sliced back."""
    m, n, k = 37, 45, 50
    a, b = operands(rng, m, n, k, "float32", transpose_a, transpose_b)
    bias, residual = stored(rng, (n,), "float32"), stored(rng, (m, n), "float32")
    with jtblas.ops.repack_mode("always"):
        out = jtblas.matmul(a, b, bias=bias, residual=residual, activation="relu", transpose_a=transpose_a,
                            transpose_b=transpose_b, precision="highest", config=CONFIGS["plain"])
    reference = float64_reference(a, b, bias=bias, activation="relu", residual=residual, transpose_a=transpose_a,
                                  transpose_b=transpose_b)
    assert relative_error(out, reference) < tolerance("float32", "float32", "ieee")


def test_batch_past_the_grid_limit_is_launched_in_chunks(monkeypatch, rng):
    monkeypatch.setattr(launch_specs, "MAX_GRID_YZ", 2)
    batch, m, n, k = 5, 6, 16, 12
    a, b = stored(rng, (batch, k, m), "float32"), stored(rng, (batch, k, n), "float32")
    bias, residual = stored(rng, (batch, n), "float32"), stored(rng, (batch, m, n), "float32")
    out = jax.vmap(lambda x, y, z, w: jtblas.matmul(x, y, bias=z, residual=w, activation="gelu", transpose_a=True,
                                                    precision="highest", config=CONFIGS["plain"]))(a, b, bias, residual)
    for i in range(batch):
        reference = float64_reference(a[i], b[i], bias=bias[i], activation="gelu", residual=residual[i],
                                      transpose_a=True)
        assert relative_error(out[i], reference) < tolerance("float32", "float32", "ieee"), i


def test_select_and_explain_take_the_epilogue_and_b_dtype(capsys):
    """`jtblas.select` / `explain` and `jtblas explain` see the epilogue and B's dtype; their
    predictions include them; bad values are refused with the value."""
    from jtblas import cli

    plain = jtblas.explain(4096, 14336, 4096, hardware="h200")
    fused = jtblas.explain(4096, 14336, 4096, hardware="h200", b_dtype="fp32", bias_dtype="float32",
                           activation="gelu_tanh", residual_dtype="bf16")
    assert fused.problem == Problem(m=4096, n=14336, k=4096, b_dtype="float32", bias_dtype="float32",
                                    activation="gelu_tanh", residual_dtype="bfloat16")
    assert fused.ranked[0].predicted_seconds > plain.ranked[0].predicted_seconds
    assert fused.ranked[0].config == jtblas.select(4096, 14336, 4096, hardware="h200", b_dtype="fp32",
                                                   bias_dtype="float32", activation="gelu_tanh",
                                                   residual_dtype="bf16")
    with pytest.raises(ValueError, match="activation must be None or one of"):
        jtblas.select(64, 64, 64, hardware="h200", activation="tanh")
    with pytest.raises(TypeError, match="float64"):
        jtblas.select(64, 64, 64, hardware="h200", bias_dtype="float64")
    assert cli.main(["explain", "4096", "14336", "4096", "--gpu", "h200", "--top", "1", "--b-dtype", "fp32",
                     "--bias", "--activation", "gelu", "--residual", "fp32"]) == 0
    assert capsys.readouterr().out.startswith(
        "4096x14336x4096 bfloat16 NN b=float32 +bias(bfloat16) gelu +residual(float32) on h200")
    with pytest.raises(SystemExit):
        cli.main(["explain", "64", "64", "64", "--gpu", "h200", "--activation", "tanh"])
    assert "invalid choice: 'tanh'" in capsys.readouterr().err


# TMA configs forced (the model's choice aside), one storing C in halves.
TMA_CONFIGS = [
    Config(block_m=64, block_n=32, block_k=32, group_m=2, num_warps=4, num_stages=3, tma=True),
    Config(block_m=64, block_n=256, block_k=16, group_m=1, num_warps=4, num_stages=3, tma=True),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_tma_kernel_applies_the_epilogue(backend, activation, rng):
    """The TMA kernel's epilogue (`matmul_tma_epilogue_kernel`): a bias and a residual in other
    dtypes than the operands', each layout and config in turn, tails in every dimension (rows
    16-byte aligned, as TMA needs); an fp32 C with a bias alone; a batch with a bias and a
    residual per entry."""
    m, n, k = 136, 200, 88
    index = ACTIVATIONS.index(activation)
    layout, config = LAYOUTS[index % 4], TMA_CONFIGS[index % 2]
    a, b = operands(rng, m, n, k, "bfloat16", *layout)
    bias, residual = stored(rng, (n,), "float32"), stored(rng, (m, n), "bfloat16")
    a, b, bias, residual = on_backend(backend, a, b, bias, residual)
    out = fused(a, b, config, activation=activation, transpose_a=layout[0], transpose_b=layout[1])(
        a, b, bias, residual)
    assert out.dtype == jnp.bfloat16 and out.shape == (m, n)
    reference = float64_reference(a, b, bias=bias, activation=activation, residual=residual,
                                  transpose_a=layout[0], transpose_b=layout[1])
    assert relative_error(out, reference) < tolerance("bfloat16", "bfloat16"), layout
    wide = jtblas.matmul(a, b, bias=bias, activation=activation, transpose_a=layout[0], transpose_b=layout[1],
                         preferred_element_type=jnp.float32, config=config)
    assert wide.dtype == jnp.float32
    reference = float64_reference(a, b, bias=bias, activation=activation, transpose_a=layout[0],
                                  transpose_b=layout[1])
    assert relative_error(wide, reference) < tolerance("bfloat16", "float32"), layout
    if index % 4 == 0:
        bs = jnp.stack([b, -b, 2 * b])
        biases, residuals = jnp.stack([bias, 2 * bias, -bias]), jnp.stack([residual, -residual, residual])
        batched = jax.jit(jax.vmap(lambda y, z, w: jtblas.matmul(a, y, bias=z, residual=w, activation=activation,
                                                                  config=config)))(bs, biases, residuals)
        for i in range(3):
            reference = float64_reference(a, bs[i], bias=biases[i], activation=activation, residual=residuals[i])
            assert relative_error(batched[i], reference) < tolerance("bfloat16", "bfloat16"), i


def test_the_model_offers_the_tma_epilogue_with_its_scratch_and_a_gated_product_none():
    """The model offers the TMA kernel with a bias, an activation and a residual, each twin's
    occupancy counting the epilogue's conversion scratch (`resources.shared_memory_bytes`); a gated
    product cannot run on it even forced."""
    for problem in (Problem(m=4096, n=4096, k=4096, bias_dtype="float32", activation="gelu"),
                    Problem(m=4096, n=4096, k=4096, bias_dtype="bfloat16", residual_dtype="bfloat16")):
        twins = [c for c in candidates.candidates_for_problem(problem, H200) if c.tma]
        assert twins, problem.short()
        for config in twins:
            assert resources.shared_memory_bytes(config, problem) <= H200.smem_per_block, config
            assert resources.programs_per_sm(config, problem, H200) >= 1, config
        bare = {c for c in candidates.candidates_for_problem(Problem(m=4096, n=4096, k=4096), H200) if c.tma}
        assert set(twins) <= bare
        if problem.residual_dtype:  # its scratch (64 KB for a 128x128 tile) leaves some twins out
            assert len(twins) < len(bare)
        found = candidates.candidate_arrays(problem, H200)
        terms = cost.estimate_arrays(found, problem, H200, H200.model_constants())
        for estimate in cost.estimates_of(found, terms):
            if estimate.config.tma:
                assert estimate.programs_per_sm == resources.programs_per_sm(estimate.config, problem, H200)
    twin = Config(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, tma=True)
    gated = Problem(m=256, n=512, k=256, gated=True, activation="silu")
    assert any("gated" in e for e in resources.tma_errors(twin, gated, H200))
    with pytest.raises(ValueError, match="gated product"):
        launch_specs.launch_spec(gated, twin, hw=H200)


@triton.jit
def _activation_kernel(x_ptr, y_ptr, ACTIVATION: tl.constexpr):
    offsets = tl.program_id(0) * 128 + tl.arange(0, 128)
    tl.store(y_ptr + offsets, activated(tl.load(x_ptr + offsets), ACTIVATION))


# Instruction costs of `cost.ACTIVATION_FLOPS`: 2 an FMA-pipe instruction, 8 an ex2, 12 a division.
PTX_FLOPS = {"add": 2, "sub": 2, "mul": 2, "fma": 2, "max": 2, "min": 2, "neg": 2, "abs": 2, "ex2": 8, "div": 12}


@pytest.mark.parametrize("activation", [*jtblas.ACTIVATIONS])
def test_activation_flops_are_the_compiled_instruction_mix(activation):
    """`cost.ACTIVATION_FLOPS` counts the fp32 instructions `activated` compiles to for sm_90 (to
    one FMA-pipe instruction: Triton 3.9 folds silu's negation into a multiply, 3.6 does not), and
    none of them branches (libdevice's erff did, per element)."""
    from tests.reference import compile_for_sm90

    ptx = compile_for_sm90(_activation_kernel, {"ACTIVATION": activation}, num_warps=4, num_stages=1,
                           pointer_type="*fp32").asm["ptx"]
    opcodes = [line.split()[0].split(".")[0] for line in ptx.splitlines()
               if line.strip() and ".f32" in line.split()[0]]
    assert not [line for line in ptx.splitlines() if line.strip().startswith("bra")], activation
    counted = sum(PTX_FLOPS[op] for op in opcodes if op in PTX_FLOPS)
    assert abs(counted - cost.ACTIVATION_FLOPS[activation]) <= PTX_FLOPS["fma"], opcodes


@pytest.mark.parametrize("activation", [*jtblas.ACTIVATIONS])
def test_activations_match_float64_over_the_whole_range(activation):
    """`activated` under the interpreter on fp32 x from -12 to 12 (the exact GELU's erf clamps at
    ±4 and is a rational approximation inside): within 2e-6 of the float64 activation, absolutely."""
    from jtblas.interpreter import launch_interpreted
    from tests.reference import FLOAT64_ACTIVATIONS

    x = np.linspace(-12.0, 12.0, 128 * 64, dtype=np.float32)
    (y,) = launch_interpreted(_activation_kernel, (64,), [jnp.asarray(x)],
                              [jax.ShapeDtypeStruct(x.shape, jnp.float32)], {"ACTIVATION": activation})
    reference = FLOAT64_ACTIVATIONS[activation](x.astype(np.float64))
    assert np.max(np.abs(np.asarray(y, np.float64) - reference)) < 2e-6


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_tma_epilogue_kernel_compiles_for_sm90(activation):
    """The TMA kernel with a bias, an activation and a residual compiles for sm_90: its loads
    through TMA, its MMA wgmma, the same three descriptors' scratch as without an epilogue, and no
    more shared memory than the model counts (the epilogue's conversion scratch included)."""
    from jtblas.kernels.matmul_tma import GLOBAL_SCRATCH_BYTES, matmul_tma_epilogue_kernel
    from tests.reference import compile_for_sm90

    index = ACTIVATIONS.index(activation)
    config = [Config(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, tma=True),
              Config(block_m=64, block_n=256, block_k=64, num_warps=4, num_stages=3, tma=True),
              Config(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=4, tma=True)][index % 3]
    residual = ["bfloat16", "float32"][index % 2]
    meta = dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=8,
                INPUT_PRECISION="tf32", TRANSPOSE_A=False, TRANSPOSE_B=False,
                STORE_HALVES=resources.store_halves(config), INDEX_64=False, HAS_BIAS=True,
                ACTIVATION=activation or "", HAS_RESIDUAL=True)
    compiled = compile_for_sm90(matmul_tma_epilogue_kernel, meta, num_warps=config.num_warps,
                                num_stages=config.num_stages,
                                pointer_types={"bias_ptr": "*fp32",
                                               "residual_ptr": "*bf16" if residual == "bfloat16" else "*fp32"})
    ttgir = compiled.asm["ttgir"]
    assert ttgir.count("async_tma_copy_global_to_local") >= 2 and "warp_group_dot" in ttgir
    assert compiled.metadata.global_scratch_size == GLOBAL_SCRATCH_BYTES
    problem = Problem(m=4096, n=4096, k=4096, bias_dtype="float32", residual_dtype=residual,
                      activation=activation or "")
    assert compiled.metadata.shared <= resources.shared_memory_bytes(config, problem) + 64, config.short()


def test_bad_problems_and_a_tma_cast_are_refused():
    with pytest.raises(ValueError, match="Problem.activation must be '' \\(none\\) or one of"):
        Problem(m=1, n=1, k=1, activation="tanh")
    with pytest.raises(ValueError, match="Problem.b_dtype"):
        Problem(m=1, n=1, k=1, b_dtype="bfloat16")  # the compute dtype itself: stored as ""
    a, b = jnp.ones((64, 64), jnp.bfloat16), jnp.ones((64, 64), jnp.float32)
    config = Config(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=3, tma=True)
    with pytest.raises(ValueError, match="TMA kernel.*convert"):
        jtblas.matmul(a, b, bias=jnp.ones(64, jnp.float32), preferred_element_type=jnp.bfloat16, config=config)
