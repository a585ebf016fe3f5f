"""benchmarks/native_triton_probe.py lowers what it says, on any machine: jtblas's CUDA launches
become XLA's own Triton custom call carrying our kernel's Triton IR (parsed into the dialect
jaxlib bundles), with the launch's grid, warps and stages and only array operands (the sizes and
strides compiled in); launches that need global scratch stay on jax-triton."""

import jax
import jax.numpy as jnp
import pytest

import jtblas
from jtblas import jax_triton_adapter, launch_specs
from jtblas.config import Config, Problem
from jtblas.kernels.matmul import matmul_kernel
from tests.reference import load_script, lower_for_cuda

CONFIG = Config.from_short("64x64x32 w4 s3 g8")


@pytest.fixture(scope="module")
def probe():
    return load_script("benchmarks/native_triton_probe.py")


def test_the_kernel_ir_takes_only_its_pointers(probe):
    from jax._src.interpreters import mlir
    from jax._src.lib import triton as jaxlib_triton
    from jax._src.lib.mlir import ir

    problem = Problem(m=100, n=80, k=96)
    spec = launch_specs.launch_spec(problem, CONFIG)
    a, b, c = (jax.ShapeDtypeStruct(shape, jnp.bfloat16) for shape in ((100, 96), (96, 80), (100, 80)))
    ir_bytes = probe.kernel_ir(matmul_kernel, args=[a, b, *spec.scalars], out_shapes=[c],
                               metaparams=spec.metaparams, num_warps=4, num_stages=3, compute_capability=90)
    context = mlir.make_ir_context()
    jaxlib_triton.dialect.register_dialect(context)
    with context:
        text = str(ir.Module.parse(ir_bytes))
    header = next(line for line in text.splitlines() if "tt.func public @matmul_kernel" in line)
    assert header.count("%arg") == 3 and header.count("!tt.ptr<bf16>") == 3, header


def test_matmul_lowers_to_xla_triton_calls(probe, monkeypatch):
    monkeypatch.setattr(jax_triton_adapter, "triton_call", probe.native_triton_call)
    a = jax.ShapeDtypeStruct((100, 96), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((96, 80), jnp.bfloat16)
    text = lower_for_cuda(lambda a, b: jtblas.matmul(a, b, config=CONFIG), a, b)
    assert text.count(probe.TARGET) == 1 and "triton_kernel_call" not in text
    grid = launch_specs.launch_spec(Problem(m=100, n=80, k=96), CONFIG).grid
    assert f"grid_x = {grid[0]} : i32" in text and "num_warps = 4 : i32" in text and "num_stages = 3 : i32" in text
    # A fused epilogue: its bias is one more operand, before C.
    bias = jax.ShapeDtypeStruct((80,), jnp.float32)
    text = lower_for_cuda(lambda a, b, bias: jtblas.matmul(a, b, bias=bias, activation="gelu", config=CONFIG),
                          a, b, bias)
    assert text.count(probe.TARGET) == 1 and "triton_kernel_call" not in text
    # A split product: the partials' kernel and the sum, two custom calls.
    split = Config.from_short("64x64x32 w4 s3 g8 k2")
    text = lower_for_cuda(lambda a, b: jtblas.matmul(a, b, config=split), a, b)
    assert text.count(probe.TARGET) == 2 and "triton_kernel_call" not in text


def test_global_scratch_stays_on_jax_triton(probe, monkeypatch):
    calls = []
    monkeypatch.setattr(probe, "_original_triton_call", lambda kernel, **kwargs: calls.append(kwargs) or ["out"])
    out = probe.native_triton_call(matmul_kernel, grid=(1,), args=[], out_shapes=[], num_warps=4, num_stages=3,
                                   compute_capability=90, metaparams={}, zeroed_outputs=(),
                                   global_scratch=(128, 64))
    assert out == ["out"] and calls[0]["global_scratch"] == (128, 64)
