"""Float64 references and per-dtype tolerances for GEMM tests."""

import importlib.util
import itertools
import math
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

# Relative Frobenius error allowed against a float64 product of the same (dtype-rounded) inputs.
# The error is the output rounding (bf16: 2^-9, fp16: 2^-12 relative per element) plus fp32
# accumulation, or tf32's 10-bit mantissa on the inputs for fp32 with DEFAULT precision.
TOLERANCE = {
    ("bfloat16", "tf32"): 8e-3,
    ("float16", "tf32"): 1.5e-3,
    ("float32", "tf32"): 4e-3,
    ("float32", "ieee"): 2e-5,
}
# When the output is fp32 (preferred_element_type) only accumulation error remains.
FP32_OUTPUT_TOLERANCE = {"bfloat16": 2e-5, "float16": 2e-5}

DTYPES = {"float32": jnp.float32, "float16": jnp.float16, "bfloat16": jnp.bfloat16}
# Operand layouts (transpose_a, transpose_b) and their BLAS names.
LAYOUTS = list(itertools.product([False, True], repeat=2))
LAYOUT_IDS = ["NN", "NT", "TN", "TT"]


def stored(rng, shape, dtype: str) -> jax.Array:
    """Fresh standard-normal values of `shape`, stored in `dtype` (a `DTYPES` name)."""
    return jnp.asarray(rng.standard_normal(shape), DTYPES[dtype])


# `jtblas.ACTIVATIONS` (and None) in float64, for references: jax.nn's forms.
_erf = np.vectorize(math.erf)
FLOAT64_ACTIVATIONS = {
    None: lambda x: x,
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    "gelu": lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
    "silu": lambda x: x / (1 + np.exp(-x)),
}


def tolerance(dtype: str, out_dtype: str, precision: str = "tf32") -> float:
    if out_dtype == "float32" and dtype != "float32":
        return FP32_OUTPUT_TOLERANCE[dtype]
    return TOLERANCE[(dtype, precision)]


def random_operands(rng, m, n, k, dtype, *, transpose_a=False, transpose_b=False, batch=()):
    """Random A and B, stored as the layout says, in `dtype`, plus their float64 values as used."""
    a = rng.standard_normal((*batch, m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a_stored = np.swapaxes(a, -1, -2) if transpose_a else a
    b_stored = b.T if transpose_b else b
    a_j = jnp.asarray(np.ascontiguousarray(a_stored), dtype=DTYPES[dtype])
    b_j = jnp.asarray(np.ascontiguousarray(b_stored), dtype=DTYPES[dtype])
    a64 = np.asarray(a_j, np.float64)
    b64 = np.asarray(b_j, np.float64)
    a64 = np.swapaxes(a64, -1, -2) if transpose_a else a64
    b64 = b64.T if transpose_b else b64
    return a_j, b_j, a64 @ b64


def relative_error(result: jax.Array, reference: np.ndarray) -> float:
    result = np.asarray(result, np.float64)
    assert result.shape == reference.shape, (result.shape, reference.shape)
    assert np.all(np.isfinite(result)), "non-finite output (an unwritten, poisoned element?)"
    scale = np.linalg.norm(reference)
    return float(np.linalg.norm(result - reference) / (scale if scale > 0 else 1.0))


def assert_value_and_grads_match(loss, reference, sharded_args, args) -> None:
    """jit(value_and_grad(loss)) on `sharded_args` equals value_and_grad(reference) on `args` (the
    same values, unsharded): the value to 1e-5, every argument's gradient to 1e-4 by relative norm."""
    argnums = tuple(range(len(args)))
    got = jax.jit(jax.value_and_grad(loss, argnums=argnums))(*sharded_args)
    want = jax.value_and_grad(reference, argnums=argnums)(*args)
    assert math.isclose(float(got[0]), float(want[0]), rel_tol=1e-5), (float(got[0]), float(want[0]))
    for g, v in zip(got[1], want[1], strict=True):
        assert relative_error(g, np.asarray(v, np.float64)) < 1e-4


def stored_shapes(m: int, n: int, k: int, layout: str, dtype) -> tuple[jax.ShapeDtypeStruct, jax.ShapeDtypeStruct]:
    """Abstract A and B as stored for `layout` ("NN", "NT", "TN", "TT"): nothing is allocated."""
    a = (k, m) if layout[0] == "T" else (m, k)
    b = (n, k) if layout[1] == "T" else (k, n)
    return jax.ShapeDtypeStruct(a, jnp.dtype(dtype)), jax.ShapeDtypeStruct(b, jnp.dtype(dtype))


# jax-triton imports only beside a CUDA-enabled jaxlib (the jax CUDA plugin; .ci/run installs it
# without its dependencies); it then raises ImportError, not ModuleNotFoundError.
NO_CUDA_PLUGIN = "jax-triton needs the jax CUDA plugin: pip install --no-deps jax-cuda12-plugin==<jaxlib version>"


def require_jax_triton():
    """The jax_triton module, or a skip (with the reason above) where it cannot be imported."""
    import pytest

    return pytest.importorskip("jax_triton", reason=NO_CUDA_PLUGIN, exc_type=ImportError)


def lower_for_cuda(fn, *shapes) -> str:
    """jax-triton's real CUDA lowering of jit(fn) for sm_90 on any machine: the Triton kernels
    are compiled to PTX (a compile error fails here); returns the lowered module's text.
    Skips the calling test where jax-triton cannot be imported."""
    from jtblas import launch

    require_jax_triton()
    with launch.forced_backend("cuda", compute_capability=90):
        # A new function object: JAX's trace cache, keyed on the function, does not see the
        # forced backend, and `fn` may have been traced for the interpreter already.
        return jax.jit(lambda *args: fn(*args)).trace(*shapes).lower(lowering_platforms=("cuda",)).as_text()


def compile_for_sm90(kernel, metaparams: dict, *, num_warps: int, num_stages: int, pointer_type: str = "*bf16",
                     pointer_types: dict | None = None, divisible: tuple[str, ...] = (), capability: int = 90):
    """`triton.compile` of a jtblas kernel for sm_90 (or `capability`) on any machine (no GPU):
    pointers of `pointer_type` (per name: `pointer_types`) aligned to 16 bytes, `metaparams` as its
    constexprs (those left out at their defaults), every other argument an i32, those in
    `divisible` specialised as multiples of 16 (as jax-triton passes them), FMA contraction on as
    `jax_triton_adapter` asks for it (Triton 3.10 turns it off by default). Returns the compiled
    kernel (`.asm["ttgir"]`, `.asm["ptx"]`, `.metadata`)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from jtblas import jax_triton_adapter

    jax_triton_adapter.drop_blank_triton_cache_dir()  # a jax-triton import (at collection) blanks it
    names = kernel.arg_names
    # Constexprs left out take their defaults, as a launch does.
    metaparams = {**{p.name: p.default for p in kernel.params if p.is_constexpr and p.has_default}, **metaparams}
    pointers = {n: (pointer_types or {}).get(n, pointer_type) for n in names if n.endswith("_ptr")}
    signature = {n: pointers.get(n) or ("constexpr" if n in metaparams else "i32") for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n in pointers or n in divisible}
    return triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=metaparams, attrs=attrs),
                          target=GPUTarget("cuda", capability, 32),
                          options=dict(num_warps=num_warps, num_stages=num_stages, enable_fp_fusion=True))


def use_jax_triton_031(monkeypatch) -> None:
    """Has jtblas take the installed stack for the GPU machine's (jax 0.11.2, triton 3.6.0,
    jax-triton 0.3.1), for tests of `jtblas.jax_triton_adapter`'s 0.3.1 path under any installed version."""
    from jtblas import _compat

    stack = _compat.check({"jax": "0.11.2", "triton": "3.6.0", "jax-triton": "0.3.1"})
    monkeypatch.setattr(_compat, "stack", lambda: stack)


def count_equations(jaxpr, primitive: str) -> int:
    """How many equations of `primitive` run in `jaxpr` (a `jax.make_jaxpr` result), counting
    each call of a sub-jaxpr (custom_vjp, pjit, ...). The printed jaxpr of jax 0.12 shows a
    sub-jaxpr used several times once, so counting names in its text undercounts."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)  # a ClosedJaxpr's Jaxpr (jax < 0.12 keeps them apart)
    count = 0
    for eqn in getattr(inner, "eqns", ()):
        count += eqn.primitive.name == primitive
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if hasattr(getattr(sub, "jaxpr", sub), "eqns"):
                    count += count_equations(sub, primitive)
    return count


# The primitive of a kernel launch on a GPU: jax-triton's (0.3.1 and 0.4.x).
TRITON_CALL = "triton_kernel_call"


def kernel_calls(fn, *args) -> int:
    """How many kernel launches `fn(*args)` traces to on the default backend: each is one
    `jtblas.interpreter.INTERPRETED_CALL` equation on the CPU, one `TRITON_CALL` on a GPU (none
    means a silent fallback to XLA)."""
    from jtblas import interpreter

    jaxpr = jax.make_jaxpr(fn)(*args)
    return count_equations(jaxpr, interpreter.INTERPRETED_CALL) + count_equations(jaxpr, TRITON_CALL)


def record_planned_problems(monkeypatch) -> list:
    """The problems the model is asked to plan from now on (appended as `plan_for_problem` runs)."""
    import jtblas.model.repack

    asked = []
    plan = jtblas.model.repack.plan_for_problem

    def recording(problem, hardware, mode="auto"):
        asked.append(problem)
        return plan(problem, hardware, mode)

    monkeypatch.setattr(jtblas.model.repack, "plan_for_problem", recording)
    return asked


ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_script(relative_path: str):
    """The Python file at `relative_path` (from the repository root, e.g. "benchmarks/plan_probe.py")
    imported as a module named after it, and registered in `sys.modules` (Flax modules and
    dataclasses look their module up there)."""
    path = ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
