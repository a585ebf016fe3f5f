"""jtblas's products under `jax.jit` with sharded operands: a partitioning rule for the launch.

XLA cannot look inside a Triton launch (a custom call, or a `pure_callback` on the CPU): without a
rule it gathers both operands onto every device, runs the whole product there and returns it
replicated. `partitioned_launch` wraps the per-device product (`ops._launch_batched`: model
choice, repacking, kernel launches, all static given the shapes) in
`jax.experimental.custom_partitioning`, so that each device runs the kernel on its own block:

- Shardy (JAX's default partitioner) propagates shardings through the rule
  `b m k, b k n -> b m n` (stored layouts permute the operand dimensions; `k` a reduction
  factor; a batch of one broadcast against the other operand's batch needs replication);
- XLA's SPMD partitioner then calls `_partition` with the propagated shardings; it settles one
  set of mesh axes per factor (`_factor_axes`) and returns the local computation, traced on the
  local shapes: the model plans each device's product with its own M, N and K;
- under GSPMD (`jax_use_shardy_partitioner=False`) the callbacks `infer_sharding_from_operands`
  (the same choice of axes as `_partition`'s) and `propagate_user_sharding` (the user's
  sharding) stand in for the rule.

A contraction sharded over K leaves each device a partial product: the local kernel writes it in
fp32 and the devices add them with a `psum` in fp32, then cast once to the output dtype.
A product's epilogue arrays (`jtblas.ops`: a bias [B, N], a residual [B, M, N]) are partitioned
with it, the bias like N and the residual like the result, and each device's launch applies the
epilogue to its block; where K is sharded, XLA applies it after the `psum` instead (the kernel's
epilogue would add the bias once per device). That is
the single-device product's rounding (fp32 accumulation, one rounding at the end, as the split-K
reduction does), where a sum of 16-bit partials would round once per device; it moves twice the
bytes of a 16-bit all-reduce.
A gated product (`Problem.gated`: B's N columns a gate's then an up projection's) pairs columns
N/2 apart in each tile, so its N is never split: B (and the bias) are gathered along N where they
are sharded, and its rows, batch and K are partitioned as any product's.

Not applied inside `shard_map` (the body is already per device, typed by `jtblas.sharding`),
outside a trace (eager operands run where they are), or with a single device. On the CPU
backend each device's product is XLA's dot (`_xla_product`): JAX cannot run the interpreter's
host callback inside a partitioned computation.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental.custom_partitioning import ArrayMapping, SdyShardingRule, custom_partitioning
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jtblas import launch, sharding
from jtblas.epilogue import epilogue_reference

_FP32 = "float32"
# A mesh axis sharding a dimension of the product: a name, or a tuple of names (several axes).
Axes = tuple[Any, ...]


class _Layout(NamedTuple):
    """The static shape facts a rule depends on: stored layouts and which batch is broadcast."""

    transpose_a: bool
    transpose_b: bool
    broadcast_a: bool  # a's batch is 1 while b's is larger (read with batch stride 0)
    broadcast_b: bool
    # The epilogue's arrays: absent, batched (B) or broadcast (a batch of 1 against B).
    has_bias: bool = False
    broadcast_bias: bool = False
    has_residual: bool = False
    broadcast_residual: bool = False
    # A gated product (`jtblas.config.Problem.gated`): its tiles pair B's columns N/2 apart, so N
    # is never split across devices (B and the bias are gathered along it where they are split).
    gated: bool = False


def partitioned_launch(local: Callable[..., jax.Array], a: jax.Array, b: jax.Array, static: Any, *,
                       bias: jax.Array | None = None, residual: jax.Array | None = None) -> jax.Array:
    """`local(a, b, static, bias=bias, residual=residual)` (a [Ba, ., .], b [Bb, ., .], bias
    [Bc, N], residual [Br, M, N] -> [B, M, N]), partitioned over the mesh when traced under `jit`
    with several devices: each device runs `local` on its blocks.

    `static` is the product's `ops._Static` (its `transpose_a`, `transpose_b`, `out_dtype` and
    epilogue fields are read); elsewhere (eager, inside `shard_map`, one device, an empty operand)
    this is `local(a, b, static, bias=bias, residual=residual)`.
    """
    if not _applies(a, b):
        return local(a, b, static, bias=bias, residual=residual)
    batch = max(x.shape[0] for x in (a, b, bias, residual) if x is not None)
    layout = _Layout(static.transpose_a, static.transpose_b,
                     broadcast_a=a.shape[0] < batch, broadcast_b=b.shape[0] < batch,
                     has_bias=bias is not None, broadcast_bias=bias is not None and bias.shape[0] < batch,
                     has_residual=residual is not None,
                     broadcast_residual=residual is not None and residual.shape[0] < batch,
                     gated=static.gated)
    extras = [x for x in (bias, residual) if x is not None]
    return _partitioned(local, layout)(a, b, *extras, static)


def applies(a: jax.Array, b: jax.Array) -> bool:
    """Whether `partitioned_launch` partitions this launch (under `jit`, several devices, outside
    `shard_map`, no empty operand): where it does, `jtblas.ops` applies a product's epilogue
    (bias, activation, residual) after it with XLA, so that a K-sharded product gets it after the
    cross-device sum."""
    return _applies(a, b)


def _applies(a: jax.Array, b: jax.Array) -> bool:
    if not any(isinstance(x, jax.core.Tracer) for x in (a, b)):
        return False
    if a.size == 0 or b.size == 0 or sharding.in_shard_map():
        return False
    return jax.device_count() > 1


@functools.cache
def _partitioned(local: Callable[..., jax.Array], layout: _Layout) -> Any:
    """`local` as a custom_partitioning function of (a, b, [bias], [residual], static) for one
    layout."""
    arrays = 2 + layout.has_bias + layout.has_residual

    def product(*args: Any) -> jax.Array:
        bias, residual = _epilogue_arrays(layout, args[2:arrays])
        return local(args[0], args[1], args[arrays], bias=bias, residual=residual)

    wrapped = custom_partitioning(product, static_argnums=(arrays,))

    def partition(static, mesh, arg_shapes, result_shape):
        return _partition(local, layout, static, mesh, arg_shapes, result_shape)

    def infer_result_sharding(static, mesh, arg_shapes, result_shape):
        return _result_sharding(mesh, _factor_axes(layout, mesh, arg_shapes, None))

    def propagate_user_sharding(static, mesh, user_shape):
        return user_shape.sharding  # the result takes its user's sharding; operands follow

    wrapped.def_partition(
        partition=partition,
        infer_sharding_from_operands=infer_result_sharding,
        propagate_user_sharding=propagate_user_sharding,
        sharding_rule=_sharding_rule(layout),
    )
    return wrapped


def _epilogue_arrays(layout: _Layout, extras: Any) -> tuple[Any, Any]:
    """(bias, residual) from the launch's arrays after a and b (None for each absent one)."""
    extras = list(extras)
    bias = extras.pop(0) if layout.has_bias else None
    residual = extras.pop(0) if layout.has_residual else None
    return bias, residual


def _sharding_rule(layout: _Layout) -> SdyShardingRule:
    """The Shardy rule of one launch: `b m k, b k n -> b m n` in the stored layouts, k reduced
    (and `b n` for a bias, `b m n` for a residual)."""
    rows_a = ("k", "m") if layout.transpose_a else ("m", "k")
    rows_b = ("n", "k") if layout.transpose_b else ("k", "n")
    # A broadcast batch (size 1) is its own factor, which cannot be sharded.
    batch_a = "p" if layout.broadcast_a else "b"
    batch_b = "q" if layout.broadcast_b else "b"
    broadcasts = (("p", layout.broadcast_a), ("q", layout.broadcast_b),
                  ("r", layout.has_bias and layout.broadcast_bias),
                  ("s", layout.has_residual and layout.broadcast_residual))
    replicated = tuple(f for f, broadcast in broadcasts if broadcast)
    # A gated product's result has half of B's columns: its own factor "o", and neither is split.
    out_n = "o" if layout.gated else "n"
    if layout.gated:
        replicated += ("n", "o")
    epilogue = []
    if layout.has_bias:
        epilogue.append(ArrayMapping("r" if layout.broadcast_bias else "b", "n"))
    if layout.has_residual:
        epilogue.append(ArrayMapping("s" if layout.broadcast_residual else "b", "m", out_n))
    return SdyShardingRule(
        operand_mappings=(ArrayMapping(batch_a, *rows_a), ArrayMapping(batch_b, *rows_b), *epilogue),
        result_mappings=(ArrayMapping("b", "m", out_n),),
        reduction_factors=("k",),
        need_replication_factors=replicated,
    )


class _FactorAxes(NamedTuple):
    """The mesh axes sharding each factor of one product (empty: replicated)."""

    b: Axes
    m: Axes
    n: Axes
    k: Axes


def _dim_axes(arg_sharding: Any, ndim: int) -> list[Axes]:
    """Per dimension, the mesh axes a NamedSharding splits it over."""
    spec = tuple(getattr(arg_sharding, "spec", None) or ())
    spec = spec + (None,) * (ndim - len(spec))
    return [() if s is None else tuple(s) if isinstance(s, (tuple, list)) else (s,) for s in spec]


def _factor_axes(layout: _Layout, mesh: Any, arg_shapes: Any, result_shape: Any) -> _FactorAxes:
    """One set of mesh axes per factor. The result's sharding (the partitioner's choice, when
    given) comes first, then the operands' for the factors it leaves free: a mesh axis serves one
    factor only (after the result's, batch, then M, then N, then K keep it: an FSDP weight sharded
    over the rows' axis is gathered). K is split only into equal blocks (padding would add
    garbage to the sums)."""
    a, b = arg_shapes[:2]
    dims_a, dims_b = _dim_axes(a.sharding, 3), _dim_axes(b.sharding, 3)
    m_a, k_a = (dims_a[2], dims_a[1]) if layout.transpose_a else (dims_a[1], dims_a[2])
    k_b, n_b = (dims_b[2], dims_b[1]) if layout.transpose_b else (dims_b[1], dims_b[2])
    batch = (() if layout.broadcast_a else dims_a[0]) or (() if layout.broadcast_b else dims_b[0])
    from_operands = {"b": batch, "m": m_a, "n": n_b, "k": k_a or k_b}
    # The result's sharding is the one its users were planned with (jnp.dot's dx of an FSDP layer
    # keeps the weight's split columns and gathers the cotangent instead): a product placed
    # otherwise costs a reshard after it.
    from_result = dict(zip("bmn", _dim_axes(result_shape.sharding, 3))) if result_shape is not None else {}
    used: set[Any] = set()
    chosen: dict[str, Axes] = {}
    for factor, axes in [*from_result.items(), *from_operands.items()]:
        if chosen.get(factor):
            continue
        chosen[factor] = tuple(axis for axis in axes if axis not in used)
        used.update(chosen[factor])
    k_size = a.shape[1] if layout.transpose_a else a.shape[2]
    if k_size % _axes_size(mesh, chosen["k"]):
        chosen["k"] = ()
    if layout.gated:
        chosen["n"] = ()
    return _FactorAxes(**chosen)


def _axes_size(mesh: Any, axes: Axes) -> int:
    return math.prod(mesh.shape[axis] for axis in axes)


def _spec(*dims: Axes) -> P:
    return P(*(None if not axes else axes[0] if len(axes) == 1 else axes for axes in dims))


def _result_sharding(mesh: Any, axes: _FactorAxes) -> NamedSharding:
    return NamedSharding(mesh, _spec(axes.b, axes.m, axes.n))


def _operand_shardings(layout: _Layout, mesh: Any, axes: _FactorAxes) -> tuple[NamedSharding, ...]:
    rows_a = (axes.k, axes.m) if layout.transpose_a else (axes.m, axes.k)
    rows_b = (axes.n, axes.k) if layout.transpose_b else (axes.k, axes.n)
    batch_a = () if layout.broadcast_a else axes.b
    batch_b = () if layout.broadcast_b else axes.b
    shardings = [NamedSharding(mesh, _spec(batch_a, *rows_a)), NamedSharding(mesh, _spec(batch_b, *rows_b))]
    if layout.has_bias:  # sharded like N
        shardings.append(NamedSharding(mesh, _spec(() if layout.broadcast_bias else axes.b, axes.n)))
    if layout.has_residual:  # sharded like the result
        shardings.append(NamedSharding(mesh, _spec(() if layout.broadcast_residual else axes.b, axes.m, axes.n)))
    return tuple(shardings)


def _partition(local, layout, static, mesh, arg_shapes, result_shape):
    """XLA's SPMD partitioner callback: the shardings the launch runs with and its local
    computation (traced on local shapes, so the model plans each device's own product)."""
    axes = _factor_axes(layout, mesh, arg_shapes, result_shape)
    out_dtype = static.out_dtype
    if launch.target_platform([])[0] == "cpu":
        # JAX cannot run host callbacks (the CPU backend's interpreter launch) inside a
        # partitioned computation: it compiles the program with the callbacks known before the
        # partitioner runs. XLA's dot stands in, with the kernel's numerics.
        local = _xla_product

    def lower(a: jax.Array, b: jax.Array, *extras: jax.Array) -> jax.Array:
        bias, residual = _epilogue_arrays(layout, extras)
        if not axes.k:
            return local(a, b, static, bias=bias, residual=residual)
        # Partial products over K: summed in fp32, rounded once (the module docstring says why),
        # the epilogue applied after the sum.
        partial = local(a, b, static._replace(out_dtype=_FP32, activation="", bias_dtype="", residual_dtype="",
                                              gated=False))
        total = jax.lax.psum(partial, axes.k)
        return _epilogue(total, static, bias, residual).astype(jnp.dtype(out_dtype))

    return mesh, lower, _result_sharding(mesh, axes), _operand_shardings(layout, mesh, axes)


def _xla_product(a: jax.Array, b: jax.Array, static: Any, *, bias: jax.Array | None = None,
                 residual: jax.Array | None = None) -> jax.Array:
    """`ops._launch_batched`'s product by XLA: the operands in the compute dtype, fp32
    accumulation, the epilogue in fp32, one rounding to the output."""
    compute = jnp.dtype(static.compute_dtype or a.dtype)
    a = jnp.swapaxes(a, 1, 2) if static.transpose_a else a
    b = jnp.swapaxes(b, 1, 2) if static.transpose_b else b
    precision = jax.lax.Precision.HIGHEST if static.input_precision == "ieee" else None
    product = jnp.matmul(a.astype(compute), b.astype(compute), precision=precision,
                         preferred_element_type=jnp.float32)
    return _epilogue(product, static, bias, residual).astype(jnp.dtype(static.out_dtype))


def _epilogue(product: jax.Array, static: Any, bias: jax.Array | None, residual: jax.Array | None) -> jax.Array:
    """`epilogue_reference` of the fp32 [B, M, N] product with a bias [B, N]: the epilogue
    the kernel fuses, by XLA."""
    if bias is None and residual is None and not static.activation and not static.gated:
        return product
    return epilogue_reference(product, bias=None if bias is None else bias[:, None, :],
                              activation=static.activation, residual=residual, gated=static.gated)
