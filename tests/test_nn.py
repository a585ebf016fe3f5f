"""jtblas.nn.Dense / Linear are Flax's layers with jtblas's product: same parameters, same
outputs within tolerance, checkpoints interchangeable, and the kernel really runs."""

import flax.linen
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx, serialization

import jtblas
from tests.reference import kernel_calls, relative_error

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
