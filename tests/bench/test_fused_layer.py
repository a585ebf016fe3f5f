"""benchmarks/fused_layer.py compares like with like: its layer list covers each epilogue once and
the gated projections with their families' activations, and its contenders (XLA's dot with the
jnp epilogue, the fused launch, jtblas's product then the jnp epilogue, with --tma the fused launch
on the bare product's TMA pick) compute the same layer on small stand-ins of each kind (Triton's
interpreter on CPU)."""

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


def test_the_tma_contender_runs_the_bare_products_tma_pick_with_the_epilogue(fused_layer, monkeypatch, rng):
    from jtblas import hardware
    from jtblas.config import Config

    shapes = {s.key(): s for s, kind, _ in fused_layer.layer_products() if kind == "up"}
    bert_up = next(s for s in shapes.values() if (s.m, s.n, s.k) == (8192, 3072, 768))
    assert fused_layer.tma_twin(bert_up, hardware.get("h100")).tma  # moved to TMA, 2026-12-06
    decode = next(s for s, kind, _ in fused_layer.layer_products() if s.m == 1)
    assert fused_layer.tma_twin(decode, hardware.get("h100")) is None
    twin = Config(block_m=64, block_n=32, block_k=32, group_m=2, num_warps=4, num_stages=3, tma=True)
    monkeypatch.setattr(fused_layer, "tma_twin", lambda shape: twin)
    for layer, activation in (("up", "gelu"), ("o", None)):
        k = 40 if layer == "o" else 48
        small = dataclasses.replace(bert_up, m=24, n=40, k=k)
        a = jnp.asarray(rng.standard_normal((24, k)), jnp.bfloat16)
        b = jnp.asarray(rng.standard_normal((k, 40)) / np.sqrt(k), jnp.bfloat16)
        found = fused_layer.contenders(small, layer, activation, tma=True)
        assert list(found) == ["xla", "jtblas", "unfused", "tma"]
        reference = np.asarray(jax.jit(found["xla"])(a, b), np.float64)
        assert relative_error(np.asarray(jax.jit(found["tma"])(a, b), np.float64), reference) < 2e-2, layer
