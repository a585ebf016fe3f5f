"""One call shape, two backends: a `@triton.jit` kernel on the arrays' platform.

- CUDA: `jax_triton.triton_call` (imported lazily: jax-triton cannot be imported with a
  CPU-only jaxlib), 0.3.1 adapted below or 0.4.x as it is; `jtblas._compat` checks the versions.
- CPU: Triton's interpreter over NumPy buffers inside `jax.pure_callback`. Same kernel, grid and
  meta-parameters. bf16 operands are upcast to fp32 first (the interpreter computes bf16 `tl.dot`
  on raw bits, upstream triton issue 11584; exact, since accumulation is fp32 anyway), and a bf16
  output is computed in fp32 and rounded to bf16 (round-to-nearest-even, as the kernel's cast).

Both work eagerly and under `jax.jit`. The backend is the platform of concrete input arrays, else
JAX's default backend; `forced_backend` overrides it (tests lower for CUDA on a CPU machine).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
from jax.interpreters import batching, mlir

from jtblas import _compat, sharding

_override = threading.local()


@contextlib.contextmanager
def forced_backend(platform: str, *, compute_capability: int | None = None) -> Iterator[None]:
    """Within the block, launches target `platform` ("cuda" or "cpu") regardless of the arrays;
    `compute_capability` (e.g. 90) lets jax-triton compile for CUDA without querying a GPU."""
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
        `_scratch_output`), or jaxlib's per-launch allocation on the legacy call.
    """
    arrays = [arg for arg in args if isinstance(arg, (jax.Array, np.ndarray))]
    platform, compute_capability = target_platform(arrays)
    several = not isinstance(out_shape, jax.ShapeDtypeStruct)
    if isinstance(zeroed_outputs, bool):
        zeroed_outputs = (0,) if zeroed_outputs else ()
    zeroed_outputs = tuple(zeroed_outputs)
    stack = _compat.stack()
    if platform == "cuda" and stack.jax_triton_lowers_to_ffi:
        outs = list(out_shape) if several else [out_shape]
        if global_scratch is not None:
            _register_global_scratch(kernel, global_scratch)
        with warnings.catch_warnings():
            # Deprecated in jax-triton 0.4 for Refs (jax_triton/triton_lib.py), still honoured there.
            warnings.filterwarnings("ignore", "zeroed_outputs is deprecated", DeprecationWarning)
            results = _jax_triton().triton_call(
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
        results = sharding.vary_like(results, arrays)
        return tuple(results) if several else results[0]
    if platform == "cuda":
        target = _call_target(global_scratch)
        outs = list(out_shape) if several else [out_shape]
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
        # jax-triton's results carry no manual axes (vma): they vary as the operands do.
        results = sharding.vary_like(results[:-1] if scratch_output else results, arrays)
        return tuple(results) if several else results[0]
    if platform == "cpu":
        outs = _launch_interpreted(kernel, grid, args, list(out_shape) if several else [out_shape],
                                   dict(metaparams), zeroed_outputs)
        outs = sharding.vary_like(outs, arrays)  # as a callback's results, they carry no manual axes
        return tuple(outs) if several else outs[0]
    raise NotImplementedError(f"jtblas has no kernel backend for platform {platform!r}")


def drop_blank_triton_cache_dir() -> None:
    """Removes TRITON_CACHE_DIR="" from the environment (Triton's default cache applies again).

    A process that imported jax-triton directly, without `_jax_triton`'s restore, passes the blank
    value on to its children; the commands that launch Triton kernels on torch tensors (`jtblas
    bench`, `jtblas calibrate`) call this first, or every launch fails with "Could not create or
    locate cache dir"."""
    if os.environ.get("TRITON_CACHE_DIR") == "":
        del os.environ["TRITON_CACHE_DIR"]


def global_scratch_supported(platform: str) -> bool:
    """Whether a kernel launched on `platform` ("cuda" or "cpu") can have global scratch: always
    under the interpreter; on CUDA when jaxlib's Triton kernel call allocates it (jaxlib ≥ 0.11,
    whose `TritonKernel` takes `global_scratch_size`; jax-triton 0.3.1 does not pass it, so
    `_jax_triton` wraps jaxlib's module to), and not with jax-triton 0.4.x (`_register_global_scratch`)."""
    if platform == "cpu":
        return True
    return _jaxlib_kernel_takes_scratch() and not _compat.stack().jax_triton_lowers_to_ffi


@functools.cache
def _jaxlib_kernel_takes_scratch() -> bool:
    try:
        from jax._src.lib import gpu_triton
    except ImportError:
        return False
    return "global_scratch_size" in (getattr(gpu_triton.TritonKernel.__init__, "__doc__", None) or "")


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

    def TritonKernel(self, kernel_name: str, *args: Any) -> Any:  # noqa: N802 (jaxlib's name)
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


def _launch_interpreted(kernel, grid, args, out_shapes, metaparams, zeroed_outputs=()):
    array_positions = [i for i, arg in enumerate(args) if not isinstance(arg, (int, float))]
    scalars = {i: arg for i, arg in enumerate(args) if isinstance(arg, (int, float))}
    arrays = [args[i] for i in array_positions]

    def callback(*host_arrays):
        kernel_args = list(range(len(args)))
        for position, host in zip(array_positions, host_arrays):
            kernel_args[position] = _HostTensor(_interpreter_operand(np.asarray(host)))
        for position, value in scalars.items():
            kernel_args[position] = value
        outs = []
        for position, shape in enumerate(out_shapes):
            dtype = np.dtype(shape.dtype)
            compute_dtype = np.float32 if dtype == jnp.bfloat16 else dtype
            # Poisoned unless zeroed: an element the kernel does not write stays NaN (-1 for integers).
            poison = np.nan if np.issubdtype(dtype, np.floating) else -1
            outs.append(np.full(shape.shape, 0 if position in zeroed_outputs else poison, dtype=compute_dtype))
        with _interpreted_language():
            _interpreted(kernel)[grid](*kernel_args, *map(_HostTensor, outs), **metaparams)
        return [out.astype(shape.dtype) for out, shape in zip(outs, out_shapes)]

    interpret = functools.partial(jax.pure_callback, callback, out_shapes, vmap_method="sequential")
    return _interpreted_call_p.bind(*arrays, interpret=interpret,
                                    out_avals=tuple(jax.core.ShapedArray(s.shape, s.dtype) for s in out_shapes))


class ExportError(NotImplementedError):
    """`jax.export` of a product that runs on the CPU backend (Triton's interpreter)."""


EXPORT_ON_CPU = (
    "jtblas: cannot export (jax.export) a product that runs on the CPU backend: there the Triton "
    "kernel runs in Triton's interpreter inside a host callback (jax.pure_callback), and JAX cannot "
    "serialise host callbacks. Export on a CUDA GPU (the kernel is then a jax-triton custom call), "
    "or export jax.lax.dot_general / jnp.matmul in place of jtblas on the CPU."
)

# The interpreter's callback behind a primitive of its own: its lowering rule can see that the
# lowering is for `jax.export` (which would only fail later with JAX's terse "serialization of
# host_callbacks is not yet implemented") and say why. Otherwise it is `interpret`, unchanged.
INTERPRETED_CALL = "jtblas_interpreted_triton_call"  # the primitive's name, as jaxprs print it
_interpreted_call_p = jax.extend.core.Primitive(INTERPRETED_CALL)
_interpreted_call_p.multiple_results = True
_interpreted_call_p.def_impl(lambda *arrays, interpret, out_avals: interpret(*arrays))
_interpreted_call_p.def_abstract_eval(lambda *avals, interpret, out_avals: list(out_avals))


def _interpreted_call_lowering(ctx: Any, *arrays: Any, interpret: Any, out_avals: Any) -> Any:
    if ctx.module_context.lowering_parameters.for_export:
        raise ExportError(EXPORT_ON_CPU)
    return mlir.lower_fun(interpret, multiple_results=True)(ctx, *arrays)


def _interpreted_call_batching(arrays: Sequence[Any], dims: Sequence[Any], *, interpret: Any,
                               out_avals: Any) -> tuple[Any, list[int]]:
    in_axes = [None if d is batching.not_mapped else d for d in dims]
    outs = jax.vmap(interpret, in_axes=in_axes)(*arrays)
    return outs, [0] * len(outs)


mlir.register_lowering(_interpreted_call_p, _interpreted_call_lowering)
batching.primitive_batchers[_interpreted_call_p] = _interpreted_call_batching


def _interpreter_operand(array: np.ndarray) -> np.ndarray:
    if array.dtype == jnp.bfloat16:
        return array.astype(np.float32)
    return np.ascontiguousarray(array)


_language_lock = threading.Lock()


@contextlib.contextmanager
def _interpreted_language() -> Iterator[None]:
    """Swaps triton.language's own `@triton.jit` functions (`tl.cdiv`, `tl.zeros`, ...) for their
    interpreted versions while a kernel is interpreted, as TRITON_INTERPRET=1 would have made
    them at import; restored afterwards. (The interpreter patches tl's builtins the same way.)"""
    import triton.experimental.gluon  # noqa: F401  (imported lazily by the launcher; it checks tl's functions)
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    modules = (tl, tl.standard, tl.math)
    with _language_lock:
        saved = []
        for module in modules:
            for name, value in list(vars(module).items()):
                if isinstance(value, JITFunction):
                    saved.append((module, name, value))
                    setattr(module, name, _interpreted(value))
        try:
            yield
        finally:
            for module, name, value in saved:
                setattr(module, name, value)


@functools.cache
def _interpreted(kernel: Any) -> Any:
    """The interpreter's version of a `@triton.jit` function, without TRITON_INTERPRET.

    The function is rebuilt over a copy of its module's globals in which every `@triton.jit`
    helper is itself interpreted, so the compiled kernels of the module stay untouched (a GPU
    process can use both backends).
    """
    import types

    from triton.runtime.jit import JITFunction

    fn = kernel.fn
    namespace = dict(fn.__globals__)
    for name in fn.__code__.co_names:  # the globals this function refers to
        value = fn.__globals__.get(name)
        if isinstance(value, JITFunction) and value is not kernel:
            namespace[name] = _interpreted(value)
    rebuilt = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    rebuilt.__annotations__ = fn.__annotations__
    rebuilt.__wrapped__ = fn
    return _scoped_interpreted_function()(rebuilt)


@functools.cache
def _scoped_interpreted_function() -> type:
    from triton.runtime.interpreter import InterpretedFunction, _patch_lang

    class ScopedInterpretedFunction(InterpretedFunction):
        """A device-function call that undoes its patches of triton.language on return.
        (Triton's own leaves them in place, harmless under TRITON_INTERPRET=1 but fatal to later
        compilation in a process that also compiles kernels for the GPU.)"""

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            scope = _patch_lang(self.fn)
            try:
                return self.rewrite()(*args, **kwargs)
            finally:
                scope.restore()

    return ScopedInterpretedFunction


class _HostTensor:
    """The few tensor methods Triton's interpreter calls, over a NumPy array that is already on
    the host (so 'copy to host and back' are identities)."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.dtype = array.dtype

    def data_ptr(self) -> int:
        return self.array.ctypes.data

    def untyped_storage(self) -> _HostTensor:
        return self

    def cpu(self) -> _HostTensor:
        return self

    def storage_offset(self) -> int:
        return 0

    def size(self) -> tuple[int, ...]:
        return self.array.shape

    def stride(self) -> tuple[int, ...]:
        return tuple(s // self.array.itemsize for s in self.array.strides)

    def new_empty(self, *_: Any, **__: Any) -> _HostTensor:
        return _HostTensor(self.array)

    def set_(self, storage: _HostTensor, *_: Any) -> _HostTensor:
        return storage

    def copy_(self, _: Any) -> None:
        pass
