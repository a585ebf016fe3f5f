"""`jax.export` of code that uses jtblas, and symbolic (shape-polymorphic) dimensions.

On a GPU the kernel is a jax-triton custom call and exports like any jitted function (its custom
call target carries no compatibility guarantee, so `jax.export` needs it named in
`disabled_checks`). On the CPU the kernel runs in Triton's interpreter inside a host callback,
which JAX cannot serialise: jtblas says so when the export lowers. Symbolic dimensions: `matmul`
raises (its grid and config come from static sizes), `dot_general` falls back to XLA.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jtblas
from jtblas import launch
from tests.reference import relative_error, require_jax_triton, tolerance

# jax-triton's custom call targets (the typed-FFI one and the legacy one).
TRITON_TARGETS = [jax.export.DisabledSafetyCheck.custom_call(t) for t in ("triton_kernel_call_ffi",
                                                                          "triton_kernel_call")]


def _operands(rng, m=37, n=29, k=53, dtype=jnp.float32):
    a = jnp.asarray(rng.standard_normal((m, k)), dtype)
    b = jnp.asarray(rng.standard_normal((k, n)), dtype)
    return a, b, np.asarray(a, np.float64) @ np.asarray(b, np.float64)


def _serialised_round_trip(exported: jax.export.Exported) -> jax.export.Exported:
    pytest.importorskip("flatbuffers", reason="jax.export serialisation needs flatbuffers (the test extra)")
    return jax.export.deserialize(exported.serialize())


@pytest.mark.parametrize("transform", ["forward", "grad"])
def test_export_on_cpu_names_the_interpreter(transform):
    a = jnp.ones((8, 16), jnp.float32)
    b = jnp.ones((16, 4), jnp.float32)
    f = jtblas.matmul if transform == "forward" else jax.grad(lambda x, y: jtblas.matmul(x, y).sum())
    with pytest.raises(launch.ExportError) as info:
        jax.export.export(jax.jit(f))(a, b)
    message = str(info.value)
    assert "jax.export" in message and "interpreter" in message and "host callback" in message
    assert "GPU" in message
    # Plain jit (no export) still lowers and runs the same product.
    np.testing.assert_allclose(np.asarray(jax.jit(jtblas.matmul)(a, b)), np.full((8, 4), 16.0))


def test_export_on_cpu_error_is_a_not_implemented_error():
    """Callers that caught JAX's own NotImplementedError (for host callbacks) still catch it."""
    a = jnp.ones((8, 16), jnp.bfloat16)
    with pytest.raises(NotImplementedError, match="jtblas: cannot export"):
        jax.export.export(jax.jit(jtblas.matmul))(a, a.T)


def test_symbolic_dimension_in_matmul_is_a_clear_error():
    (m,) = jax.export.symbolic_shape("m")
    a = jax.ShapeDtypeStruct((m, 16), jnp.float32)
    b = jax.ShapeDtypeStruct((16, 4), jnp.float32)
    with pytest.raises(ValueError) as info:
        jax.export.export(jax.jit(jtblas.matmul))(a, b)
    message = str(info.value)
    assert "jtblas needs static shapes" in message and "symbolic dimension m" in message
    assert "a.shape=(m, 16)" in message


def test_symbolic_dimension_in_b_is_named():
    (n,) = jax.export.symbolic_shape("n")
    a = jax.ShapeDtypeStruct((8, 16), jnp.float32)
    b = jax.ShapeDtypeStruct((16, n), jnp.float32)
    with pytest.raises(ValueError, match=r"symbolic dimension n in b.shape=\(16, n\)"):
        jax.export.export(jax.jit(jtblas.matmul))(a, b)


def test_dot_general_with_symbolic_batch_falls_back_to_xla(rng):
    """The drop-in falls back to lax.dot_general for symbolic shapes, as for anything the kernel
    does not cover: a shape-polymorphic export works (and serialises) on any backend."""
    (batch,) = jax.export.symbolic_shape("batch")
    dims = (((1,), (0,)), ((), ()))
    f = jax.jit(lambda x, y: jtblas.dot_general(x, y, dims))
    exported = jax.export.export(f)(jax.ShapeDtypeStruct((batch, 53), jnp.float32),
                                    jax.ShapeDtypeStruct((53, 29), jnp.float32))
    assert "callback" not in exported.mlir_module() and "stablehlo.dot_general" in exported.mlir_module()
    for m in (1, 37):
        a, b, reference = _operands(rng, m=m)
        assert relative_error(exported.call(a, b), reference) < tolerance("float32", "float32")
    a, b, reference = _operands(rng, m=5)
    assert relative_error(_serialised_round_trip(exported).call(a, b), reference) < tolerance("float32", "float32")


def test_dot_general_with_static_shapes_still_runs_the_kernel():
    a = jax.ShapeDtypeStruct((8, 16), jnp.float32)
    b = jax.ShapeDtypeStruct((16, 4), jnp.float32)
    text = jax.jit(lambda x, y: jtblas.dot_general(x, y, (((1,), (0,)), ((), ())))).lower(a, b).as_text()
    assert "callback" in text  # the interpreter's host callback: the kernel, not XLA's dot


def test_export_for_cuda_without_a_gpu():
    """Cross-export: jax-triton lowers the kernel for sm_90 on this machine, the exported module
    holds the Triton custom call, and it serialises and deserialises (running it needs a GPU)."""
    require_jax_triton()
    a = jax.ShapeDtypeStruct((100, 64), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((64, 48), jnp.bfloat16)
    with launch.forced_backend("cuda", compute_capability=90):
        exported = jax.export.export(jax.jit(jtblas.matmul), platforms=["cuda"], disabled_checks=TRITON_TARGETS)(a, b)
    assert exported.platforms == ("cuda",)
    assert "triton_kernel_call" in exported.mlir_module()
    assert exported.out_avals[0].shape == (100, 48) and exported.out_avals[0].dtype == jnp.bfloat16
    restored = _serialised_round_trip(exported)
    assert restored.in_avals == exported.in_avals and restored.out_avals == exported.out_avals


def test_export_for_cuda_without_the_disabled_check_is_refused_by_jax():
    """Documents JAX's own check: the Triton custom call must be named in `disabled_checks`."""
    require_jax_triton()
    a = jax.ShapeDtypeStruct((64, 64), jnp.bfloat16)
    with launch.forced_backend("cuda", compute_capability=90):
        with pytest.raises(ValueError, match="custom calls whose targets have no compatibility guarantees"):
            jax.export.export(jax.jit(jtblas.matmul), platforms=["cuda"])(a, a)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_export_serialise_deserialise_and_run_on_the_gpu(rng, dtype):
    a, b, reference = _operands(rng, m=257, n=129, k=300, dtype=jnp.dtype(dtype))
    loss = lambda x, y: jtblas.matmul(x, y).astype(jnp.float32).sum()
    for f, expected in ((jtblas.matmul, reference),
                        (jax.grad(loss), np.ones((257, 129)) @ np.asarray(b, np.float64).T)):
        exported = jax.export.export(jax.jit(f), disabled_checks=TRITON_TARGETS)(a, b)
        assert exported.platforms == ("cuda",) and "triton_kernel_call" in exported.mlir_module()
        restored = _serialised_round_trip(exported)
        assert relative_error(restored.call(a, b), expected) < tolerance(dtype, dtype)
