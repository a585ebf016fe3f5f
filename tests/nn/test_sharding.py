"""jtblas.matmul inside `jax.shard_map` (check_vma on): results, gradients and typing errors as
`jnp.dot`'s, eager and jitted, on four CPU devices (tests/conftest.py forces them).

The product's result must vary over the union of its operands' manual axes: otherwise JAX takes
a data-parallel product for replicated, drops the psum of the replicated weight's gradient and
accepts `out_specs` that claim replication.
"""

import collections
import re

import flax.linen
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jtblas
import jtblas.nn
import jtblas.model.repack
from jtblas import launch, ops, partitioning, sharding
from tests.reference import DTYPES, record_planned_problems, relative_error, require_jax_triton

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


# --- Under jax.jit with sharded operands (jtblas/partitioning.py) ---------------------------------

COLLECTIVES = re.compile(r"\s(all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(")


def mesh_2d() -> Mesh:
    return Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("d", "m"))


# Mesh, then the axes sharding x's (M, K) and w's (K, N) in their logical order; a layout stores
# them transposed. `fsdp`: the weight's K rows share the rows' axis, so XLA gathers the weight.
JIT_PATTERNS = {
    "data_parallel": (mesh_1d, ("x", None), (None, None)),
    "columns": (mesh_1d, (None, None), (None, "x")),
    "rows_psum": (mesh_1d, (None, "x"), ("x", None)),
    "fsdp": (mesh_1d, ("x", None), ("x", None)),
    "data_and_columns_2d": (mesh_2d, ("d", None), (None, "m")),
}
LAYOUTS = {"NN": (False, False), "NT": (False, True), "TN": (True, False), "TT": (True, True)}


def collectives(compiled_text: str) -> collections.Counter:
    """The collectives of a compiled HLO module, counted by kind."""
    return collections.Counter(COLLECTIVES.findall(compiled_text))


def placed(array, mesh, spec):
    return jax.device_put(array, NamedSharding(mesh, P(*spec)))


def jit_operands(rng, pattern, layout, dtype=jnp.float32, shape=(20, 36, 24)):
    """x, w as stored for `layout` and placed per `pattern`; their float64 values as used."""
    make_mesh, x_axes, w_axes = JIT_PATTERNS[pattern]
    transpose_a, transpose_b = LAYOUTS[layout]
    m, n, k = shape
    x = jnp.asarray(rng.standard_normal((k, m) if transpose_a else (m, k)), dtype)
    w = jnp.asarray(rng.standard_normal((n, k) if transpose_b else (k, n)), dtype)
    mesh = make_mesh()
    x = placed(x, mesh, x_axes[::-1] if transpose_a else x_axes)
    w = placed(w, mesh, w_axes[::-1] if transpose_b else w_axes)
    x64, w64 = np.asarray(x, np.float64), np.asarray(w, np.float64)
    return x, w, (x64.T if transpose_a else x64), (w64.T if transpose_b else w64)


def products(layout, precision=HIGHEST):
    transpose_a, transpose_b = LAYOUTS[layout]

    def ours(x, w):
        return jtblas.matmul(x, w, transpose_a=transpose_a, transpose_b=transpose_b, precision=precision)

    def xla(x, w):
        return jnp.dot(x.T if transpose_a else x, w.T if transpose_b else w, precision=precision)

    return {"jtblas": ours, "xla": xla}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("pattern", sorted(JIT_PATTERNS))
def test_jit_product_and_grads_keep_jnp_dot_shardings(pattern, layout, rng):
    x, w, x64, w64 = jit_operands(rng, pattern, layout)
    y64 = x64 @ w64
    results, texts = {}, {}
    for name, product in products(layout).items():
        forward = jax.jit(product)
        grads = jax.jit(jax.value_and_grad(lambda a, b, f=product: jnp.sum(f(a, b) ** 2), argnums=(0, 1)))
        results[name] = (forward(x, w), *grads(x, w))
        texts[name] = [fn.lower(x, w).compile().as_text() for fn in (forward, grads)]
    (y, loss, (dx, dw)), (y_xla, _, (_, dw_xla)) = results["jtblas"], results["xla"]
    assert relative_error(y, y64) < TOLERANCE["float32"]
    assert relative_error(loss, np.sum(y64**2)) < TOLERANCE["float32"]
    # d/dx of sum(y²) is 2·y·wᵀ (stored transposed when x is).
    dx64, dw64 = 2 * y64 @ w64.T, 2 * x64.T @ y64
    assert relative_error(dx, dx64.T if LAYOUTS[layout][0] else dx64) < TOLERANCE["float32"]
    assert relative_error(dw, dw64.T if LAYOUTS[layout][1] else dw64) < TOLERANCE["float32"]
    assert y.sharding.is_equivalent_to(y_xla.sharding, 2), (y.sharding.spec, y_xla.sharding.spec)
    assert dw.sharding.is_equivalent_to(dw_xla.sharding, 2), (dw.sharding.spec, dw_xla.sharding.spec)
    for ours, theirs in zip(texts["jtblas"], texts["xla"]):
        extra = collectives(ours) - collectives(theirs)
        assert not extra, f"collectives jnp.dot does not need: {dict(extra)}"
        assert "CustomSPMDPartitioning" not in ours


def test_sharded_output_is_not_replicated(rng):
    """The failure this rule removes: a data-parallel product gathered and run on every device."""
    x, w, _, _ = jit_operands(rng, "data_parallel", "NN")
    y = jax.jit(jtblas.matmul)(x, w)
    assert y.sharding.spec[0] == "x"
    assert {s.data.shape for s in y.addressable_shards} == {(5, 36)}
    assert not collectives(jax.jit(jtblas.matmul).lower(x, w).compile().as_text())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rows_partial_products_are_summed_in_fp32(dtype, rng):
    """K sharded: each device's partial product is written in fp32, summed, rounded once."""
    x, w, x64, w64 = jit_operands(rng, "rows_psum", "NN", DTYPES[dtype])
    fn = jax.jit(jtblas.matmul)
    y = fn(x, w)
    assert y.dtype == x.dtype
    assert relative_error(y, x64 @ w64) < TOLERANCE[dtype]
    all_reduces = re.findall(r"= (\w+)\[[^\]]*\]\S* all-reduce(?:-start)?\(", fn.lower(x, w).compile().as_text())
    assert all_reduces == ["f32"]


def test_local_products_are_planned_on_local_shapes(rng, monkeypatch):
    """The partition callback traces the per-device product on each device's blocks (on the CPU
    that product is XLA's dot, `partitioning._xla_product`; on CUDA the kernel's launch)."""
    seen = []
    product = partitioning._xla_product

    def recording(a, b, static, **epilogue):
        seen.append((a.shape, b.shape, static.out_dtype))
        return product(a, b, static, **epilogue)

    monkeypatch.setattr(partitioning, "_xla_product", recording)
    for pattern in ("data_and_columns_2d", "rows_psum"):
        x, w, _, _ = jit_operands(rng, pattern, "NN", jnp.bfloat16, shape=(20, 36, 24))
        jax.jit(lambda a, b: jtblas.matmul(a, b)).lower(x, w).compile()
    # 2x2 mesh: rows over d (20/2), columns over m (36/2), bf16 out; rows_psum: K over x (24/4),
    # fp32 partial products.
    assert seen == [((1, 10, 24), (1, 24, 18), "bfloat16"), ((1, 20, 6), (1, 6, 36), "float32")]


def test_gspmd_partitioner_gives_the_same_shardings(rng):
    """With Shardy off, GSPMD's callbacks (`infer_sharding_from_operands`) place the result."""
    if not hasattr(jax.config, "jax_use_shardy_partitioner"):
        pytest.skip("this jax has no GSPMD partitioner")
    previous = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        for pattern in ("data_parallel", "columns", "rows_psum", "data_and_columns_2d"):
            x, w, x64, w64 = jit_operands(rng, pattern, "NT")
            ours, xla = (jax.jit(f)(x, w) for f in products("NT").values())
            assert ours.sharding.is_equivalent_to(xla.sharding, 2), (pattern, ours.sharding.spec)
            assert relative_error(ours, x64 @ w64) < TOLERANCE["float32"]
    finally:
        jax.config.update("jax_use_shardy_partitioner", previous)


def test_batched_dot_general_and_vmap_keep_the_batch_sharding(rng):
    mesh = mesh_1d()
    x = placed(jnp.asarray(rng.standard_normal((8, 3, 5)), jnp.float32), mesh, ("x",))
    w = placed(jnp.asarray(rng.standard_normal((8, 5, 6)), jnp.float32), mesh, ("x",))
    dims = (((2,), (1,)), ((0,), (0,)))
    want = np.einsum("bmk,bkn->bmn", np.asarray(x, np.float64), np.asarray(w, np.float64))
    for fn in (lambda a, b: jtblas.dot_general(a, b, dims, precision=HIGHEST),
               jax.vmap(lambda a, b: jtblas.matmul(a, b, precision=HIGHEST))):
        y = jax.jit(fn)(x, w)
        assert relative_error(y, want) < TOLERANCE["float32"]
        assert y.sharding.is_equivalent_to(NamedSharding(mesh, P("x")), 3)
        dx, dw = jax.jit(jax.grad(lambda a, b, f=fn: jnp.sum(f(a, b) ** 2), argnums=(0, 1)))(x, w)
        assert relative_error(dw, 2 * np.einsum("bmk,bmn->bkn", np.asarray(x, np.float64), want)) < 1e-4
        assert dw.sharding.is_equivalent_to(NamedSharding(mesh, P("x")), 3)
    # Leading batch dims of x over a shared w (they fold into M): the batch sharding stays.
    tokens = placed(jnp.asarray(rng.standard_normal((4, 3, 5)), jnp.float32), mesh, ("x",))
    y = jax.jit(lambda a, b: jtblas.matmul(a, b[0], precision=HIGHEST))(tokens, w)
    assert relative_error(y, np.asarray(tokens, np.float64) @ np.asarray(w[0], np.float64)) < TOLERANCE["float32"]
    assert y.sharding.is_equivalent_to(NamedSharding(mesh, P("x")), 3)


def test_unsharded_jit_is_unchanged(rng, monkeypatch):
    """On one device the rule lowers to the plain launch: the same compiled program."""
    x = jnp.asarray(rng.standard_normal((16, 24)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((24, 8)), jnp.float32)

    def compiled():
        return jax.jit(lambda a, b: jtblas.matmul(a, b) * 1.0).lower(x, w).compile().as_text()

    assert "custom_partitioning" in str(jax.make_jaxpr(jtblas.matmul)(x, w))
    wrapped = compiled()
    monkeypatch.setattr(partitioning, "_applies", lambda a, b: False)
    jax.clear_caches()  # traces of the custom_vjp are cached across calls
    assert "custom_partitioning" not in str(jax.make_jaxpr(jtblas.matmul)(x, w))
    plain = compiled()

    def instructions(text):  # the HLO instructions, without source metadata
        return [re.sub(r", metadata=\{[^}]*\}", "", line) for line in text.splitlines() if " = " in line]

    assert instructions(wrapped) == instructions(plain)
    assert "callback" in plain  # the interpreter's launch really runs


def test_shard_map_bodies_are_not_partitioned():
    def body(x, w):
        return jtblas.matmul(x, w)

    fn = jax.shard_map(body, mesh=mesh_1d(), in_specs=(P("x"), P()), out_specs=P("x"))
    x, w = jnp.ones((8, 4)), jnp.ones((4, 4))
    assert "custom_partitioning" not in str(jax.make_jaxpr(fn)(x, w))
    assert "custom_partitioning" in str(jax.make_jaxpr(jtblas.matmul)(x, w))


class TwoLayers(flax.linen.Module):
    dense: type = flax.linen.Dense

    @flax.linen.compact
    def __call__(self, x):
        x = jax.nn.relu(self.dense(16, precision=HIGHEST, name="up")(x))
        return self.dense(12, precision=HIGHEST, name="down")(x)


# Parameter placement per pattern: data parallel replicates them; tensor parallel splits `up`'s
# columns and `down`'s rows over x (the hidden activation stays split, one psum at the end).
MLP_PARAM_SPECS = {
    "data_parallel": {"up": {"kernel": P(), "bias": P()}, "down": {"kernel": P(), "bias": P()}},
    "tensor_parallel": {"up": {"kernel": P(None, "x"), "bias": P("x")},
                        "down": {"kernel": P("x", None), "bias": P()}},
}


@pytest.mark.parametrize("pattern", sorted(MLP_PARAM_SPECS))
def test_mlp_trained_sharded_matches_unsharded(pattern, rng):
    x = jnp.asarray(rng.standard_normal((16, 20)), jnp.float32)
    target = jnp.asarray(rng.standard_normal((16, 12)), jnp.float32)
    optimizer = optax.sgd(0.1)

    def train(model, params, x, target):
        def loss(params):
            return jnp.mean((model.apply(params, x) - target) ** 2)

        @jax.jit
        def step(params, state):
            value, grads = jax.value_and_grad(loss)(params)
            updates, state = optimizer.update(grads, state, params)
            return optax.apply_updates(params, updates), state, value

        state = optimizer.init(params)
        losses = []
        for _ in range(3):
            params, state, value = step(params, state)
            losses.append(value)
        return params, losses, step

    ours = TwoLayers(dense=jtblas.nn.Dense)
    params = ours.init(jax.random.key(0), x)
    reference, reference_losses, _ = train(TwoLayers(), params, x, target)
    mesh = mesh_1d()
    specs = {"params": MLP_PARAM_SPECS[pattern]}
    sharded = jax.tree.map(lambda p, s: jax.device_put(p, NamedSharding(mesh, s)), params, specs)
    x_spec = P("x") if pattern == "data_parallel" else P()
    xs, ts = (jax.device_put(a, NamedSharding(mesh, x_spec)) for a in (x, target))
    trained, losses, step = train(ours, sharded, xs, ts)
    for got, want in zip(jax.tree.leaves(trained), jax.tree.leaves(reference)):
        assert relative_error(got, np.asarray(want, np.float64)) < 1e-4
    np.testing.assert_allclose(losses, reference_losses, rtol=1e-4)
    for leaf, spec in zip(jax.tree.leaves(trained), jax.tree.leaves(specs, is_leaf=lambda s: isinstance(s, P))):
        assert leaf.sharding.is_equivalent_to(NamedSharding(mesh, spec), leaf.ndim), (leaf.sharding.spec, spec)
    # The step's collectives: no more than Flax's own layers need for the same placement.
    flax_step = train(TwoLayers(), jax.tree.map(jnp.copy, sharded), xs, ts)[2]
    state = optax.sgd(0.1).init(sharded)
    extra = (collectives(step.lower(sharded, state).compile().as_text())
             - collectives(flax_step.lower(sharded, state).compile().as_text()))
    assert not extra, dict(extra)


def test_cuda_partition_launches_the_kernel_planned_on_local_shapes(monkeypatch):
    """The partitioned computation for a CUDA target (jax-triton's call, on a machine without a
    GPU): the kernel's launch traced on one device's blocks, the model asked with the local M, N
    and K, the fp32 partial products summed over K's axis."""
    require_jax_triton()
    asked = record_planned_problems(monkeypatch)
    mesh = mesh_2d()
    static = ops._Static(transpose_a=False, transpose_b=True, input_precision="tf32", out_dtype="bfloat16",
                         config=None)
    layout = partitioning._Layout(transpose_a=False, transpose_b=True, broadcast_a=False, broadcast_b=False)
    # a [1, M, K]: M over d, K over m; b stored [1, N, K]: K over m.
    a = jax.ShapeDtypeStruct((1, 512, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P(None, "d", "m")))
    b = jax.ShapeDtypeStruct((1, 384, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P(None, None, "m")))
    c = jax.ShapeDtypeStruct((1, 512, 384), jnp.bfloat16, sharding=NamedSharding(mesh, P()))
    with launch.forced_backend("cuda", compute_capability=90):
        _, lower, out_sharding, (a_sharding, b_sharding) = partitioning._partition(
            ops._launch_batched, layout, static, mesh, (a, b), c)
        local = [jax.ShapeDtypeStruct(shape, jnp.bfloat16) for shape in ((1, 256, 128), (1, 384, 128))]
        jaxpr = str(jax.make_jaxpr(lower, axis_env=[("d", 2), ("m", 2)])(*local))
    assert out_sharding.spec == P(None, "d", None) and a_sharding.spec == P(None, "d", "m")
    assert b_sharding.spec == P(None, None, "m")
    assert [(p.m, p.n, p.k, p.layout, p.out_dtype) for p in asked] == [(256, 384, 128, "NT", "float32")]
    assert "triton_kernel_call" in jaxpr and "psum" in jaxpr


@pytest.mark.parametrize("in_axes", [(0, None), (None, 0)], ids=["batched_x", "batched_w"])
def test_vmap_over_one_operand_keeps_its_batch_sharding(in_axes, rng):
    """One operand batched (sharded over its batch), the other shared: the shared one's batch of
    one is broadcast (a factor that is never sharded)."""
    mesh = mesh_1d()
    x = jnp.asarray(rng.standard_normal((8, 6, 10) if in_axes[0] == 0 else (6, 10)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((8, 10, 12) if in_axes[1] == 0 else (10, 12)), jnp.float32)
    x, w = (placed(a, mesh, ("x",) if a.ndim == 3 else ()) for a in (x, w))
    fn = jax.jit(jax.vmap(lambda a, b: jtblas.matmul(a, b, precision=HIGHEST), in_axes=in_axes))
    y = fn(x, w)
    assert relative_error(y, np.asarray(x, np.float64) @ np.asarray(w, np.float64)) < TOLERANCE["float32"]
    assert y.sharding.is_equivalent_to(NamedSharding(mesh, P("x")), 3), y.sharding.spec
    assert not collectives(fn.lower(x, w).compile().as_text())
