"""The gated product, `jtblas.matmul(..., gated=True)` (a gated linear unit in one launch): every
layout, dtype and activation against a float64 reference under Triton's interpreter (outputs
NaN-poisoned), tails of the paired column blocks, bias and residual, leading dimensions; gradients
against `jax.grad` of the unfused jnp reference; vmap; sharded jit; bad arguments; the model's
search space; the CUDA lowering; `jtblas.nn.GatedDense`.
"""

import dataclasses

import flax.linen
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jtblas
from jtblas import hardware, model
from jtblas.config import Config, Problem
from jtblas.epilogue import epilogue_reference
from tests.reference import (
    FLOAT64_ACTIVATIONS,
    LAYOUT_IDS,
    LAYOUTS,
    assert_value_and_grads_match,
    kernel_calls,
    lower_for_cuda,
    relative_error,
    stored,
    tolerance,
)

H200 = hardware.BUILTIN["h200"]
# Forced tiles: a wide one whose halves (16 columns) leave a tail at F = 40, and a narrow one.
TILES = [Config(block_m=16, block_n=32, block_k=16, group_m=1, num_warps=4, num_stages=2),
         Config(block_m=32, block_n=16, block_k=32, group_m=2, num_warps=4, num_stages=2)]


def operands(rng, m, features, k, dtype, transpose_a=False, transpose_b=False):
    """A [M, K] and B [K, 2·features] (the gate's columns, then the up projection's), stored as the
    layout says."""
    n = 2 * features
    return stored(rng, (k, m) if transpose_a else (m, k), dtype), stored(rng, (n, k) if transpose_b else (k, n), dtype)


def float64_reference(a, b, *, bias=None, activation=None, residual=None, transpose_a=False, transpose_b=False):
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    pre = (a64.T if transpose_a else a64) @ (b64.T if transpose_b else b64)
    if bias is not None:
        pre = pre + np.asarray(bias, np.float64)
    gate, up = np.split(pre, 2, axis=-1)
    out = FLOAT64_ACTIVATIONS[activation](gate) * up
    if residual is not None:
        out = out + np.asarray(residual, np.float64)
    return out


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("activation", [None, *jtblas.ACTIVATIONS])
def test_every_activation_and_layout(activation, layout, rng):
    """bf16 operands, an fp32 bias and a bf16 residual, the model's config and a forced tile whose
    column halves leave a tail (F = 40 with 16-column halves)."""
    m, features, k = 37, 40, 70
    a, b = operands(rng, m, features, k, "bfloat16", *layout)
    bias, residual = stored(rng, (2 * features,), "float32"), stored(rng, (m, features), "bfloat16")
    reference = float64_reference(a, b, bias=bias, activation=activation, residual=residual,
                                  transpose_a=layout[0], transpose_b=layout[1])
    for config in (None, TILES[(LAYOUTS.index(layout) + 1) % 2]):
        out = jax.jit(lambda x, y, z, w, config=config: jtblas.matmul(
            x, y, bias=z, residual=w, activation=activation, gated=True, transpose_a=layout[0],
            transpose_b=layout[1], config=config))(a, b, bias, residual)
        assert out.dtype == jnp.bfloat16 and out.shape == (m, features)
        assert relative_error(out, reference) < tolerance("bfloat16", "bfloat16"), config


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_other_dtypes_alone_and_fp32_output(dtype, rng):
    """fp32 at HIGHEST and fp16 with an fp32 output (tight tolerances); no bias, no residual; M = 1."""
    for m in (1, 19):
        a, b = operands(rng, m, 24, 33, dtype)
        precision = jax.lax.Precision.HIGHEST if dtype == "float32" else None
        out = jtblas.matmul(a, b, activation="silu", gated=True, precision=precision,
                            preferred_element_type=jnp.float32)
        assert out.dtype == jnp.float32 and out.shape == (m, 24)
        reference = float64_reference(a, b, activation="silu")
        assert relative_error(out, reference) < tolerance(dtype, "float32", "ieee"), m


def test_leading_dims_and_a_float32_weight(rng):
    """a [2, 3, 5, K] folds into M; the residual in either shape; an fp32 B read as stored by a
    bf16 product."""
    a = stored(rng, (2, 3, 5, 24), "bfloat16")
    b = stored(rng, (24, 20), "float32")
    residual = stored(rng, (2, 3, 5, 10), "float32")
    reference = float64_reference(np.asarray(a, np.float64).reshape(30, 24),
                                  np.asarray(b.astype(jnp.bfloat16), np.float64), activation="gelu",
                                  residual=residual.reshape(30, 10)).reshape(2, 3, 5, 10)
    for r in (residual, residual.reshape(30, 10)):
        out = jtblas.matmul(a, b, activation="gelu", residual=r, gated=True)
        assert out.shape == (2, 3, 5, 10) and out.dtype == jnp.bfloat16
        assert relative_error(out, reference) < tolerance("bfloat16", "bfloat16")
    assert kernel_calls(lambda x, y: jtblas.matmul(x, y, gated=True), a, b) == 1


def unfused_reference(x, w, bias, residual, activation):
    pre = jnp.dot(x, w, precision=jax.lax.Precision.HIGHEST)
    return epilogue_reference(pre, bias=bias, activation=activation, residual=residual, gated=True)


@pytest.mark.parametrize("activation", ["silu", None])
def test_gradients_match_the_unfused_reference(activation, rng):
    """The differentiated forward pass saves the [M, 2F] pre-activation (three GEMMs in all) and
    every cotangent matches `jax.grad` of the jnp reference."""
    x, w = stored(rng, (2, 7, 16), "float32"), stored(rng, (16, 24), "float32")
    bias, residual = stored(rng, (24,), "float32"), stored(rng, (2, 7, 12), "float32")

    def loss(fn):
        return lambda *args: jnp.sum(fn(*args) ** 2)

    def ours(x, w, bias, residual):
        return jtblas.matmul(x, w, bias=bias, residual=residual, activation=activation, gated=True,
                             precision="highest")

    got = jax.grad(loss(ours), argnums=(0, 1, 2, 3))(x, w, bias, residual)
    want = jax.grad(loss(lambda *a: unfused_reference(*a, activation)), argnums=(0, 1, 2, 3))(x, w, bias, residual)
    for g, v in zip(got, want):
        assert g.shape == v.shape and relative_error(g, np.asarray(v, np.float64)) < 1e-5
    assert kernel_calls(jax.grad(loss(ours), argnums=(0, 1)), x, w, bias, residual) == 3


def test_vmap_is_one_launch(rng):
    a, b = stored(rng, (3, 9, 16), "float32"), stored(rng, (3, 16, 20), "float32")
    bias = stored(rng, (3, 20), "float32")

    def product(x, y, z):
        return jtblas.matmul(x, y, bias=z, activation="relu", gated=True, precision="highest")

    out = jax.vmap(product)(a, b, bias)
    for i in range(3):
        assert relative_error(out[i], float64_reference(a[i], b[i], bias=bias[i], activation="relu")) < 2e-5
    assert kernel_calls(jax.vmap(product), a, b, bias) == 1


def test_bad_arguments_name_themselves(rng):
    a, b = operands(rng, 4, 6, 8, "float32")
    with pytest.raises(ValueError, match=r"gated needs an even N .*N=11"):
        jtblas.matmul(a, b[:, :11], gated=True)
    with pytest.raises(TypeError, match="gated must be a bool"):
        jtblas.matmul(a, b, gated="yes")
    with pytest.raises(ValueError, match=r"bias must have shape \(N,\) = \(12,\)"):
        jtblas.matmul(a, b, bias=jnp.zeros(6), gated=True)
    with pytest.raises(ValueError, match=r"residual must have the result's shape \(4, 6\)"):
        jtblas.matmul(a, b, residual=jnp.zeros((4, 12)), gated=True)
    for config in (Config(block_m=16, block_n=32, block_k=16, num_warps=4, num_stages=2, split_k=2),
                   Config(block_m=16, block_n=64, block_k=16, num_warps=4, num_stages=2, swap_ab=True)):
        with pytest.raises(ValueError, match="gated product runs in the plain pointer kernel only"):
            jtblas.matmul(a, b, gated=True, config=config)
    with pytest.raises(ValueError, match="gated needs an even N"):
        jtblas.select(16, 11, 16, gated=True)


def test_empty_product_has_half_the_columns(rng):
    a = jnp.zeros((4, 0), jnp.float32)
    out = jtblas.matmul(a, jnp.zeros((0, 12), jnp.float32), bias=jnp.ones(12), activation="relu", gated=True)
    np.testing.assert_array_equal(out, np.ones((4, 6)))  # relu(0 + 1) * (0 + 1)


def test_model_offers_the_plain_kernel_only():
    """The gated search space: no split, K phases, swapped tiles or TMA; the plan is not repacked;
    C's bytes are half the product's; select, candidates and explain agree."""
    for m, n, k in [(1, 28672, 4096), (64, 22016, 4096), (8192, 28672, 4096), (37, 50258, 1600)]:
        problem = Problem(m=m, n=n, k=k, activation="silu", gated=True)
        found = model.candidates_for_problem(problem, H200)
        assert found and all(c.k_slices == 1 and not c.swap_ab and not c.tma for c in found)
        plan = model.plan_for_problem(problem, H200)
        assert plan.kernel_problem == problem and plan.config in found and "not repacked" in plan.reason
        config = jtblas.select(m, n, k, activation="silu", gated=True, hardware="h200")
        assert config == plan.config and config in jtblas.candidates(m, n, k, activation="silu", gated=True,
                                                                      hardware="h200")
        explanation = jtblas.explain(m, n, k, activation="silu", gated=True, hardware="h200")
        assert explanation.ranked[0].config == config and "gated silu" in str(explanation)
    # The gated tile writes half the product's C: at a bandwidth-bound size it predicts less than
    # the same config on the whole product would.
    gated = Problem(m=8192, n=2048, k=64, activation="silu", gated=True)
    config = model.plan_for_problem(gated, H200).config
    whole = model.cost.estimate(config, Problem(m=8192, n=2048, k=64, activation="silu"), H200)
    assert model.cost.estimate(config, gated, H200).predicted_seconds < whole.predicted_seconds


def test_model_reads_a_gated_b_in_two_runs_per_row():
    """A gated tile's B rows are two runs of block_n / 2 columns (the gate's, the up projection's):
    block_n 64 of bf16 reads 64-byte runs, half of each 128-byte line; so a bandwidth-bound decode
    product picks tiles whose half rows fill a line (on the H100, 2026-12-06, 1x57344x8192 gated
    with 16x64x64 tiles ran 421 µs, the plain product with them 321)."""
    narrow = Config.from_short("16x64x64 w2 s3 g1")
    for m, n, k in [(1, 57344, 8192), (4, 22016, 4096)]:
        gated = Problem(m=m, n=n, k=k, activation="silu", gated=True)
        assert model.cost.line_efficiency(gated, narrow, "b") == 0.5
        assert model.cost.line_efficiency(Problem(m=m, n=n, k=k), narrow, "b") == 1.0
        assert model.cost.line_efficiency(dataclasses.replace(gated, transpose_b=True), narrow, "b") == 1.0
        assert model.plan_for_problem(gated, H200).config.block_n >= 128


@pytest.mark.parametrize("activation", ["silu", "gelu"])
def test_gated_kernel_compiles_for_sm90(activation):
    """The gated epilogue (the tile's halves paired by a reshape, a permute and a split) compiles
    to PTX for sm_90 through jax-triton's CUDA lowering, with bias and residual, no GPU needed."""
    a = jax.ShapeDtypeStruct((64, 512), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((512, 512), jnp.bfloat16)
    bias = jax.ShapeDtypeStruct((512,), jnp.float32)
    residual = jax.ShapeDtypeStruct((64, 256), jnp.bfloat16)
    for config in (Config(block_m=64, block_n=128, block_k=64, num_warps=4, num_stages=3), None):
        text = lower_for_cuda(lambda x, y, z, w, config=config: jtblas.matmul(
            x, y, bias=z, residual=w, activation=activation, gated=True, config=config), a, b, bias, residual)
        assert text.count("triton_kernel_call") == 1


@pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 CPU devices (tests/conftest.py forces them)")
@pytest.mark.parametrize("specs", [
    (P("x"), P(), P(), P("x")),                 # data parallel
    (P(), P(None, "x"), P("x"), P(None, "x")),  # w, bias and residual split by N: gathered, not split
    (P(None, "x"), P("x"), P(), P()),           # K-sharded: the gate applied after the sum
], ids=["data_parallel", "columns", "k_sharded"])
def test_sharded_jit_never_splits_the_pairs(specs, rng):
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    x, w = stored(rng, (16, 8), "float32"), stored(rng, (8, 16), "float32")
    bias, residual = stored(rng, (16,), "float32"), stored(rng, (16, 8), "float32")
    args = [jax.device_put(v, NamedSharding(mesh, spec)) for v, spec in zip((x, w, bias, residual), specs)]

    def loss(x, w, bias, residual):
        out = jtblas.matmul(x, w, bias=bias, residual=residual, activation="silu", gated=True, precision="highest")
        return jnp.sum(out ** 2)

    def reference(x, w, bias, residual):
        return jnp.sum(unfused_reference(x, w, bias, residual, "silu") ** 2)

    assert_value_and_grads_match(loss, reference, args, (x, w, bias, residual))
    out = jax.jit(lambda *a: jtblas.matmul(a[0], a[1], bias=a[2], residual=a[3], activation="silu", gated=True,
                                           precision="highest"))(*args)
    assert relative_error(out, np.asarray(unfused_reference(x, w, bias, residual, "silu"), np.float64)) < 1e-5


def test_gated_dense_is_dense_of_twice_the_width_then_split(rng):
    """`jtblas.nn.GatedDense`: Flax `Dense(2F)`'s parameters (same names, shapes, initialisers),
    its output split into gate and up, silu(gate) · up: one launch; gradients; a bf16 computation
    of fp32 parameters; float64 inputs run Flax's computation."""
    x = jnp.asarray(rng.standard_normal((2, 5, 12)), jnp.float32)
    layer = jtblas.nn.GatedDense(features=8, use_bias=True, bias_init=flax.linen.initializers.normal(1.0),
                                 precision="highest")
    dense = flax.linen.Dense(16, bias_init=flax.linen.initializers.normal(1.0), precision="highest")
    params, dense_params = layer.init(jax.random.key(0), x), dense.init(jax.random.key(0), x)
    assert jax.tree.structure(params) == jax.tree.structure(dense_params)
    for p, q in zip(jax.tree.leaves(params), jax.tree.leaves(dense_params)):
        np.testing.assert_array_equal(p, q)

    def reference(p, v):
        gate, up = jnp.split(dense.apply(p, v), 2, axis=-1)
        return jax.nn.silu(gate) * up

    out = layer.apply(params, x)
    assert out.shape == (2, 5, 8)
    assert relative_error(out, np.asarray(reference(params, x), np.float64)) < 1e-5
    assert kernel_calls(layer.apply, params, x) == 1
    grads = jax.grad(lambda p: jnp.sum(layer.apply(p, x) ** 2))(params)
    want = jax.grad(lambda p: jnp.sum(reference(p, x) ** 2))(params)
    for g, v in zip(jax.tree.leaves(grads), jax.tree.leaves(want)):
        assert relative_error(g, np.asarray(v, np.float64)) < 1e-5

    bf16 = jtblas.nn.GatedDense(features=8, dtype=jnp.bfloat16)
    params = bf16.init(jax.random.key(1), x)
    out = bf16.apply(params, x.astype(jnp.bfloat16))
    assert out.dtype == jnp.bfloat16 and params["params"]["kernel"].dtype == jnp.float32
    assert kernel_calls(bf16.apply, params, x.astype(jnp.bfloat16)) == 1
    with jax.enable_x64(True):
        x64 = jnp.asarray(rng.standard_normal((3, 12)), jnp.float64)
        params = layer.init(jax.random.key(2), x64)
        assert layer.apply(params, x64).dtype == jnp.float64
        assert kernel_calls(layer.apply, params, x64) == 0
    with pytest.raises(ValueError, match="activation must be None or one of"):
        jtblas.nn.GatedDense(features=4, activation="swish").init(jax.random.key(0), x)


def test_gated_linear_is_nnx_linear_of_twice_the_width_then_split(rng):
    """`jtblas.nn.GatedLinear`: the state of `flax.nnx.Linear(in, 2F)`, its output split and
    gated, in one launch; gradients; a custom dot_general runs Flax's Linear, then the gate."""
    from flax import nnx

    x = jnp.asarray(rng.standard_normal((6, 12)), jnp.float32)
    layer = jtblas.nn.GatedLinear(12, 5, use_bias=True, precision="highest", rngs=nnx.Rngs(0))
    linear = nnx.Linear(12, 10, use_bias=True, precision="highest", rngs=nnx.Rngs(0))
    assert jax.tree.structure(nnx.state(layer)) == jax.tree.structure(nnx.state(linear))
    nnx.update(linear, jax.tree.map(lambda v: v + 0.5, nnx.state(linear)))  # a bias that is not zero
    nnx.update(layer, nnx.state(linear))

    def reference(model, v):
        gate, up = jnp.split(model(v), 2, axis=-1)
        return jax.nn.silu(gate) * up

    out = layer(x)
    assert out.shape == (6, 5)
    assert relative_error(out, np.asarray(reference(linear, x), np.float64)) < 1e-5
    assert kernel_calls(lambda v: layer(v), x) == 1
    grads = nnx.grad(lambda model, v: jnp.sum(model(v) ** 2))(layer, x)
    want = nnx.grad(lambda model, v: jnp.sum(reference(model, v) ** 2))(linear, x)
    for g, v in zip(jax.tree.leaves(grads), jax.tree.leaves(want)):
        assert relative_error(g, np.asarray(v, np.float64)) < 1e-5
    custom = jtblas.nn.GatedLinear(12, 5, dot_general=jax.lax.dot_general, precision="highest", rngs=nnx.Rngs(0))
    assert kernel_calls(lambda v: custom(v), x) == 0 and custom(x).shape == (6, 5)


def test_forced_repacking_leaves_a_gated_product_unpadded(rng):
    """The tests' `repack_mode("always")` pads other products' operands; a padded B would move a
    gated product's pairs (N/2 apart), so it runs unpadded, forced config or not."""
    from jtblas.ops import repack_mode

    a, b = operands(rng, 5, 5, 7, "float32")
    reference = float64_reference(a, b, activation="silu")
    with repack_mode("always"):
        for config in (TILES[0], None):
            out = jtblas.matmul(a, b, activation="silu", gated=True, config=config, precision="highest")
            assert relative_error(out, reference) < 2e-5, config


def test_explain_cli_takes_gated(capsys):
    """`jtblas explain --gated` plans the gated product; an odd N is one line on stderr, exit 2."""
    from jtblas import cli

    assert cli.main(["explain", "16", "28672", "4096", "--gpu", "h200", "--top", "1", "--activation", "silu",
                     "--gated"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("16x28672x4096 bfloat16 NN gated silu on h200") and "not repacked" in out
    assert cli.main(["explain", "16", "28671", "4096", "--gpu", "h200", "--gated"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gated needs an even N" in err and "28671" in err
