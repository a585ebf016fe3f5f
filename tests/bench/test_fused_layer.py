"""benchmarks/fused_layer.py compares like with like: its layer list covers each epilogue once and
the gated projections with their families' activations, and its three contenders (XLA's dot with
the jnp epilogue, the fused launch, jtblas's product then the jnp epilogue) compute the same layer
on small stand-ins of each kind (Triton's interpreter on CPU)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.reference import load_script, relative_error



@pytest.fixture(scope="module")
def fused_layer():
    return load_script("benchmarks/fused_layer.py")


def test_layer_list_covers_each_epilogue_once(fused_layer):
    products = fused_layer.layer_products()
    keys = [(shape.key(), layer, activation) for shape, layer, activation in products]
    assert len(keys) == len(set(keys))
    assert {layer for _, layer, _ in products} == set(fused_layer.LAYERS)
    for shape, layer, activation in products:
        assert shape.name.split(".")[2] == "fwd"
        if layer == "o":
            assert shape.k == shape.n  # the residual is the product's own input
        if layer == "gate_up":
            assert activation in ("silu", "gelu_tanh") and shape.n % 2 == 0
        if layer == "qkv":
            assert activation is None


@pytest.mark.parametrize("layer,activation", [("up", "gelu"), ("up", "gelu_tanh"), ("qkv", None), ("o", None),
                                              ("gate_up", "silu"), ("gate_up", "gelu_tanh")])
def test_contenders_compute_the_same_layer(fused_layer, layer, activation, rng):
    shape = next(s for s, kind, _ in fused_layer.layer_products() if kind == layer)
    k = 48 if layer != "o" else 40
    small = dataclasses.replace(shape, m=24, n=40, k=k)
    a = jnp.asarray(rng.standard_normal((small.m, small.k)), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((small.k, small.n)) / np.sqrt(small.k), jnp.bfloat16)
    contenders = fused_layer.contenders(small, layer, activation)
    results = {name: np.asarray(jax.jit(dot)(a, b), np.float64) for name, dot in contenders.items()}
    columns = small.n // 2 if layer == "gate_up" else small.n
    assert all(r.shape == (small.m, columns) for r in results.values())
    for name in ("jtblas", "unfused"):
        assert relative_error(results[name], results["xla"]) < 2e-2, name
    problem = fused_layer.fused_problem(small, layer, activation)
    assert problem.gated == (layer == "gate_up") and problem.out_n == columns
