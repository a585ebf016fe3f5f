"""`jtblas.matmul`: argument checks, leading-dim folding, layouts as strides, config choice.

Precedence of the configuration: an explicit `config=` is used as given (after checking it fits
the GPU); otherwise the analytical model picks one at trace time (`jtblas.select`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jtblas import hardware, launch
from jtblas.config import OPERAND_DTYPE_BYTES, Config, Problem
from jtblas.kernels.matmul import matmul_kernel
from jtblas.model import resources

_INDEX_32_LIMIT = 2**31
# Vector loads are at most 16 bytes; a stride alignment hint beyond that buys nothing.
_MAX_ALIGN_BYTES = 16


def matmul(
    a: jax.Array,
    b: jax.Array,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    precision: Any = None,
    preferred_element_type: Any = None,
    config: Config | None = None,
) -> jax.Array:
    """C = op(a) · op(b) by jtblas's Triton kernel, with fp32 accumulation.

    Args:
      a: [..., M, K] (or [..., K, M] with `transpose_a`); leading dims fold into M. With
        `transpose_a`, `a` must be 2-D.
      b: [K, N] (or [N, K] with `transpose_b`).
      transpose_a, transpose_b: the operand is stored transposed; it is read through strides,
        never copied.
      precision: `jax.lax.Precision` (or a pair, or a string) for fp32 operands: DEFAULT/HIGH/None
        use tf32 tensor cores, HIGHEST uses full fp32. Ignored for fp16/bf16.
      preferred_element_type: output dtype; default the operands' dtype.
      config: a `jtblas.Config` to force; None asks the model.

    Returns:
      [..., M, N] in `preferred_element_type`.
    """
    problem, shape = make_problem(
        a, b, transpose_a=transpose_a, transpose_b=transpose_b, precision=precision,
        preferred_element_type=preferred_element_type,
    )
    if config is not None and not isinstance(config, Config):
        raise TypeError(f"jtblas.matmul: config must be a jtblas.Config or None, got {type(config).__name__}")
    if problem is None:  # an empty product: no kernel to launch
        out_dtype = jnp.dtype(preferred_element_type or a.dtype)
        return jnp.zeros(shape.out_shape, out_dtype)
    m, n, k = problem.m, problem.n, problem.k
    if config is None:
        from jtblas.model import select_for_problem  # the model is imported when first needed

        config = select_for_problem(problem, hardware.detect())
    else:
        check_config(config, problem)

    a2 = a.reshape(k, m) if transpose_a else a.reshape(m, k)
    out = _launch_gemm(a2, b, problem, config)
    return out.reshape(shape.out_shape)


class LaunchSpec(NamedTuple):
    """Everything but the operands that one launch of `matmul_kernel` needs."""

    grid: tuple[int, int]
    scalars: tuple[int, ...]  # M, N, K, the six matrix strides, the three batch strides
    num_warps: int
    num_stages: int
    metaparams: dict[str, Any]


def launch_spec(
    problem: Problem, config: Config, *, batch: int = 1, batch_strides: tuple[int, int, int] = (0, 0, 0)
) -> LaunchSpec:
    """Grid, scalar arguments and meta-parameters of `matmul_kernel` for dense row-major operands
    (A [M, K] or [K, M] when transposed, B [K, N] or [N, K], C [M, N]); shared by `matmul` and the
    benchmark, which launches the same kernel on torch tensors."""
    m, n, k = problem.m, problem.n, problem.k
    stride_am, stride_ak = (1, m) if problem.transpose_a else (k, 1)
    stride_bk, stride_bn = (1, k) if problem.transpose_b else (n, 1)
    element = problem.operand_bytes
    tiles = math.ceil(m / config.block_m) * math.ceil(n / config.block_n)
    biggest = max(m * k, k * n, m * n) * batch
    return LaunchSpec(
        grid=(tiles, batch),
        scalars=(m, n, k, stride_am, stride_ak, stride_bk, stride_bn, n, 1, *batch_strides),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        metaparams=dict(
            BLOCK_M=config.block_m,
            BLOCK_N=config.block_n,
            BLOCK_K=config.block_k,
            GROUP_M=config.group_m,
            INPUT_PRECISION=problem.input_precision,
            EVEN_K=k % config.block_k == 0,
            INDEX_64=biggest >= _INDEX_32_LIMIT,
            ALIGN_AM=stride_alignment(stride_am, element),
            ALIGN_AK=stride_alignment(stride_ak, element),
            ALIGN_BK=stride_alignment(stride_bk, element),
            ALIGN_BN=stride_alignment(stride_bn, element),
        ),
    )


def _launch_gemm(a2: jax.Array, b: jax.Array, problem: Problem, config: Config) -> jax.Array:
    spec = launch_spec(problem, config)
    return launch.launch(
        matmul_kernel,
        grid=spec.grid,
        args=[a2, b, *spec.scalars],
        out_shape=jax.ShapeDtypeStruct((problem.m, problem.n), jnp.dtype(problem.out_dtype)),
        num_warps=spec.num_warps,
        num_stages=spec.num_stages,
        metaparams=spec.metaparams,
    )


def stride_alignment(stride: int, element_bytes: int) -> int:
    """Largest power of two (elements, at most 16 bytes' worth) dividing `stride`; 1 for a unit
    stride, which needs no hint."""
    limit = _MAX_ALIGN_BYTES // element_bytes
    align = 1
    while stride != 1 and align < limit and stride % (2 * align) == 0:
        align *= 2
    return align


def make_problem(
    a: Any,
    b: Any,
    *,
    transpose_a: bool,
    transpose_b: bool,
    precision: Any,
    preferred_element_type: Any,
) -> tuple[Problem | None, GemmShape]:
    """Checks the operands; returns the kernel's `Problem` (None when M, N or K is 0) and the
    sizes, with the batch shape that folds into M.

    Raises TypeError for non-arrays and unsupported dtypes, ValueError for bad ranks and
    mismatched contracting dimensions.
    """
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, (jax.Array, np.ndarray)):
            raise TypeError(f"jtblas.matmul: {name} must be a jax.Array or numpy array, got {type(x).__name__}")
    if a.ndim < 2 or b.ndim != 2:
        raise ValueError(
            f"jtblas.matmul: a must have rank >= 2 and b rank 2, got {a.shape=} and {b.shape=}"
        )
    if transpose_a and a.ndim != 2:
        raise ValueError(f"jtblas.matmul: transpose_a needs a 2-D a, got {a.shape=}")
    dtype = _operand_dtype(a, b)
    out_dtype = jnp.dtype(dtype if preferred_element_type is None else preferred_element_type)
    if out_dtype.name not in OPERAND_DTYPE_BYTES:
        raise TypeError(
            f"jtblas.matmul: preferred_element_type must be one of {sorted(OPERAND_DTYPE_BYTES)}, "
            f"got {out_dtype.name}"
        )
    if transpose_a:
        k_a, rows = a.shape
    else:
        rows, k_a = a.shape[-2:]
    k_b, n = b.shape[::-1] if transpose_b else b.shape
    if k_a != k_b:
        raise ValueError(
            f"jtblas.matmul: {a.shape=} ({transpose_a=}) and {b.shape=} ({transpose_b=}) do not "
            f"contract: {k_a} != {k_b}"
        )
    leading = () if transpose_a else tuple(a.shape[:-2])
    m = math.prod(leading) * rows  # leading dims of `a` fold into M: a free reshape
    shape = GemmShape(m=m, n=n, k=k_a, out_shape=(*leading, rows, n))
    if min(m, n, k_a) == 0:
        return None, shape
    problem = Problem(
        m=m, n=n, k=k_a, dtype=dtype.name, out_dtype=out_dtype.name,
        transpose_a=bool(transpose_a), transpose_b=bool(transpose_b),
        input_precision=input_precision(precision),
    )
    return problem, shape


class GemmShape(NamedTuple):
    """Sizes of a product: M (leading dims of `a` folded in), N, K, and the result's shape."""

    m: int
    n: int
    k: int
    out_shape: tuple[int, ...]


def _operand_dtype(a: Any, b: Any) -> np.dtype:
    if a.dtype != b.dtype:
        raise TypeError(f"jtblas.matmul: a and b must have the same dtype, got {a.dtype=} and {b.dtype=}")
    if jnp.dtype(a.dtype).name not in OPERAND_DTYPE_BYTES:
        raise TypeError(
            f"jtblas.matmul: unsupported dtype {a.dtype}; the kernel takes "
            f"{sorted(OPERAND_DTYPE_BYTES)} (use jtblas.dot_general for others, it falls back to XLA)"
        )
    return jnp.dtype(a.dtype)


def input_precision(precision: Any) -> str:
    """Maps a JAX `precision` to `tl.dot`'s input_precision: HIGHEST → "ieee", else "tf32"."""
    if isinstance(precision, (tuple, list)):
        if len(precision) != 2:
            raise ValueError(f"jtblas: precision must be one value or a pair, got {precision!r}")
        choices = {input_precision(p) for p in precision}
        return "ieee" if "ieee" in choices else "tf32"
    if precision is None:
        return "tf32"
    try:
        canonical = jax.lax.Precision(precision)
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"jtblas: unknown precision {precision!r}") from error
    return "ieee" if canonical == jax.lax.Precision.HIGHEST else "tf32"


def check_config(config: Any, problem: Problem, hw: hardware.Hardware | None = None) -> None:
    """Raises if `config` is not a Config or cannot run `problem` on the GPU in use."""
    if config.split_k != 1:
        raise ValueError(f"jtblas.matmul: Config.split_k={config.split_k} is not supported yet (use 1)")
    hw = hw or hardware.detect()
    errors = resources.fit_errors(config, problem, hw)
    if errors:
        raise ValueError(f"jtblas.matmul: config {config} cannot run: " + "; ".join(errors))
