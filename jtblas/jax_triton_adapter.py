"""The CUDA backend: a `@triton.jit` kernel through `jax_triton.triton_call`, with what jtblas
adds to jax-triton 0.3.1's internals.

jax-triton is imported on the first CUDA launch (`_jax_triton`: it cannot be imported with a
CPU-only jaxlib); `jtblas._compat` checks the versions. jax-triton 0.4.x is used as it is. Under
jax-triton 0.3.1, three of its internals are wrapped at that first import, never at jtblas's:

- jaxlib's kernel library (`_ScratchAwareKernelLibrary`): a kernel registered as needing global
  scratch gets its size, and a kernel whose scratch is its last output that output's alignment;
  every kernel is launched with the block its PTX requires (`launched_warps`);
- its kernel compiler (`_jtblas_kernels`): such a kernel is compiled without that output;
- its `jax.ffi` (`_JaxForJaxTriton`): calls to jaxlib's typed-FFI target get that target's calling
  convention (`_call_target` chooses the target).
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jtblas import _compat


def triton_call(
    kernel: Any,
    *,
    grid: tuple[int, ...],
    args: Sequence[jax.Array | int | float],
    out_shapes: Sequence[jax.ShapeDtypeStruct],
    num_warps: int,
    num_stages: int,
    compute_capability: int | None,
    metaparams: Mapping[str, Any],
    zeroed_outputs: tuple[int, ...],
    global_scratch: tuple[int, int] | None,
) -> Sequence[jax.Array]:
    """Runs `kernel[grid](*args, *outs, **metaparams)` through `jax_triton.triton_call` and
    returns one array per `out_shapes` (the arguments as `jtblas.launch.launch` takes them)."""
    outs = list(out_shapes)
    if _compat.stack().jax_triton_lowers_to_ffi:
        if global_scratch is not None:
            _register_global_scratch(kernel, global_scratch)
        with warnings.catch_warnings():
            # Deprecated in jax-triton 0.4 for Refs (jax_triton/triton_lib.py), still honoured there.
            warnings.filterwarnings("ignore", "zeroed_outputs is deprecated", DeprecationWarning)
            return _jax_triton().triton_call(
                *args,
                kernel=kernel,
                out_type=outs,
                grid=grid,
                num_warps=num_warps,
                num_stages=num_stages,
                compute_capability=compute_capability,
                zeroed_outputs=zeroed_outputs,
                # jax-triton 0.3.1's default; Triton 3.10 turns it off by default (triton/knobs.py).
                backend_options={"enable_fp_fusion": True},
                **metaparams,
            )
    target = _call_target(global_scratch)
    scratch_output = global_scratch is not None and target == _FFI_TARGET
    if scratch_output:
        outs.append(_scratch_output(kernel, grid, global_scratch))
    elif global_scratch is not None:
        _register_global_scratch(kernel, global_scratch)
    results = _jax_triton().triton_call(
        *args,
        kernel=kernel,
        out_shape=outs,
        grid=grid,
        num_warps=num_warps,
        num_stages=num_stages,
        compute_capability=compute_capability,
        zeroed_outputs=zeroed_outputs,
        custom_call_target_name=target,
        **metaparams,
    )
    return results[:-1] if scratch_output else results


def global_scratch_supported() -> bool:
    """Whether a CUDA launch can give a kernel global scratch: where jaxlib's Triton kernel call
    allocates it (jaxlib ≥ 0.11, whose `TritonKernel` takes `global_scratch_size`; jax-triton 0.3.1
    does not pass it, so `_jax_triton` wraps jaxlib's module to), and not with jax-triton 0.4.x
    (`_register_global_scratch`)."""
    return _jaxlib_kernel_takes_scratch() and not _compat.stack().jax_triton_lowers_to_ffi


def drop_blank_triton_cache_dir() -> None:
    """Removes TRITON_CACHE_DIR="" from the environment (Triton's default cache applies again).

    A process that imported jax-triton directly, without `_jax_triton`'s restore, passes the blank
    value on to its children; the commands that launch Triton kernels on torch tensors (`jtblas
    bench`, `jtblas calibrate`) call this first, or every launch fails with "Could not create or
    locate cache dir"."""
    if os.environ.get("TRITON_CACHE_DIR") == "":
        del os.environ["TRITON_CACHE_DIR"]


@functools.cache
def _jaxlib_kernel_takes_scratch() -> bool:
    try:
        from jax._src.lib import gpu_triton
    except ImportError:
        return False
    # Without the jax CUDA plugin the module is there but holds no TritonKernel.
    kernel = getattr(gpu_triton, "TritonKernel", None)
    return kernel is not None and "global_scratch_size" in (getattr(kernel.__init__, "__doc__", None) or "")


# Global scratch (bytes per program, alignment) by kernel name, for the kernels that need it.
_GLOBAL_SCRATCH: dict[str, tuple[int, int]] = {}


def _register_global_scratch(kernel: Any, scratch: tuple[int, int]) -> None:
    stack = _compat.stack()
    if stack.jax_triton_lowers_to_ffi:
        # jax-triton 0.4.x has jaxlib allocate the scratch per launch, which fails where XLA
        # captures the call into a CUDA graph (H200, triton 3.9.0, jax-triton 0.4.1, 2026-12-01),
        # and checks that a call's outputs match the kernel's parameters, so `_scratch_output`
        # cannot be passed.
        version = ".".join(map(str, stack.jax_triton))
        raise RuntimeError(
            f"jtblas: kernel {kernel.fn.__name__} needs global scratch, which jtblas cannot give it "
            f"with jax-triton {version} (jax-triton 0.3.1 with triton 3.6 can); use a Config with tma=False")
    if not _jaxlib_kernel_takes_scratch():
        raise RuntimeError(
            f"jtblas: kernel {kernel.fn.__name__} needs global scratch, which this jaxlib's Triton "
            "kernel call cannot allocate (it needs jaxlib >= 0.11); use a Config with tma=False")
    _GLOBAL_SCRATCH[kernel.fn.__name__] = scratch


class _ScratchAwareKernelLibrary:
    """jaxlib's `gpu_triton` module as jax-triton 0.3.1 uses it, except that `TritonKernel` gets
    the global scratch size of the kernels registered in `_GLOBAL_SCRATCH` (by their compiled
    name, the `@triton.jit` function's name). jax-triton 0.3.1 builds every kernel without it, so
    the kernel would find a null scratch pointer."""

    def __init__(self, library: Any):
        self._library = library

    def __getattr__(self, name: str) -> Any:
        return getattr(self._library, name)

    def TritonKernel(self, kernel_name: str, num_warps: int, num_ctas: int, shared_mem_bytes: int, ptx: str,  # noqa: N802
                     *args: Any) -> Any:
        args = (launched_warps(ptx, num_warps), num_ctas, shared_mem_bytes, ptx, *args)
        scratch = _GLOBAL_SCRATCH.get(kernel_name)
        if scratch is None:
            return self._library.TritonKernel(kernel_name, *args)
        size, align = scratch
        return self._library.TritonKernel(kernel_name, *args, global_scratch_size=size, global_scratch_align=align)

    def TritonKernelCall(self, kernel: Any, grid_0: int, grid_1: int, grid_2: int,  # noqa: N802
                         parameters: list[Any]) -> Any:
        """jaxlib's kernel call; for a kernel with its scratch as the last output, that output's
        pointer must be aligned as the scratch is (jaxlib checks it per launch)."""
        align = _SCRATCH_OUTPUT_KERNELS.get(id(kernel))
        if align is not None:
            parameters = [*parameters[:-1], self._library.create_array_parameter(0, align)]
        return self._library.TritonKernelCall(kernel, grid_0, grid_1, grid_2, parameters)


def launched_warps(ptx: str, num_warps: int) -> int:
    """Warps per block a compiled kernel must be launched with: its PTX's `.reqntid` over 32, else
    `num_warps`. A warp-specialized loop (`tl.range(..., warp_specialize=True)`) adds its
    partitions' warps to the num_warps it was compiled with (sm_90, Triton 3.6 and 3.9: 4 warps
    compile to `.reqntid 384`), and a launch with fewer threads fails (CUDA_ERROR_INVALID_VALUE, H200,
    2026-12-01); jax-triton 0.3.1 launches the num_warps it compiled with."""
    found = _REQNTID.search(ptx) if isinstance(ptx, str) else None
    return int(found.group(1)) // 32 if found else num_warps


_REQNTID = re.compile(r"\.reqntid\s+(\d+)")


# jaxlib's typed-FFI entry for Triton kernel calls: the same kernel call (a zlib-compressed proto
# in an "opaque" attribute), but registered command-buffer compatible, so XLA records it into its
# CUDA graphs. jax-triton 0.3.1 lowers to the legacy target "triton_kernel_call" (custom-call API
# version 2), which XLA leaves out of command buffers: each such call is launched from the host
# between graph segments, ~5 µs of host time per launch that a 10 µs kernel cannot hide (H200,
# 2026-11-30, BENCHMARKS.md at 705f18b).
_LEGACY_TARGET = "triton_kernel_call"
_FFI_TARGET = "triton_kernel_call_ffi"


def _call_target(global_scratch: tuple[int, int] | None) -> str:
    """The custom-call target of a CUDA launch: the typed-FFI one where jaxlib registers it (a
    kernel with global scratch then gets it from an XLA buffer, `_scratch_output`), else the
    legacy one."""
    if _ffi_target_registered() and (global_scratch is None or _jaxlib_kernel_takes_scratch()):
        return _FFI_TARGET
    return _LEGACY_TARGET


# Global scratch from an XLA buffer. jaxlib allocates a kernel's scratch per launch with
# cuMemAllocAsync, which inside XLA's CUDA graphs (where the typed-FFI call is recorded as a child
# graph) fails: "Failed to create a child graph node ... CUDA_ERROR_NOT_SUPPORTED" (H200,
# 2026-11-30, BENCHMARKS.md at 705f18b). So a kernel with scratch gets one more output, a uint8 buffer of
# grid x bytes-per-program, and jaxlib is told of no scratch. jaxlib passes a kernel's parameters
# as its array and scalar arguments in order, then its own scratch pointer (null without scratch)
# and a null profiling pointer (`KernelCall::Launch`, jaxlib/gpu/triton_kernels.cc), while the
# compiled kernel's parameters are its arguments, then the global and the profile scratch pointers
# (Triton 3.6's launcher). The extra buffer, the last argument, thus lands in the global scratch
# slot, jaxlib's null in the profile scratch slot (unused unless Triton's profiler is on) and the
# last pointer is one the kernel does not read. The compiled kernel never sees the extra output
# as an argument: `_jtblas_kernels` compiles it without, and the buffer's parameter checks the
# scratch alignment.
_SCRATCH_OUTPUT_ALIGN: dict[str, int] = {}  # kernel name -> scratch alignment (bytes)
# id of jaxlib's compiled kernel -> scratch alignment; the kernels live as long as the process
# (jax-triton's compiled-kernel cache never evicts), so an id is never reused.
_SCRATCH_OUTPUT_KERNELS: dict[int, int] = {}


def _scratch_output(kernel: Any, grid: tuple[int, ...], global_scratch: tuple[int, int]) -> jax.ShapeDtypeStruct:
    """The XLA buffer that serves as `kernel`'s global scratch on `grid` (see above)."""
    size, align = global_scratch
    _SCRATCH_OUTPUT_ALIGN[kernel.fn.__name__] = align
    return jax.ShapeDtypeStruct((size * int(np.prod(grid)),), jnp.uint8)


class _JaxForJaxTriton:
    """The `jax` module as `jax_triton.triton_lib` sees it, except for `jax.ffi.ffi_lowering`
    (`_TritonFfiLowering`)."""

    def __init__(self, jax_module: Any):
        self._jax = jax_module
        self.ffi = _TritonFfiLowering(jax_module.ffi)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._jax, name)


class _TritonFfiLowering:
    """`jax.ffi` whose `ffi_lowering` gives a jax-triton call to `_FFI_TARGET` that target's calling
    convention: jax-triton 0.3.1 lowers every call as a legacy custom call (API version 2, the
    compressed kernel call as `backend_config`); the typed-FFI handler takes API version 4 with
    the same bytes as its "opaque" attribute. Anything else passes through."""

    def __init__(self, ffi: Any):
        self._ffi = ffi

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ffi, name)

    def ffi_lowering(self, target: str, *, api_version: int = 4, backend_config: Any = None, **kwargs: Any) -> Any:
        if target != _FFI_TARGET or api_version != 2 or not isinstance(backend_config, bytes):
            return self._ffi.ffi_lowering(target, api_version=api_version, backend_config=backend_config, **kwargs)
        rule = self._ffi.ffi_lowering(_FFI_TARGET, api_version=4, **kwargs)
        opaque = backend_config

        def lowering(ctx: Any, *operands: Any) -> Any:
            return rule(ctx, *operands, opaque=opaque)

        return lowering


@functools.cache
def _ffi_target_registered() -> bool:
    """Whether jaxlib's CUDA plugin registers `_FFI_TARGET`."""
    try:
        from jax._src.lib import gpu_triton
    except ImportError:
        return False
    plugin = getattr(gpu_triton, "_cuda_triton", None)
    registrations = getattr(plugin, "registrations", None)
    return registrations is not None and _FFI_TARGET in registrations()


@functools.cache
def _jax_triton() -> Any:
    """jax_triton, imported on first CUDA launch (it cannot be imported with a CPU-only jaxlib).

    jax-triton 0.3.1 sets TRITON_CACHE_DIR="" when imported (0.4.x removes it), which turns off Triton's on-disk
    cache for every other kernel of the process (a later `kernel[grid](...)` then fails with
    "Could not create or locate cache dir"); the caller's setting is put back. Where jaxlib can
    allocate global scratch, its kernel library is wrapped (`_ScratchAwareKernelLibrary`), kernels
    with a scratch output are compiled by `_jtblas_kernels`, and jax-triton's
    lowering gives calls to jaxlib's typed-FFI target its calling convention (`_JaxForJaxTriton`;
    `_call_target` chooses it). jax-triton 0.4.x is used as it is.
    """
    saved = os.environ.get("TRITON_CACHE_DIR")
    import jax_triton

    if saved is None:
        os.environ.pop("TRITON_CACHE_DIR", None)
    else:
        os.environ["TRITON_CACHE_DIR"] = saved
    if _compat.stack().jax_triton_lowers_to_ffi:
        return jax_triton  # the typed-FFI target is its own; nothing is wrapped (`jtblas._compat`)
    import jax_triton.triton_lib as triton_lib

    if _jaxlib_kernel_takes_scratch() and not isinstance(triton_lib.triton_kernel_call_lib, _ScratchAwareKernelLibrary):
        triton_lib.triton_kernel_call_lib = _ScratchAwareKernelLibrary(triton_lib.triton_kernel_call_lib)
    if not getattr(triton_lib.get_or_create_triton_kernel, "jtblas_kernels", False):
        triton_lib.get_or_create_triton_kernel = _jtblas_kernels(triton_lib.get_or_create_triton_kernel)
    if not isinstance(triton_lib.jax, _JaxForJaxTriton):
        triton_lib.jax = _JaxForJaxTriton(triton_lib.jax)
    return jax_triton


def _jtblas_kernels(get_or_create_triton_kernel: Any) -> Any:
    """jax-triton's `get_or_create_triton_kernel`, extended to kernels whose global scratch is
    their last output (`_scratch_output`): such a kernel is compiled without that argument, and
    the buffer's parameter is given the scratch alignment
    (`_ScratchAwareKernelLibrary.TritonKernelCall`).
    """

    def get_or_create(backend_init_func, platform, fn, arg_dtypes, scalar_args, *, num_warps, num_stages,
                      num_ctas, compute_capability, enable_fp_fusion, metaparams, dump):
        align = _SCRATCH_OUTPUT_ALIGN.get(fn.fn.__name__) if platform == "cuda" else None
        scratch_position = len(fn.arg_names) - len(fn.constexprs)  # the argument after the kernel's own
        if align is not None and len(arg_dtypes) == scratch_position + 1:
            arg_dtypes = arg_dtypes[:-1]
        else:
            align = None
        kernel, attrs = get_or_create_triton_kernel(
            backend_init_func, platform, fn, arg_dtypes, scalar_args, num_warps=num_warps,
            num_stages=num_stages, num_ctas=num_ctas, compute_capability=compute_capability,
            enable_fp_fusion=enable_fp_fusion, metaparams=metaparams, dump=dump)
        if align is None:
            return kernel, attrs
        _SCRATCH_OUTPUT_KERNELS[id(kernel)] = align
        return kernel, {**attrs, (scratch_position,): []}

    get_or_create.jtblas_kernels = True
    return get_or_create


__all__ = ["drop_blank_triton_cache_dir", "global_scratch_supported", "triton_call"]
