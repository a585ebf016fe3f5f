"""jtblas's products in sharded programs: their types under `shard_map`.

Under `jax.shard_map` with `check_vma` (the default) every value carries the set of manual mesh
axes it varies over (its "vma"); JAX's own ops give a result the union of their operands' sets
and, for an operand that varies over fewer axes, insert a `pcast(..., to="varying")` whose
transpose is the `psum` that makes a replicated weight's gradient the sum over the devices.

A Triton launch is a custom call (jax-triton) or a `pure_callback` (the interpreter), whose
result types carry no such set: JAX would take a product of a batch-sharded `x` and a replicated
`w` for replicated, accept `out_specs=P()` for it and add no `psum` to `w`'s gradient. Hence:

- `match_varying` casts the operands of a product to the union of their sets before the
  `custom_vjp` (as `jnp.dot` does), so the backward pass returns cotangents of the operands'
  types and the cast's transpose sums the replicated operand's gradient;
- `vary_like` gives a launch's results that union (a `pcast` that changes the type only: the
  values are each device's own, as the kernel computed them);
- `in_shard_map` tells `ops.matmul` to trace its `custom_vjp` inside a `jax.jit`: eager
  `shard_map` cannot run a `custom_vjp` with symbolic zeros (JAX raises NotImplementedError),
  while inside `jit` it is an ordinary traced call.

Without `check_vma` (or outside `shard_map`) every value varies over nothing and these are
identities.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax


def varying_axes(x: Any) -> frozenset[Any]:
    """The manual mesh axes `x` varies over (empty outside `shard_map` or without `check_vma`)."""
    aval = jax.typeof(x)
    vma = getattr(aval, "vma", None)  # jax releases that stored the set on the aval itself
    if vma is None:  # jax 0.10 and later: the aval's ManualAxisType
        vma = getattr(getattr(aval, "mat", None), "varying", None)
    return frozenset(vma or ())


def _pcast_to_varying(x: Any, axes: tuple[Any, ...]) -> Any:
    if hasattr(jax.lax, "pcast"):
        return jax.lax.pcast(x, axes, to="varying")
    return jax.lax.pvary(x, axes)  # jax releases before `pcast`


def cast_to_varying(x: Any, axes: frozenset[Any]) -> Any:
    """`x` typed as varying over `axes` too (a type cast: the value is unchanged)."""
    missing = tuple(sorted(axes - varying_axes(x), key=str))
    return _pcast_to_varying(x, missing) if missing else x


def match_varying(*arrays: Any) -> tuple[Any, ...]:
    """The arrays, each typed as varying over the union of their manual axes (`jnp.dot`'s rule)."""
    union = frozenset().union(*map(varying_axes, arrays))
    return tuple(cast_to_varying(x, union) for x in arrays)


def vary_like(results: Sequence[Any], operands: Sequence[Any]) -> list[Any]:
    """A launch's `results` typed as varying over the union of its `operands`' manual axes."""
    union = frozenset().union(*map(varying_axes, operands))
    return [cast_to_varying(r, union) for r in results]


def in_shard_map() -> bool:
    """Whether the caller is tracing inside `shard_map` (the current mesh has manual axes)."""
    mesh = jax.sharding.get_abstract_mesh()
    return bool(getattr(mesh, "manual_axes", ()))
