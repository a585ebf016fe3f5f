"""The operands of a product checked and described: `problem_of_operands` turns `matmul`'s
arguments (arrays, transpose flags, precision, output dtype, epilogue) into the kernel's `Problem`
and the result's shape, raising on anything the kernel does not take; with the dtype rules
(`compute_dtype`, `stored_dtypes`), the GPU the launch runs on (`launch_hardware`) and the check
of a forced config (`check_config`).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jtblas import hardware, launch
from jtblas.config import (
    ACTIVATIONS,
    EPILOGUE_DTYPE_BYTES,
    OPERAND_DTYPE_BYTES,
    Problem,
    compute_dtype_name,
)
from jtblas.model import resources
from jtblas.precision import input_precision


def problem_of_operands(
    a: Any,
    b: Any,
    *,
    transpose_a: bool,
    transpose_b: bool,
    precision: Any,
    preferred_element_type: Any,
    bias: Any = None,
    activation: Any = None,
    residual: Any = None,
    gated: bool = False,
) -> tuple[Problem | None, GemmShape]:
    """Checks the operands and the epilogue's arguments; returns the kernel's `Problem` (None
    when M, N or K is 0) and the sizes, with the batch shape that folds into M. `gated`: b's N
    columns are a gate's then an up projection's, and the result has N/2 (`Problem.gated`).

    Raises TypeError for non-arrays, unsupported dtypes and a non-bool `transpose_a`,
    `transpose_b` or `gated`, ValueError for bad ranks and shapes (an odd N when gated),
    mismatched contracting dimensions and unknown activations.
    """
    for name, flag in (("transpose_a", transpose_a), ("transpose_b", transpose_b), ("gated", gated)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"jtblas.matmul: {name} must be a bool, got {flag!r} ({type(flag).__name__})")
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, (jax.Array, np.ndarray)):
            raise TypeError(f"jtblas.matmul: {name} must be a jax.Array or numpy array, got {type(x).__name__}")
        symbolic = [d for d in x.shape if not is_static_dim(d)]
        if symbolic:
            # The grid and the model's config are chosen from the sizes while tracing.
            raise ValueError(
                f"jtblas needs static shapes: got a symbolic dimension {symbolic[0]} in {name}.shape={x.shape}; "
                "for shape-polymorphic jax.export use jtblas.dot_general (it falls back to "
                "jax.lax.dot_general for symbolic shapes) or jax.lax.dot_general"
            )
    if a.ndim < 2 or b.ndim != 2:
        raise ValueError(
            f"jtblas.matmul: a must have rank >= 2 and b rank 2, got {a.shape=} and {b.shape=}"
        )
    if transpose_a and a.ndim != 2:
        raise ValueError(f"jtblas.matmul: transpose_a needs a 2-D a, got {a.shape=}")
    dtype = compute_dtype(a, b, precision)
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
    if gated and n % 2:
        raise ValueError(f"jtblas.matmul: gated needs an even N (the gate's N/2 columns, then the up "
                         f"projection's), got N={n} from {b.shape=} ({transpose_b=})")
    leading = () if transpose_a else tuple(a.shape[:-2])
    m = math.prod(leading) * rows  # leading dims of `a` fold into M: a free reshape
    shape = GemmShape(m=m, n=n, k=k_a, out_shape=(*leading, rows, n // 2 if gated else n))
    bias_dtype, activation, residual_dtype = _check_epilogue(bias, activation, residual, shape)
    if min(m, n, k_a) == 0:
        return None, shape
    a_dtype, b_dtype = stored_dtypes(a, b, dtype.name)
    problem = Problem(
        m=m, n=n, k=k_a, dtype=dtype.name, out_dtype=out_dtype.name,
        transpose_a=bool(transpose_a), transpose_b=bool(transpose_b),
        input_precision=input_precision(precision),
        bias_dtype=bias_dtype, activation=activation, residual_dtype=residual_dtype, a_dtype=a_dtype, b_dtype=b_dtype,
        gated=gated,
    )
    return problem, shape


def _check_epilogue(bias: Any, activation: Any, residual: Any, shape: GemmShape) -> tuple[str, str, str]:
    """(bias dtype, activation, residual dtype) of the epilogue's arguments, "" for each absent;
    raises TypeError for a non-array or a dtype the kernel does not add (integer, complex,
    float64), ValueError for a bias that is not [N], a residual not of the result's shape
    ([..., M, N], or [M, N] with the leading dims folded) and an unknown activation."""
    names = []
    for name, x in (("bias", bias), ("residual", residual)):
        if x is None:
            names.append("")
            continue
        if not isinstance(x, (jax.Array, np.ndarray)):
            raise TypeError(f"jtblas.matmul: {name} must be a jax.Array, a numpy array or None, got {type(x).__name__}")
        dtype = jnp.dtype(x.dtype).name
        if dtype not in EPILOGUE_DTYPE_BYTES:
            raise TypeError(f"jtblas.matmul: {name} must have a dtype among {sorted(EPILOGUE_DTYPE_BYTES)} "
                            f"(added in fp32 by the kernel), got {name}.dtype={dtype}")
        names.append(dtype)
    if bias is not None and tuple(bias.shape) != (shape.n,):
        raise ValueError(f"jtblas.matmul: bias must have shape (N,) = ({shape.n},) for a result of shape "
                         f"{shape.out_shape}, got {bias.shape=}")
    columns = shape.out_shape[-1]
    folded = (shape.m, columns)  # leading dimensions folded into M
    if residual is not None and tuple(residual.shape) not in (shape.out_shape, folded):
        also = f" (or {folded})" if folded != tuple(shape.out_shape) else ""
        raise ValueError(f"jtblas.matmul: residual must have the result's shape {shape.out_shape}{also}, "
                         f"got {residual.shape=}")
    if activation is None:
        activation = ""
    elif not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f"jtblas.matmul: activation must be None or one of {ACTIVATIONS}, got {activation!r}")
    return names[0], activation, names[1]


def is_static_dim(dim: Any) -> bool:
    """True for a concrete size; False for a symbolic one (`jax.export.symbolic_shape`)."""
    return isinstance(dim, (int, np.integer))


class GemmShape(NamedTuple):
    """Sizes of a product: M (leading dims of `a` folded in), N (b's columns), K, and the result's
    shape (N/2 columns for a gated product)."""

    m: int
    n: int
    k: int
    out_shape: tuple[int, ...]


def compute_dtype(a: Any, b: Any, precision: Any = None) -> np.dtype:
    """The dtype the kernel multiplies `a` and `b` in (`jtblas.config.compute_dtype_name`): for
    operands of two dtypes, each is loaded as stored and converted in registers, with no
    converted copy in memory.

    Raises TypeError for a dtype the kernel does not take."""
    for name, x in (("a", a), ("b", b)):
        if jnp.dtype(x.dtype).name not in OPERAND_DTYPE_BYTES:
            raise TypeError(
                f"jtblas.matmul: unsupported dtype {jnp.dtype(x.dtype).name} of {name}; the kernel takes "
                f"{sorted(OPERAND_DTYPE_BYTES)} (use jtblas.dot_general for others, it falls back to XLA)"
            )
    return jnp.dtype(compute_dtype_name(jnp.dtype(a.dtype).name, jnp.dtype(b.dtype).name,
                                        input_precision(precision)))


def stored_dtypes(a: Any, b: Any, compute: str) -> tuple[str, str]:
    """`Problem.a_dtype` and `b_dtype`: each operand's dtype name where it is not `compute`, else ""."""
    return tuple(name if name != compute else "" for name in (jnp.dtype(a.dtype).name, jnp.dtype(b.dtype).name))


def launch_hardware(operands: list[Any]) -> hardware.Hardware:
    """The description of the GPU these operands' launch runs on (`hardware.detect`), as the
    launch's platform can use it (`hardware.for_launch`: a forced CUDA launch on a CPU
    machine, for one, follows the installed jaxlib)."""
    platform, _ = launch.target_platform(operands)
    return hardware.for_launch(hardware.detect(), platform)


def check_config(config: Any, problem: Problem, hw: hardware.Hardware | None = None) -> None:
    """Raises if `config` is not a Config or cannot run `problem` on the GPU in use."""
    hw = hw or hardware.detect()
    errors = resources.fit_errors(config, problem, hw) + resources.memory_errors(problem, hw, config)
    if errors:
        raise ValueError(f"jtblas.matmul: config {config} cannot run: " + "; ".join(errors))
