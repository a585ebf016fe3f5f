"""JAX's `precision` argument as the kernel's input precision (`Problem.input_precision`): the one
mapping, shared by `jtblas.matmul`, `jtblas.dot_general` and the model's entry points
(`jtblas.select`). It reads `jax.lax.Precision` only; the model itself never imports it.
"""

from __future__ import annotations

from typing import Any

import jax


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
