"""The CPU backend: a `@triton.jit` kernel under Triton's interpreter, over NumPy buffers inside
`jax.pure_callback`, behind a primitive of its own (`INTERPRETED_CALL`).

Same kernel, grid and meta-parameters as on the GPU. bf16 operands are upcast to fp32 first (the
interpreter computes bf16 `tl.dot` on raw bits, upstream triton issue 11584; exact, since
accumulation is fp32 anyway), and a bf16 output is computed in fp32 and rounded to bf16
(round-to-nearest-even, as the kernel's cast). Triton is imported on the first call.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
from jax.interpreters import batching, mlir


def launch_interpreted(kernel: Any, grid: tuple[int, ...], args: Sequence[jax.Array | int | float],
                       out_shapes: Sequence[jax.ShapeDtypeStruct], metaparams: dict[str, Any],
                       zeroed_outputs: Sequence[int] = ()) -> list[jax.Array]:
    """Runs `kernel[grid](*args, *outs, **metaparams)` under the interpreter and returns the
    outputs of `out_shapes`: zeros at the positions in `zeroed_outputs`, else NaN (-1 for
    integers) where the kernel writes nothing."""
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


# Zeros after each operand's last element, this many: a K-phase tile's shifted loads read up to
# VECTOR − 1 elements past a row, inside the 16-byte block that holds its last element, into lanes
# that are never stored (`matmul_kernel`); on a GPU that memory is the operand allocation's. Past
# a NumPy array it is whatever the heap holds (inf or NaN at times: the result is the same, but
# NumPy warns of the overflow and runs differ), so the interpreter's operands end in these.
OPERAND_TAIL_ELEMENTS = 16


def _interpreter_operand(array: np.ndarray) -> np.ndarray:
    """`array` as the interpreted kernel reads it: C-contiguous, bf16 as fp32, followed in memory
    by `OPERAND_TAIL_ELEMENTS` zeros."""
    dtype = np.float32 if array.dtype == jnp.bfloat16 else array.dtype
    buffer = np.zeros(array.size + OPERAND_TAIL_ELEMENTS, dtype)
    buffer[:array.size] = array.reshape(-1)
    return buffer[:array.size].reshape(array.shape)


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
