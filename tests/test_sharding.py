"""jtblas.matmul inside `jax.shard_map` (check_vma on): results, gradients and typing errors as
`jnp.dot`'s, eager and jitted, on four CPU devices (tests/conftest.py forces them).

The product's result must vary over the union of its operands' manual axes: otherwise JAX takes
a data-parallel product for replicated, drops the psum of the replicated weight's gradient and
accepts `out_specs` that claim replication.
"""

import flax.linen
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import jtblas
import jtblas.nn
from jtblas import sharding
from tests.reference import DTYPES, relative_error

HIGHEST = jax.lax.Precision.HIGHEST
# Relative Frobenius error against the float64 value of the same loss and gradients: fp32 with
# HIGHEST is accumulation only; a 16-bit loss adds the output's and the cotangent's rounding.
TOLERANCE = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}

pytestmark = pytest.mark.skipif(
    jax.default_backend() != "cpu" or jax.device_count() < 4,
    reason="needs 4 CPU devices (tests/conftest.py sets --xla_force_host_platform_device_count=4)",
)


def mesh_1d() -> Mesh:
    return Mesh(np.array(jax.devices()[:4]), ("x",))


# (in_specs of x [M, K] and w [K, N], out_specs, whether the body sums its partial products)
PATTERNS = {
    "data_parallel": ((P("x"), P()), P("x"), False),
    "columns": ((P(), P(None, "x")), P(None, "x"), False),
    "rows_psum": ((P(None, "x"), P("x")), P(), True),
    "fsdp_like": ((P("x"), P("x")), P("x"), False),  # w's K rows sharded, gathered in the body
}


def sharded_loss(product, in_specs, out_specs, psum):
    def body(x, w):
        if in_specs[1] == P("x") and in_specs[0] == P("x"):  # FSDP: gather the weight first
            w = jax.lax.all_gather(w, "x", tiled=True)
        y = product(x, w)
        return jax.lax.psum(y, "x") if psum else y

    mapped = jax.shard_map(body, mesh=mesh_1d(), in_specs=in_specs, out_specs=out_specs)
    return lambda x, w: jnp.sum(mapped(x, w).astype(jnp.float32) ** 2)


def float64_loss_and_grads(x, w):
    x64, w64 = np.asarray(x, np.float64), np.asarray(w, np.float64)
    y = x64 @ w64
    return np.sum(y**2), 2 * y @ w64.T, 2 * x64.T @ y


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_shard_map_loss_and_grads_match_float64_and_jnp_dot(pattern, jit, rng):
    in_specs, out_specs, psum = PATTERNS[pattern]
    x = jnp.asarray(rng.standard_normal((16, 8)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((8, 12)), jnp.float32)
    results = {}
    for name, product in (("jtblas", lambda a, b: jtblas.matmul(a, b, precision=HIGHEST)),
                          ("xla", lambda a, b: jnp.dot(a, b, precision=HIGHEST))):
        fn = jax.value_and_grad(sharded_loss(product, in_specs, out_specs, psum), argnums=(0, 1))
        results[name] = (jax.jit(fn) if jit else fn)(x, w)
    loss64, dx64, dw64 = float64_loss_and_grads(x, w)
    (loss, (dx, dw)), (_, (dx_xla, dw_xla)) = results["jtblas"], results["xla"]
    assert relative_error(loss, np.asarray(loss64)) < TOLERANCE["float32"]
    assert relative_error(dx, dx64) < TOLERANCE["float32"]
    assert relative_error(dw, dw64) < TOLERANCE["float32"]
    assert relative_error(dw_xla, dw64) < TOLERANCE["float32"]  # the reference pattern is right
    assert relative_error(dx_xla, dx64) < TOLERANCE["float32"]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_data_parallel_grads_in_16_bit(dtype, rng):
    x = jnp.asarray(rng.standard_normal((16, 8)), DTYPES[dtype])
    w = jnp.asarray(rng.standard_normal((8, 12)), DTYPES[dtype])
    in_specs, out_specs, psum = PATTERNS["data_parallel"]
    fn = jax.jit(jax.grad(sharded_loss(jtblas.matmul, in_specs, out_specs, psum), argnums=(0, 1)))
    dx, dw = fn(x, w)
    _, dx64, dw64 = float64_loss_and_grads(x, w)
    assert dx.dtype == x.dtype and dw.dtype == w.dtype
    assert relative_error(dx, dx64) < TOLERANCE[dtype]
    assert relative_error(dw, dw64) < TOLERANCE[dtype]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_product_varies_over_the_union_of_its_operands_axes(jit):
    seen = {}

    def body(x, w):
        y = jtblas.matmul(x, w)
        seen["y"], seen["w"] = sharding.varying_axes(y), sharding.varying_axes(w)
        return y

    fn = jax.shard_map(body, mesh=mesh_1d(), in_specs=(P("x"), P()), out_specs=P("x"))
    (jax.jit(fn) if jit else fn)(jnp.ones((8, 4)), jnp.ones((4, 4)))
    assert seen == {"y": frozenset({"x"}), "w": frozenset()}


@pytest.mark.parametrize("product", [jtblas.matmul, jnp.dot], ids=["jtblas", "xla"])
def test_out_specs_claiming_replication_are_refused(product):
    fn = jax.shard_map(product, mesh=mesh_1d(), in_specs=(P("x"), P()), out_specs=P())
    with pytest.raises(ValueError, match="out_specs"):
        jax.jit(fn)(jnp.ones((8, 4)), jnp.ones((4, 4)))


def test_unchecked_shard_map_runs_the_product(rng):
    x = jnp.asarray(rng.standard_normal((16, 8)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((8, 4)), jnp.float32)
    fn = jax.shard_map(lambda a, b: jtblas.matmul(a, b, precision=HIGHEST), mesh=mesh_1d(),
                       in_specs=(P("x"), P()), out_specs=P("x"), check_vma=False)
    expected = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    assert relative_error(jax.jit(fn)(x, w), expected) < TOLERANCE["float32"]


def test_batched_product_in_shard_map(rng):
    """dot_general with a batch dimension (the kernel's batch grid axis) over a sharded batch."""
    x = jnp.asarray(rng.standard_normal((8, 3, 5)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((8, 5, 4)), jnp.float32)
    dims = (((2,), (1,)), ((0,), (0,)))

    def loss(product):
        mapped = jax.shard_map(lambda a, b: product(a, b, dims, precision=HIGHEST), mesh=mesh_1d(),
                               in_specs=(P("x"), P("x")), out_specs=P("x"))
        return lambda a, b: jnp.sum(mapped(a, b) ** 2)

    ours = jax.jit(jax.value_and_grad(loss(jtblas.dot_general), argnums=(0, 1)))(x, w)
    theirs = jax.jit(jax.value_and_grad(loss(jax.lax.dot_general), argnums=(0, 1)))(x, w)
    for got, want in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        assert relative_error(got, np.asarray(want, np.float64)) < TOLERANCE["float32"]


def test_data_parallel_dense_with_pmean_loss_matches_flax(rng):
    x = jnp.asarray(rng.standard_normal((16, 6)), jnp.float32)
    target = jnp.asarray(rng.standard_normal((16, 3)), jnp.float32)
    layers = {name: cls(3, precision=HIGHEST) for name, cls in (("jtblas", jtblas.nn.Dense),
                                                                ("flax", flax.linen.Dense))}
    params = layers["flax"].init(jax.random.key(0), x)

    def grad_fn(layer):
        def local_loss(params, x, target):
            return jax.lax.pmean(jnp.mean((layer.apply(params, x) - target) ** 2), "x")

        mapped = jax.shard_map(jax.grad(local_loss), mesh=mesh_1d(), in_specs=(P(), P("x"), P("x")),
                               out_specs=P())
        return jax.jit(mapped)

    ours, theirs = (grad_fn(layers[name])(params, x, target) for name in ("jtblas", "flax"))
    for got, want in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        assert relative_error(got, np.asarray(want, np.float64)) < TOLERANCE["float32"]
