"""The experimental warp-specialized Gluon kernel (`jtblas/kernels/gluon_ws.py`): compiled for
sm_90 on any machine (warp specialization, register split, no spills, shared memory and global
scratch within bounds), lowered through jax-triton by `jtblas.launch`'s Gluon path, its bad
configs refused by name, and against float64 on every layout with tails on a GPU, launched by
torch (as `benchmarks/gluon_ws_probe.py`) and through JAX (`jtblas.ops.gluon_ws_matmul`)."""

import dataclasses
import itertools

import jax.numpy as jnp
import numpy as np
import pytest

import jtblas
from jtblas import launch, ops
from jtblas.kernels.gluon_ws import GLOBAL_SCRATCH_ALIGN, GLOBAL_SCRATCH_BYTES, PRODUCER_REGISTERS, ws_matmul_kernel
from tests.reference import lower_for_cuda, random_operands, relative_error, stored_shapes, tolerance
from tests.test_matmul import check_product

LAYOUTS = list(itertools.product([False, True], repeat=2))
LAYOUT_IDS = ["NN", "NT", "TN", "TT"]
SMEM_PER_BLOCK = 227 * 1024  # H100/H200 (jtblas.hardware.H200.smem_per_block)
CONFIG = jtblas.Config(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3, tma=True)


def compile_for_sm90(transpose_a, transpose_b, *, block_n=256, stages=3):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    launch.drop_blank_triton_cache_dir()  # a jax-triton import (at collection) blanks it
    meta = dict(BLOCK_M=128, BLOCK_N=block_n, BLOCK_K=64, GROUP_M=8, STAGES=stages, TRANSPOSE_A=transpose_a,
                TRANSPOSE_B=transpose_b, PRODUCER_REGS=PRODUCER_REGISTERS)
    names = ws_matmul_kernel.arg_names
    signature = {n: "*bf16" if n.endswith("_ptr") else "constexpr" if n in meta else "i32" for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if n.endswith("_ptr")}
    source = GluonASTSource(fn=ws_matmul_kernel, signature=signature, constexprs=meta, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=8))


@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
def test_compiles_warp_specialized_for_sm90(transpose_a, transpose_b):
    compiled = compile_for_sm90(transpose_a, transpose_b)
    ptx = compiled.asm["ptx"]
    assert "ttg.warp_specialize" in compiled.asm["ttgir"]
    assert compiled.metadata.num_warps == 12  # 8 consumer warps + a producer warpgroup
    assert ptx.count("setmaxnreg") >= 2 and "wgmma.mma_async" in ptx
    assert "ld.local" not in ptx and "st.local" not in ptx  # no register spills
    assert compiled.metadata.shared <= SMEM_PER_BLOCK
    assert compiled.metadata.global_scratch_size == GLOBAL_SCRATCH_BYTES
    assert compiled.metadata.global_scratch_align == GLOBAL_SCRATCH_ALIGN


def test_too_many_stages_overflow_shared_memory():
    """Five 48 KB stages and a 64 KB C tile compile to more shared memory than a block may have
    (Triton refuses only at launch), so the bound checked above is a real limit."""
    assert compile_for_sm90(False, False, stages=5).metadata.shared > SMEM_PER_BLOCK


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


@pytest.mark.gpu
@pytest.mark.skipif(_torch() is None, reason="launched by torch: needs torch with a CUDA GPU")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("m,n,k", [(200, 328, 136), (8, 8, 8), (1000, 520, 1032)])
def test_matches_float64_on_gpu(dtype, transpose_a, transpose_b, m, n, k):
    from jtblas.bench.contenders import gluon_ws_launch

    torch = _torch()
    launch.drop_blank_triton_cache_dir()  # a jax-triton import (by another test module) blanks it
    rng = np.random.default_rng()
    a = rng.standard_normal((k, m) if transpose_a else (m, k))
    b = rng.standard_normal((n, k) if transpose_b else (k, n))
    torch_dtype = getattr(torch, dtype)
    a_t = torch.tensor(a, device="cuda").to(torch_dtype)
    b_t = torch.tensor(b, device="cuda").to(torch_dtype)
    a64 = a_t.double().cpu().numpy()
    b64 = b_t.double().cpu().numpy()
    reference = (a64.T if transpose_a else a64) @ (b64.T if transpose_b else b64)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch_dtype)
    gluon_ws_launch(torch, a_t, b_t, c, CONFIG, transpose_a=transpose_a, transpose_b=transpose_b)
    torch.cuda.synchronize()
    assert relative_error(c.double().cpu().numpy(), reference) < tolerance(dtype, dtype)


def test_lowers_through_jax_triton_with_all_its_warps(monkeypatch):
    """jax-triton's CUDA lowering, on any machine: `jtblas.launch` compiles the Gluon kernel itself
    and hands jaxlib the compiled warp count (12: 8 consumers and the producer's warpgroup) and
    the global scratch of its descriptors."""
    monkeypatch.setattr(launch, "_jaxlib_kernel_takes_scratch", lambda: True)  # a jaxlib >= 0.11
    try:
        launch._jax_triton()  # imports jax-triton, keeping Triton's cache directory
    except ImportError:
        pytest.skip("jax-triton needs the jax CUDA plugin")
    import jax_triton.triton_lib as triton_lib

    library = getattr(triton_lib.triton_kernel_call_lib, "_library", triton_lib.triton_kernel_call_lib)
    kernels = []

    class Recorder:
        def __getattr__(self, name):
            return getattr(library, name)

        def TritonKernel(self, name, num_warps, num_ctas, shared, ptx, ttir, capability, **scratch):  # noqa: N802
            kernels.append(dict(name=name, num_warps=num_warps, shared=shared, ptx=ptx))
            return library.TritonKernel(name, num_warps, num_ctas, shared, ptx, ttir, capability)

    monkeypatch.setattr(triton_lib, "triton_kernel_call_lib", Recorder())
    launch._gluon_kernel.cache_clear()
    a, b = stored_shapes(1000, 520, 1032, "NT", "bfloat16")
    text = lower_for_cuda(lambda x, y: ops.gluon_ws_matmul(x, y, CONFIG, transpose_b=True), a, b)
    launch._gluon_kernel.cache_clear()
    assert "triton_kernel_call" in text
    [kernel] = kernels
    assert kernel["name"] == "ws_matmul_kernel" and kernel["num_warps"] == 12
    assert "setmaxnreg" in kernel["ptx"] and kernel["shared"] <= SMEM_PER_BLOCK


def test_cpu_launch_says_gluon_needs_a_gpu(rng):
    a, b, _ = random_operands(rng, 64, 64, 64, "bfloat16")
    with pytest.raises(NotImplementedError, match="Gluon kernel.*CUDA GPUs only"):
        ops.gluon_ws_matmul(a, b, CONFIG)


def test_bad_configs_name_the_reason():
    a = jnp.ones((64, 64), jnp.bfloat16)
    with pytest.raises(ValueError, match="not a TMA config"):
        ops.gluon_ws_matmul(a, a, dataclasses.replace(CONFIG, tma=False))
    with pytest.raises(ValueError, match="block_m=64 must be 16 x num_warps=8"):
        ops.gluon_ws_matmul(a, a, dataclasses.replace(CONFIG, block_m=64))
    with pytest.raises(ValueError, match="shared memory 311296 bytes"):
        ops.gluon_ws_matmul(a, a, dataclasses.replace(CONFIG, num_stages=5))
    with pytest.raises(ValueError, match="B row stride 36"):
        ops.gluon_ws_matmul(a[:, :24], jnp.ones((24, 36), jnp.bfloat16), CONFIG)
    with pytest.raises(ValueError, match="2-D"):
        ops.gluon_ws_matmul(a[None], a, CONFIG)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("m,n,k", [(200, 328, 136), (1000, 520, 1032)])
def test_matches_float64_through_jax(dtype, transpose_a, transpose_b, m, n, k, rng):
    check_product(lambda x, y: ops.gluon_ws_matmul(x, y, CONFIG, transpose_a=transpose_a, transpose_b=transpose_b),
                  "cuda", rng, m, n, k, dtype, transpose_a, transpose_b)
