"""Flax's own tests of its Dense and Linear layers, with jtblas's layers in their place.

The behaviours Flax checks for `flax.linen.Dense` (its tests/linen/linen_linear_test.py: values
with ones initialisers, extra batch dimensions, no bias, Dense equal to DenseGeneral, complex
parameters and inputs) and for `flax.nnx.Linear` against `flax.linen.Dense` (its
tests/nnx/nn/linear_test.py: every combination of bias, dtype, parameter dtype, precision and
preferred element type gives the same output from both), written here for `jtblas.nn.Dense` and
`jtblas.nn.Linear`, with seeded random inputs (and biases) where Flax uses ones (and zeros). Where
jtblas's product is not XLA's (fp32 accumulation in another order; the bias added as stored, before
the one rounding), the values are compared with Flax's layer within the product's tolerance
instead of bit for bit.
"""

import functools

import flax.linen
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.nn import initializers

import jtblas
from tests.reference import kernel_calls, relative_error, tolerance

PRECISIONS = [jax.lax.Precision.DEFAULT, jax.lax.Precision.HIGH, jax.lax.Precision.HIGHEST]


def _init_with_output(module, x):
    return module.init_with_output(dict(params=jax.random.key(0)), x)


@pytest.mark.parametrize("shape, use_bias, expected", [((1, 3), True, 4.0), ((1, 2, 3), True, 4.0),
                                                       ((1, 3), False, 3.0)])
def test_dense_with_ones_initialisers(shape, use_bias, expected):
    """Ones in, ones for kernel and bias: each output is K (+ 1 with the bias), in fp32, shaped as
    the input with its last dimension replaced."""
    dense = jtblas.nn.Dense(features=4, use_bias=use_bias, kernel_init=initializers.ones,
                            bias_init=initializers.ones)
    x = jnp.ones(shape)
    y, params = _init_with_output(dense, x)
    assert y.shape == (*shape[:-1], 4) and y.dtype == jnp.float32
    np.testing.assert_array_equal(y, np.full(y.shape, expected))
    assert kernel_calls(dense.apply, params, x) == 1


def test_dense_is_dense_general(rng):
    """The same parameters as Flax's DenseGeneral with one output axis, the same values (within
    the tf32 product's tolerance: Flax's DEFAULT precision)."""
    x = jnp.asarray(rng.standard_normal((5, 3)), jnp.float32)
    y, params = jtblas.nn.Dense(features=4, bias_init=initializers.normal()).init_with_output(
        dict(params=jax.random.key(1)), x)
    general, general_params = flax.linen.DenseGeneral(features=4, bias_init=initializers.normal()).init_with_output(
        dict(params=jax.random.key(1)), x)
    assert jax.tree.map(jnp.shape, params) == jax.tree.map(jnp.shape, general_params)
    for p, q in zip(jax.tree.leaves(params), jax.tree.leaves(general_params)):
        np.testing.assert_array_equal(p, q)
    assert relative_error(y, np.asarray(general, np.float64)) < tolerance("float32", "float32", "tf32")


def test_complex_parameters_and_inputs_are_flax_computation(rng):
    """Complex parameters or inputs: the kernel does not take them; the layer is Flax's (the
    same dtypes and values, no kernel launch)."""
    x = jnp.asarray(rng.standard_normal((1, 2)), jnp.float32)
    dense, flax_dense = jtblas.nn.Dense(features=2, param_dtype=jnp.complex64), flax.linen.Dense(
        features=2, param_dtype=jnp.complex64)
    params = dense.init(jax.random.key(0), x)
    assert params["params"]["kernel"].dtype == params["params"]["bias"].dtype == jnp.complex64
    y = dense.apply(params, x)
    assert y.dtype == jnp.complex64
    np.testing.assert_array_equal(y, flax_dense.apply(params, x))
    assert kernel_calls(dense.apply, params, x) == 0

    z = x.astype(jnp.complex64) * (1 + 1j)
    dense, flax_dense = jtblas.nn.Dense(features=2), flax.linen.Dense(features=2)
    params = dense.init(jax.random.key(0), z)
    assert params["params"]["kernel"].dtype == params["params"]["bias"].dtype == jnp.float32
    y = dense.apply(params, z)
    assert y.dtype == jnp.complex64
    np.testing.assert_array_equal(y, flax_dense.apply(params, z))


def _output_tolerance(dtype, param_dtype, precision) -> float:
    """The tolerance of a product computed in the layer's dtype with an output in it: a 16-bit
    computation's even where the output is fp32, since jtblas adds the bias as stored and Flax
    rounds it to `dtype` first (`jtblas.nn`); fp32's at the precision (HIGHEST: ieee, else tf32)."""
    compute = jnp.dtype(dtype if dtype is not None else param_dtype).name
    ieee = compute == "float32" and precision == jax.lax.Precision.HIGHEST  # 16-bit ignores it
    return tolerance(compute, compute, "ieee" if ieee else "tf32")


@pytest.mark.parametrize("preferred_element_type", [None, jnp.float32])
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("param_dtype", [jnp.float32, jnp.float16])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
@pytest.mark.parametrize("use_bias", [True, False])
def test_nnx_linear_and_linen_dense_agree(use_bias, dtype, param_dtype, precision, preferred_element_type, rng):
    """`jtblas.nn.Linear` and `jtblas.nn.Dense` with the same parameters: bit for bit the same
    output (one fused launch each, same config), with a preferred element type each within its
    tolerance (Dense takes it through its `dot_general`, as Flax's test does, which is Flax's
    computation around `jtblas.dot_general`); both within the product's tolerance of Flax's own
    layer."""
    in_features, out_features = 32, 64
    x = jnp.asarray(rng.standard_normal((3, in_features)), jnp.float32)
    linear = nnx.eval_shape(lambda rngs: jtblas.nn.Linear(
        in_features, out_features, use_bias=use_bias, dtype=dtype, param_dtype=param_dtype, precision=precision,
        preferred_element_type=preferred_element_type, rngs=rngs), nnx.Rngs(42))
    dot = None
    if preferred_element_type is not None:
        dot = functools.partial(jtblas.dot_general, preferred_element_type=preferred_element_type)
    dense = jtblas.nn.Dense(out_features, use_bias=use_bias, dtype=dtype, param_dtype=param_dtype,
                            precision=precision, **({} if dot is None else dict(dot_general=dot)))
    variables = dense.init(jax.random.key(42), x)
    if use_bias:  # Flax's initialiser gives zeros: a bias that changes the output is a stronger test
        variables["params"]["bias"] = jnp.asarray(rng.standard_normal(out_features), param_dtype)
    linear.kernel.set_value(variables["params"]["kernel"])
    if use_bias:
        linear.bias.set_value(variables["params"]["bias"])

    out_linear, out_dense = linear(x), dense.apply(variables, x)
    flax_dot = None if preferred_element_type is None else functools.partial(
        jax.lax.dot_general, preferred_element_type=preferred_element_type)
    flax_dense = flax.linen.Dense(out_features, use_bias=use_bias, dtype=dtype, param_dtype=param_dtype,
                                  precision=precision, **({} if flax_dot is None else dict(dot_general=flax_dot)))
    out_flax = flax_dense.apply(variables, x)
    assert out_linear.dtype == out_dense.dtype == out_flax.dtype and out_linear.shape == out_flax.shape
    tol = _output_tolerance(dtype, param_dtype, precision)
    if preferred_element_type is None:
        np.testing.assert_array_equal(out_linear, out_dense)
    else:
        assert relative_error(out_linear, np.asarray(out_dense, np.float64)) < tol
    for out in (out_linear, out_dense):
        assert relative_error(out, np.asarray(out_flax, np.float64)) < tol
    assert kernel_calls(lambda v: linear(v), x) == 1 and kernel_calls(dense.apply, variables, x) == 1
