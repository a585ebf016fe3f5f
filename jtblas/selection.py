"""Public entry points to the model: `select`, `candidates`, `explain` by sizes and dtype names.

These turn user-facing arguments (dtypes as NumPy/JAX dtypes or strings, a JAX `precision`, a GPU
name) into a `Problem` and a `Hardware`, then call `jtblas.model`. The model itself stays pure
Python; JAX is touched only to read a dtype's name and to map `precision` (`jtblas.precision`, shared with `matmul`).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from jtblas import hardware as hardware_lib
from jtblas import model
from jtblas.config import ACTIVATIONS, EPILOGUE_DTYPE_BYTES, OPERAND_DTYPE_BYTES, Config, Problem, compute_dtype_name
from jtblas.precision import input_precision

# Short names accepted wherever a dtype is (the CLI's --dtype, and strings in Python).
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "f16": "float16", "half": "float16",
                 "fp32": "float32", "f32": "float32", "float": "float32"}


def dtype_name(dtype: Any, allowed: Any = OPERAND_DTYPE_BYTES) -> str:
    """The canonical name ("bfloat16", "float16", "float32") of a dtype, a type or a string
    (among `allowed`)."""
    if isinstance(dtype, str):
        key = dtype.strip().lower()
        name = DTYPE_ALIASES.get(key, key)
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            import jax.numpy as jnp  # only for dtypes NumPy cannot name by itself (bfloat16)

            name = jnp.dtype(dtype).name
    if name not in allowed:
        raise TypeError(f"jtblas: unsupported dtype {dtype!r}; the kernel takes {sorted(allowed)}")
    return name


def problem_of_sizes(
    m: int, n: int, k: int, *, dtype: Any = "bfloat16", out_dtype: Any = None,
    transpose_a: bool = False, transpose_b: bool = False, precision: Any = None, batch: int = 1,
    b_dtype: Any = None, bias_dtype: Any = None, activation: str | None = None, residual_dtype: Any = None,
    gated: bool = False,
) -> Problem:
    """A `Problem` from user-facing arguments (see `select`)."""
    for name, value in (("M", m), ("N", n), ("K", k), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"jtblas: {name} must be a positive integer, got {value!r}")
    a_stored = dtype_name(dtype)
    b_stored = a_stored if b_dtype is None else dtype_name(b_dtype)
    precision_name = input_precision(precision)
    compute = compute_dtype_name(a_stored, b_stored, precision_name)
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"jtblas: activation must be None or one of {ACTIVATIONS}, got {activation!r}")
    epilogue = {name: "" if value is None else dtype_name(value, EPILOGUE_DTYPE_BYTES)
                for name, value in (("bias_dtype", bias_dtype), ("residual_dtype", residual_dtype))}
    if not isinstance(gated, bool):
        raise TypeError(f"jtblas: gated must be a bool, got {gated!r}")
    if gated and n % 2:
        raise ValueError(f"jtblas: gated needs an even N (the gate's N/2 columns, then the up projection's), got {n}")
    return Problem(
        m=int(m), n=int(n), k=int(k), dtype=compute,
        out_dtype=compute if out_dtype is None else dtype_name(out_dtype),
        transpose_a=bool(transpose_a), transpose_b=bool(transpose_b),
        input_precision=precision_name, batch=int(batch),
        a_dtype="" if a_stored == compute else a_stored, b_dtype="" if b_stored == compute else b_stored,
        activation=activation or "", gated=gated, **epilogue,
    )


@functools.lru_cache(maxsize=4096, typed=True)
def _cached_problem(m, n, k, dtype, out_dtype, transpose_a, transpose_b, precision, batch, *extra) -> Problem:
    return problem_of_sizes(m, n, k, dtype=dtype, out_dtype=out_dtype, transpose_a=transpose_a,
                            transpose_b=transpose_b, precision=precision, batch=batch,
                            **dict(zip(_EXTRA, extra)))


# The keyword arguments of `select` beyond the layout, in the order `_problem` takes them.
_EXTRA = ("b_dtype", "bias_dtype", "activation", "residual_dtype", "gated")


def _problem(m, n, k, dtype, out_dtype, transpose_a, transpose_b, precision, batch, *extra) -> Problem:
    """`problem_of_sizes`, remembered per distinct arguments (typed: 1, True and 1.0 stay apart), so
    that a repeated `select` costs a dictionary lookup or two, not a validation (~5 µs); arguments
    that cannot be hashed (a precision given as a list) are converted every time."""
    try:
        return _cached_problem(m, n, k, dtype, out_dtype, transpose_a, transpose_b, precision, batch, *extra)
    except TypeError:  # unhashable: convert them without the cache (problem_of_sizes's own errors recur)
        return problem_of_sizes(m, n, k, dtype=dtype, out_dtype=out_dtype, transpose_a=transpose_a,
                                transpose_b=transpose_b, precision=precision, batch=batch,
                                **dict(zip(_EXTRA, extra)))


def clear_cache() -> None:
    """Forgets the remembered arguments and the model's cached selections and plans
    (`jtblas.model.clear_cache`)."""
    _cached_problem.cache_clear()
    model.clear_cache()


def select(
    m: int, n: int, k: int, *, dtype: Any = "bfloat16", out_dtype: Any = None,
    transpose_a: bool = False, transpose_b: bool = False, precision: Any = None,
    hardware: str | hardware_lib.Hardware | None = None, batch: int = 1,
    b_dtype: Any = None, bias_dtype: Any = None, activation: str | None = None, residual_dtype: Any = None,
    gated: bool = False,
) -> Config:
    """The model's configuration for C[M, N] = op(A) · op(B) with op(A) [M, K], op(B) [K, N].

    Args:
      m, n, k: problem sizes (≥ 1).
      dtype: operand dtype: a NumPy/JAX dtype or a name ("bfloat16", "bf16", "float16", "float32").
      out_dtype: output dtype (default: `dtype`).
      transpose_a, transpose_b: the operand is stored transposed (A as [K, M], B as [N, K]).
      precision: a JAX precision for fp32 operands (HIGHEST → full fp32, else tf32).
      hardware: "h200", "h100", "a100", a `jtblas.hardware.Hardware`, or None to detect the GPU.
      batch: independent products of these sizes in one launch (what `vmap` or a batched
        `dot_general` launches); the model counts waves over the batch's tiles and sizes
        split-K's workspace by it.
      b_dtype: B's stored dtype where it is not `dtype` (A's): the kernel converts in registers
        and computes in `jtblas.config.compute_dtype_name`'s dtype (the default output dtype).
      bias_dtype, activation, residual_dtype: the fused epilogue (`jtblas.matmul`'s bias,
        activation and residual): its bytes and work are in the predictions.
      gated: the N columns are a gate's then an up projection's (`jtblas.matmul(gated=True)`:
        C has N/2 columns); the plain kernel's configs only.

    Raises:
      ValueError: a size or batch that is not a positive integer, or products whose operands and
        output cannot fit the GPU's memory (named with their sizes).

    Returns:
      The fastest predicted `Config` among `candidates(...)`: the config of the problem the kernel
      runs, which, where the model repacks misaligned operands into padded copies (`explain` says
      so), is the padded problem; the same every time (cached).
    """
    problem = _problem(m, n, k, dtype, out_dtype, transpose_a, transpose_b, precision, batch,
                       b_dtype, bias_dtype, activation, residual_dtype, gated)
    return model.plan_for_problem(problem, hardware_lib.get(hardware)).config


def candidates(
    m: int, n: int, k: int, *, dtype: Any = "bfloat16", out_dtype: Any = None,
    transpose_a: bool = False, transpose_b: bool = False, precision: Any = None,
    hardware: str | hardware_lib.Hardware | None = None, batch: int = 1,
    b_dtype: Any = None, bias_dtype: Any = None, activation: str | None = None, residual_dtype: Any = None,
    gated: bool = False,
) -> list[Config]:
    """The whole search space the model ranks for this problem, in a fixed order (arguments as
    for `select`): the configs of the problem the kernel runs, so `select(...)` is one of them and
    `explain(...).ranked` lists them all. Where the model repacks misaligned operands into padded
    copies (`explain(...).plan.repacks`), that is the padded problem; `candidates_as_stored` gives
    the configs of the operands as stored (what an explicit `matmul(config=...)` runs on)."""
    problem = problem_of_sizes(m, n, k, dtype=dtype, out_dtype=out_dtype, transpose_a=transpose_a,
                               transpose_b=transpose_b, precision=precision, batch=batch, b_dtype=b_dtype,
                               bias_dtype=bias_dtype, activation=activation, residual_dtype=residual_dtype,
                               gated=gated)
    hw = hardware_lib.get(hardware)
    return model.candidates_for_problem(model.plan_for_problem(problem, hw).kernel_problem, hw)


def candidates_as_stored(
    m: int, n: int, k: int, *, dtype: Any = "bfloat16", out_dtype: Any = None,
    transpose_a: bool = False, transpose_b: bool = False, precision: Any = None,
    hardware: str | hardware_lib.Hardware | None = None, batch: int = 1,
    b_dtype: Any = None, bias_dtype: Any = None, activation: str | None = None, residual_dtype: Any = None,
    gated: bool = False,
) -> list[Config]:
    """The configs of the operands as stored, never repacked (arguments as for `select`): what an
    explicit `matmul(config=...)` accepts, and the list the exhaustive-search oracle times on the
    caller's operands. The same as `candidates(...)` wherever the model does not repack."""
    problem = problem_of_sizes(m, n, k, dtype=dtype, out_dtype=out_dtype, transpose_a=transpose_a,
                               transpose_b=transpose_b, precision=precision, batch=batch, b_dtype=b_dtype,
                               bias_dtype=bias_dtype, activation=activation, residual_dtype=residual_dtype,
                               gated=gated)
    return model.candidates_for_problem(problem, hardware_lib.get(hardware))


def explain(
    m: int, n: int, k: int, *, dtype: Any = "bfloat16", out_dtype: Any = None,
    transpose_a: bool = False, transpose_b: bool = False, precision: Any = None,
    hardware: str | hardware_lib.Hardware | None = None, batch: int = 1,
    b_dtype: Any = None, bias_dtype: Any = None, activation: str | None = None, residual_dtype: Any = None,
    gated: bool = False,
) -> model.Explanation:
    """Every candidate ranked by predicted time with its terms (arguments as for `select`).

    `str(result)` or `result.format(top=k)` prints the top-k table and why the winner won, and
    whether the operands are repacked (`result.plan`: both predicted times);
    `result.ranked[0].config == select(...)`.
    """
    problem = problem_of_sizes(m, n, k, dtype=dtype, out_dtype=out_dtype, transpose_a=transpose_a,
                               transpose_b=transpose_b, precision=precision, batch=batch, b_dtype=b_dtype,
                               bias_dtype=bias_dtype, activation=activation, residual_dtype=residual_dtype,
                               gated=gated)
    return model.explain_problem(problem, hardware_lib.get(hardware))
