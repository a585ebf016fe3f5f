"""jtblas.nn.Dense / Linear are Flax's layers with jtblas's product: same parameters, same
outputs within tolerance, checkpoints interchangeable, and the kernel really runs."""

import flax.linen
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx, serialization

import jtblas
from jtblas.epilogue import ACTIVATION_FUNCTIONS
from tests.reference import count_equations, kernel_calls, relative_error

HIGHEST = jax.lax.Precision.HIGHEST


class MLP(flax.linen.Module):
    dense: type = flax.linen.Dense

    @flax.linen.compact
    def __call__(self, x):
        x = jax.nn.relu(self.dense(32, precision=HIGHEST)(x))
        return self.dense(10, precision=HIGHEST, use_bias=False)(x)


def test_dense_keeps_flax_names_and_defaults():
    assert jtblas.nn.Dense.__name__ == "Dense" and issubclass(jtblas.nn.Dense, flax.linen.Dense)
    assert jtblas.nn.Linear.__name__ == "Linear" and issubclass(jtblas.nn.Linear, nnx.Linear)
    ours, theirs = jtblas.nn.Dense(4), flax.linen.Dense(4)
    for name in ("use_bias", "dtype", "param_dtype", "precision", "kernel_init", "bias_init"):
        assert getattr(ours, name) == getattr(theirs, name)
    assert ours.dot_general is jtblas.dot_general


def test_dense_matches_flax_dense_and_shares_checkpoints(rng):
    x = jnp.asarray(rng.standard_normal((4, 3, 20)), jnp.float32)
    ours, theirs = MLP(dense=jtblas.nn.Dense), MLP()
    params = ours.init(jax.random.key(0), x)
    flax_params = theirs.init(jax.random.key(0), x)
    assert jax.tree.structure(params) == jax.tree.structure(flax_params)
    for p, q in zip(jax.tree.leaves(params), jax.tree.leaves(flax_params)):
        np.testing.assert_array_equal(p, q)  # the same initialisers, shapes and names

    # A Flax checkpoint loads into the jtblas model (and back), giving the same outputs.
    restored = serialization.from_bytes(params, serialization.to_bytes(flax_params))
    back = serialization.from_bytes(flax_params, serialization.to_bytes(restored))
    out = jax.jit(ours.apply)(restored, x)
    reference = np.asarray(theirs.apply(back, x), np.float64)
    assert out.shape == (4, 3, 10)
    assert relative_error(out, reference) < 1e-5
    assert kernel_calls(ours.apply, restored, x) > 0


def test_dense_gradients_match_flax(rng):
    x = jnp.asarray(rng.standard_normal((8, 20)), jnp.float32)
    ours, theirs = MLP(dense=jtblas.nn.Dense), MLP()
    params = theirs.init(jax.random.key(1), x)

    def loss(model):
        return lambda p: jnp.mean(model.apply(p, x) ** 2)

    grads = jax.jit(jax.grad(loss(ours)))(params)
    flax_grads = jax.grad(loss(theirs))(params)
    for g, g_ref in zip(jax.tree.leaves(grads), jax.tree.leaves(flax_grads)):
        assert relative_error(g, np.asarray(g_ref, np.float64)) < 1e-5


@pytest.mark.parametrize(
    "options,tol",
    [
        ({"dtype": jnp.bfloat16}, 1e-2),
        ({"param_dtype": jnp.float16, "dtype": jnp.float16}, 3e-3),
        ({"use_bias": False}, 5e-3),
        ({"kernel_init": flax.linen.initializers.ones, "bias_init": flax.linen.initializers.normal()}, 5e-3),
    ],
    ids=["dtype-bf16", "param-dtype-fp16", "no-bias", "inits"],
)
def test_dense_options(options, tol, rng):
    """Flax's arguments keep working; default precision (tf32 on the kernel side)."""
    x = jnp.asarray(rng.standard_normal((5, 12)), jnp.float32)
    ours, theirs = jtblas.nn.Dense(7, **options), flax.linen.Dense(7, **options)
    params = theirs.init(jax.random.key(2), x)
    out, reference = ours.apply(params, x), theirs.apply(params, x)
    assert out.dtype == reference.dtype and out.shape == reference.shape
    assert relative_error(out, np.asarray(reference, np.float64)) < tol


def test_nnx_linear_matches_flax_linear(rng):
    x = jnp.asarray(rng.standard_normal((6, 12)), jnp.float32)
    ours = jtblas.nn.Linear(12, 5, precision=HIGHEST, rngs=nnx.Rngs(0))
    theirs = nnx.Linear(12, 5, precision=HIGHEST, rngs=nnx.Rngs(0))
    ours_state, theirs_state = nnx.state(ours), nnx.state(theirs)
    assert jax.tree.structure(ours_state) == jax.tree.structure(theirs_state)
    for p, q in zip(jax.tree.leaves(ours_state), jax.tree.leaves(theirs_state)):
        np.testing.assert_array_equal(p, q)

    # State moves across (as a checkpoint would) and gives the same outputs.
    nnx.update(theirs, jax.tree.map(lambda v: v * 2, nnx.state(ours)))
    nnx.update(ours, nnx.state(theirs))
    assert relative_error(ours(x), np.asarray(theirs(x), np.float64)) < 1e-5
    assert kernel_calls(lambda v: ours(v), x) > 0

    def loss(model, v):
        return jnp.mean(model(v) ** 2)

    grads, flax_grads = nnx.grad(loss)(ours, x), nnx.grad(loss)(theirs, x)
    for g, g_ref in zip(jax.tree.leaves(grads), jax.tree.leaves(flax_grads)):
        assert relative_error(g, np.asarray(g_ref, np.float64)) < 1e-5


def test_nnx_linear_keeps_arguments(rng):
    x = jnp.asarray(rng.standard_normal((3, 4)), jnp.bfloat16)
    layer = jtblas.nn.Linear(
        4, 6, use_bias=False, dtype=jnp.bfloat16, preferred_element_type=jnp.float32, rngs=nnx.Rngs(1)
    )
    assert layer.bias is None and layer.dot_general is jtblas.dot_general
    assert layer(x).dtype == jnp.float32


@pytest.mark.parametrize("activation", [None, "relu", "gelu_tanh", "gelu", "silu"])
def test_dense_fuses_bias_and_activation_with_an_fp32_kernel(activation, rng):
    """bf16 inputs, fp32 parameters, dtype bf16: the parameter tree is Flax's, the output is
    Flax's Dense followed by the activation, gradients come back in fp32 for the parameters and
    in bf16 for the input, and the layer is one launch."""
    x = jnp.asarray(rng.standard_normal((4, 3, 24)), jnp.bfloat16)
    ours = jtblas.nn.Dense(16, dtype=jnp.bfloat16, activation=activation)
    theirs = flax.linen.Dense(16, dtype=jnp.bfloat16)
    params = ours.init(jax.random.key(3), x)
    flax_params = theirs.init(jax.random.key(3), x)
    assert jax.tree.map(lambda p: (p.shape, p.dtype), params) == jax.tree.map(lambda p: (p.shape, p.dtype),
                                                                               flax_params)
    params = jax.tree.map(lambda p: p + jnp.asarray(rng.standard_normal(p.shape), p.dtype) * 0.1, flax_params)
    act = ACTIVATION_FUNCTIONS[activation] if activation else (lambda v: v)
    out = ours.apply(params, x)
    reference = act(theirs.apply(params, x).astype(jnp.float32))
    assert out.dtype == jnp.bfloat16 and out.shape == (4, 3, 16)
    assert relative_error(out, np.asarray(reference, np.float64)) < 1e-2
    assert kernel_calls(ours.apply, params, x) == 1

    def loss(p, v, model, post):
        return jnp.sum(post(model.apply(p, v).astype(jnp.float32)) ** 2)

    grads = jax.grad(loss, argnums=(0, 1))(params, x, ours, lambda v: v)
    flax_grads = jax.grad(loss, argnums=(0, 1))(params, x, theirs, act)
    for g, g_ref in zip(jax.tree.leaves(grads), jax.tree.leaves(flax_grads)):
        assert g.dtype == g_ref.dtype
        assert relative_error(g, np.asarray(g_ref, np.float64)) < 3e-2


def test_fp32_kernel_is_not_converted_outside_the_kernel_call(rng):
    """The program of a bf16 Dense with fp32 parameters holds no convert of the kernel (nor of the
    bias): both reach the jtblas launch as stored, in the jaxpr and in the lowered HLO."""
    x = jnp.asarray(rng.standard_normal((8, 32)), jnp.bfloat16)
    layer = jtblas.nn.Dense(64, dtype=jnp.bfloat16, activation="gelu")
    params = layer.init(jax.random.key(0), x)
    assert count_equations(jax.make_jaxpr(layer.apply)(params, x), "convert_element_type") == 0
    hlo = jax.jit(layer.apply).lower(params, x).as_text()
    assert "tensor<32x64xf32>" in hlo and "tensor<32x64xbf16>" not in hlo
    assert "stablehlo.convert" not in hlo
    # Flax's own Dense converts the kernel before its dot.
    flax_hlo = jax.jit(flax.linen.Dense(64, dtype=jnp.bfloat16).apply).lower(params, x).as_text()
    assert "stablehlo.convert" in flax_hlo


def test_custom_dot_general_keeps_flax_computation_and_bad_activation_raises(rng):
    x = jnp.asarray(rng.standard_normal((5, 12)), jnp.float32)
    custom = jtblas.nn.Dense(7, dot_general=jax.lax.dot_general, activation="relu", precision=HIGHEST)
    params = custom.init(jax.random.key(2), x)
    reference = jax.nn.relu(flax.linen.Dense(7, precision=HIGHEST).apply(params, x))
    assert relative_error(custom.apply(params, x), np.asarray(reference, np.float64)) < 1e-6
    assert kernel_calls(custom.apply, params, x) == 0
    with pytest.raises(ValueError, match="activation must be None or one of"):
        jtblas.nn.Dense(7, activation="tanh").init(jax.random.key(0), x)
    with pytest.raises(ValueError, match="activation must be None or one of"):
        jtblas.nn.Linear(12, 7, activation="swish", rngs=nnx.Rngs(0))


def test_nnx_linear_with_activation_and_fp32_kernel(rng):
    x = jnp.asarray(rng.standard_normal((6, 12)), jnp.bfloat16)
    ours = jtblas.nn.Linear(12, 5, dtype=jnp.bfloat16, activation="silu", rngs=nnx.Rngs(0))
    theirs = nnx.Linear(12, 5, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    assert jax.tree.structure(nnx.state(ours)) == jax.tree.structure(nnx.state(theirs))
    out, reference = ours(x), jax.nn.silu(theirs(x).astype(jnp.float32))
    assert out.dtype == jnp.bfloat16
    assert relative_error(out, np.asarray(reference, np.float64)) < 1e-2
    assert kernel_calls(lambda v: ours(v), x) == 1
    grads = nnx.grad(lambda model, v: jnp.sum(model(v).astype(jnp.float32) ** 2))(ours, x)
    assert all(g.dtype == jnp.float32 for g in jax.tree.leaves(grads))
