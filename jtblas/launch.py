"""One call shape, two backends: a `@triton.jit` kernel on the arrays' platform.

- CUDA: `jax_triton.triton_call` (`jtblas.jax_triton_adapter`).
- CPU: Triton's interpreter over NumPy buffers inside `jax.pure_callback` (`jtblas.interpreter`).
  Same kernel, grid and meta-parameters.

Both work eagerly and under `jax.jit`. The backend is the platform of concrete input arrays, else
JAX's default backend; `forced_backend` overrides it (tests lower for CUDA on a CPU machine).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jtblas import _compat, interpreter, jax_triton_adapter, sharding
from jtblas.interpreter import ExportError

_override = threading.local()


@contextlib.contextmanager
def forced_backend(platform: str, *, compute_capability: int | None = None) -> Iterator[None]:
    """Within the block, launches target `platform` ("cuda" or "cpu") regardless of the arrays;
    `compute_capability` (e.g. 90) lets jax-triton compile for CUDA without querying a GPU.

    JAX's trace caches do not see the override: trace, within the block, a function object that
    was not traced outside it (e.g. `jax.jit(lambda *args: f(*args))`); a product's own traces
    below `jtblas.matmul` are keyed on the target."""
    if platform not in ("cuda", "cpu"):
        raise ValueError(f"platform must be 'cuda' or 'cpu', got {platform!r}")
    previous = getattr(_override, "value", None)
    _override.value = (platform, compute_capability)
    try:
        yield
    finally:
        _override.value = previous


def target_platform(arrays: Sequence[Any]) -> tuple[str, int | None]:
    """(platform, compute_capability) the launch will target for these operands."""
    override = getattr(_override, "value", None)
    if override is not None:
        return override
    for array in arrays:
        if isinstance(array, jax.Array) and not isinstance(array, jax.core.Tracer):
            return _canonical_platform(next(iter(array.devices())).platform), None
    return _canonical_platform(jax.default_backend()), None


def _canonical_platform(platform: str) -> str:
    return "cuda" if platform in ("gpu", "cuda") else platform


def launch(
    kernel: Any,
    *,
    grid: tuple[int, ...],
    args: Sequence[jax.Array | int | float],
    out_shape: jax.ShapeDtypeStruct | Sequence[jax.ShapeDtypeStruct],
    num_warps: int,
    num_stages: int,
    metaparams: Mapping[str, Any],
    zeroed_outputs: bool | Sequence[int] = False,
    global_scratch: tuple[int, int] | None = None,
) -> jax.Array | tuple[jax.Array, ...]:
    """Runs `kernel[grid](*args, *outs, **metaparams)` and returns `out` (a tuple of them for a
    sequence of output shapes).

    Args:
      kernel: a `@triton.jit` function whose last runtime arguments are the output pointers.
      grid: program counts per axis (Python ints).
      args: runtime arguments in kernel order: arrays (pointers) and Python scalars.
      out_shape: shape and dtype of the output (or of each output), allocated by the backend.
      num_warps, num_stages: compile options.
      metaparams: the kernel's `tl.constexpr` arguments.
      zeroed_outputs: the output starts as zeros (for kernels that accumulate into it, e.g. with
        atomics), or the positions of the outputs that do; the others' contents before the kernel
        runs are undefined (NaN on the CPU).
      global_scratch: (bytes per program, alignment) of global scratch the kernel needs, e.g. for
        device-side TMA descriptors (`tl.make_tensor_descriptor`): on CUDA an XLA buffer (see
        `jax_triton_adapter._scratch_output`), or jaxlib's per-launch allocation on the legacy call.
    """
    arrays = [arg for arg in args if isinstance(arg, (jax.Array, np.ndarray))]
    platform, compute_capability = target_platform(arrays)
    several = not isinstance(out_shape, jax.ShapeDtypeStruct)
    outs = list(out_shape) if several else [out_shape]
    if isinstance(zeroed_outputs, bool):
        zeroed_outputs = (0,) if zeroed_outputs else ()
    zeroed_outputs = tuple(zeroed_outputs)
    _compat.stack()  # the versions are checked at the first launch, whichever the backend
    if platform == "cuda":
        results = jax_triton_adapter.triton_call(
            kernel, grid=grid, args=args, out_shapes=outs, num_warps=num_warps, num_stages=num_stages,
            compute_capability=compute_capability, metaparams=metaparams, zeroed_outputs=zeroed_outputs,
            global_scratch=global_scratch)
    elif platform == "cpu":
        results = interpreter.launch_interpreted(kernel, grid, args, outs, dict(metaparams), zeroed_outputs)
    else:
        raise NotImplementedError(f"jtblas has no kernel backend for platform {platform!r}")
    # jax-triton's results and a callback's carry no manual axes (vma): they vary as the operands do.
    results = sharding.vary_like(results, arrays)
    return tuple(results) if several else results[0]


def global_scratch_supported(platform: str) -> bool:
    """Whether a kernel launched on `platform` ("cuda" or "cpu") can have global scratch: always
    under the interpreter; on CUDA as `jax_triton_adapter.global_scratch_supported` says."""
    if platform == "cpu":
        return True
    return jax_triton_adapter.global_scratch_supported()


__all__ = ["ExportError", "forced_backend", "global_scratch_supported", "launch", "target_platform"]
