"""`jtblas.dot_general`: `jax.lax.dot_general`'s dimension numbers mapped onto `jtblas.matmul`.

A contraction the kernel covers (one contracting dimension per side, any batch dimensions,
fp32/fp16/bf16 operands of one dtype) becomes transpose flags, free reshapes and, for batch
dimensions, the kernel's batch grid axis (through `jax.vmap` of `matmul`, whose vmap rule
launches it). Everything else goes to `jax.lax.dot_general` unchanged.
"""

from __future__ import annotations

import logging
import math
from typing import Any, NamedTuple

import jax
import numpy as np
from jax import lax

from jtblas.config import OPERAND_DTYPE_BYTES, OUTPUT_DTYPE_BYTES
from jtblas.operands import is_static_dim
from jtblas.ops import matmul
from jtblas.precision import input_precision

_log = logging.getLogger(__name__)


def dot_general(
    lhs: Any,
    rhs: Any,
    dimension_numbers: Any,
    precision: Any = None,
    preferred_element_type: Any = None,
    *,
    out_sharding: Any = None,
) -> jax.Array:
    """General dot product by jtblas's kernel: a drop-in for :func:`jax.lax.dot_general`.

    Same signature, arguments, result shape and dtype as ``jax.lax.dot_general`` (output
    dimensions: batch, then lhs free, then rhs free). The jtblas kernel (fp32 accumulation,
    model-chosen config, custom VJP, batched vmap) runs when

    - ``lhs`` and ``rhs`` are arrays of one dtype among float32, float16, bfloat16;
    - there is exactly one contracting dimension on each side (batch dimensions: any number);
    - ``preferred_element_type`` is None or one of those three dtypes;
    - ``precision`` is None, a ``jax.lax.Precision`` (or its name) or a pair of them;
    - ``out_sharding`` is None.

    Everything else (integers, complex, float64, several contracting dimensions, mixed dtypes,
    ``DotAlgorithm`` precisions, an output sharding, symbolic dimensions of a shape-polymorphic
    ``jax.export``) calls ``jax.lax.dot_general`` unchanged, which also reports invalid dimension
    numbers. (``jtblas.matmul`` instead raises for symbolic dimensions: the kernel's grid and
    config are chosen from static sizes.)

    Layouts: batch dimensions leading (in ``dimension_numbers`` order) and the contracting
    dimension last or right after the batch dimensions (rhs: right after the batch dimensions,
    or last) are read in place, through transpose flags and free reshapes. Any other layout (e.g.
    a contracting dimension in the middle of the free dimensions, or batch dimensions that are
    not leading) is first transposed into the first of those layouts: an XLA copy of that
    operand, then the kernel. It does not fall back.

    Args:
      lhs: an array.
      rhs: an array.
      dimension_numbers: ``((lhs_contracting_dims, rhs_contracting_dims),
        (lhs_batch_dims, rhs_batch_dims))``, as for ``jax.lax.dot_general``.
      precision: None, a ``jax.lax.Precision`` or a pair; for fp32 operands HIGHEST means full
        fp32 products, anything else tf32 tensor cores (fp16/bf16 ignore it).
      preferred_element_type: the output dtype (default: the operands' dtype).
      out_sharding: an output sharding; not None falls back to ``jax.lax.dot_general``.

    Returns:
      An array of shape ``batch + lhs free + rhs free`` dims, as ``jax.lax.dot_general``.
    """
    plan = _plan(lhs, rhs, dimension_numbers, precision, preferred_element_type, out_sharding)
    if plan is None:
        return lax.dot_general(
            lhs, rhs, dimension_numbers, precision, preferred_element_type, out_sharding=out_sharding
        )
    if plan.lhs_perm is not None:
        lhs = lax.transpose(lhs, plan.lhs_perm)
    if plan.rhs_perm is not None:
        rhs = lax.transpose(rhs, plan.rhs_perm)
    batch, m, k, n = math.prod(plan.batch_shape), plan.m, plan.k, plan.n
    lhs = lhs.reshape(batch, k, m) if plan.transpose_a else lhs.reshape(batch, m, k)  # free
    rhs = rhs.reshape(batch, n, k) if plan.transpose_b else rhs.reshape(batch, k, n)

    def product(a: jax.Array, b: jax.Array) -> jax.Array:
        return matmul(
            a,
            b,
            transpose_a=plan.transpose_a,
            transpose_b=plan.transpose_b,
            precision=precision,
            preferred_element_type=preferred_element_type,
        )

    # Batch dimensions: vmap over the folded batch, whose rule launches the batch grid axis.
    out = jax.vmap(product)(lhs, rhs) if plan.batch_shape else product(lhs[0], rhs[0])
    return out.reshape(plan.out_shape)


class _ContractionPlan(NamedTuple):
    """How a supported contraction maps onto `matmul`."""

    lhs_perm: tuple[int, ...] | None  # a transpose (copy) into a readable layout, or None
    rhs_perm: tuple[int, ...] | None
    transpose_a: bool  # lhs is [batch..., K, free...] rather than [batch..., free..., K]
    transpose_b: bool  # rhs is [batch..., free..., K] rather than [batch..., K, free...]
    batch_shape: tuple[int, ...]
    m: int
    n: int
    k: int
    out_shape: tuple[int, ...]


def _plan(lhs, rhs, dimension_numbers, precision, preferred_element_type, out_sharding) -> _ContractionPlan | None:
    """The mapping onto the kernel, or None (with the reason logged) for `lax.dot_general`."""
    reason = _unsupported(lhs, rhs, precision, preferred_element_type, out_sharding)
    dims = None if reason else _dimensions(lhs.ndim, rhs.ndim, dimension_numbers)
    if dims is None:
        reason = reason or f"dimension numbers {dimension_numbers} (not one contracting dim per side)"
    else:
        (lc, rc), (lb, rb) = dims
        if any(lhs.shape[i] != rhs.shape[j] for i, j in zip((lc, *lb), (rc, *rb))):
            reason = "mismatched contracting or batch sizes"  # lax.dot_general raises with details
    if reason:
        _log.debug("jtblas.dot_general falls back to lax.dot_general: %s", reason)
        return None
    lhs_free = [d for d in range(lhs.ndim) if d != lc and d not in lb]
    rhs_free = [d for d in range(rhs.ndim) if d != rc and d not in rb]
    transpose_a, lhs_perm = _layout(lhs.ndim, [*lb, *lhs_free, lc], [*lb, lc, *lhs_free])
    transpose_b, rhs_perm = _layout(rhs.ndim, [*rb, rc, *rhs_free], [*rb, *rhs_free, rc])
    if lhs_perm or rhs_perm:
        _log.debug("jtblas.dot_general: transposing an operand (a copy) for %s", dimension_numbers)
    batch_shape = tuple(lhs.shape[d] for d in lb)
    lhs_free_shape = tuple(lhs.shape[d] for d in lhs_free)
    rhs_free_shape = tuple(rhs.shape[d] for d in rhs_free)
    return _ContractionPlan(
        lhs_perm=lhs_perm,
        rhs_perm=rhs_perm,
        transpose_a=transpose_a,
        transpose_b=transpose_b,
        batch_shape=batch_shape,
        m=math.prod(lhs_free_shape),
        n=math.prod(rhs_free_shape),
        k=lhs.shape[lc],
        out_shape=(*batch_shape, *lhs_free_shape, *rhs_free_shape),
    )


def _unsupported(lhs, rhs, precision, preferred_element_type, out_sharding) -> str | None:
    """Why the kernel cannot run these operands and options, or None if it can."""
    if not all(isinstance(x, (jax.Array, np.ndarray)) for x in (lhs, rhs)):
        return "an operand is not an array"
    if not all(is_static_dim(d) for x in (lhs, rhs) for d in x.shape):
        return f"a symbolic dimension in {lhs.shape} or {rhs.shape} (jax.export shape polymorphism)"
    if out_sharding is not None:
        return "out_sharding is given"
    if lhs.dtype != rhs.dtype:
        return f"mixed dtypes {lhs.dtype} and {rhs.dtype}"
    if np.dtype(lhs.dtype).name not in OPERAND_DTYPE_BYTES:
        return f"dtype {lhs.dtype}"
    if preferred_element_type is not None:
        try:
            out_name = np.dtype(preferred_element_type).name
        except TypeError:
            return f"preferred_element_type {preferred_element_type!r}"
        if out_name not in OUTPUT_DTYPE_BYTES:
            return f"preferred_element_type {out_name}"
    try:
        input_precision(precision)
    except (ValueError, TypeError):
        return f"precision {precision!r}"
    return None


def _dimensions(lhs_ndim: int, rhs_ndim: int, dimension_numbers: Any):
    """((lc, rc), (lb, rb)) with one contracting dim per side, non-negative and distinct; None if
    the dimension numbers are anything else (lax.dot_general handles or rejects those)."""
    try:
        (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
        lhs_contract, rhs_contract = tuple(map(int, lhs_contract)), tuple(map(int, rhs_contract))
        lhs_batch, rhs_batch = tuple(map(int, lhs_batch)), tuple(map(int, rhs_batch))
    except (TypeError, ValueError):
        return None
    if len(lhs_contract) != 1 or len(rhs_contract) != 1 or len(lhs_batch) != len(rhs_batch):
        return None
    for ndim, dims in ((lhs_ndim, (*lhs_contract, *lhs_batch)), (rhs_ndim, (*rhs_contract, *rhs_batch))):
        if len(set(dims)) != len(dims) or not all(0 <= d < ndim for d in dims):
            return None
    return (lhs_contract[0], rhs_contract[0]), (lhs_batch, rhs_batch)


def _layout(ndim: int, plain: list[int], transposed: list[int]) -> tuple[bool, tuple[int, ...] | None]:
    """(transposed?, permutation or None): an operand already in one of the two readable orders
    of its dimensions is read in place; otherwise it is transposed into the `plain` order."""
    identity = list(range(ndim))
    if plain == identity:
        return False, None
    if transposed == identity:
        return True, None
    return False, tuple(plain)
