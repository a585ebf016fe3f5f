"""The experimental warp-specialized Gluon kernel (`jtblas/kernels/gluon_ws.py`): compiled for
sm_90 on any machine (warp specialization, register split, no spills, shared memory and global
scratch within bounds), and against float64 on every layout with tails on a GPU (launched by
torch, as `benchmarks/gluon_ws_probe.py` does; jax-triton cannot launch Gluon kernels)."""

import itertools

import numpy as np
import pytest

from jtblas.kernels.gluon_ws import GLOBAL_SCRATCH_ALIGN, GLOBAL_SCRATCH_BYTES, ws_matmul_kernel
from tests.reference import relative_error, tolerance

LAYOUTS = list(itertools.product([False, True], repeat=2))
LAYOUT_IDS = ["NN", "NT", "TN", "TT"]
SMEM_PER_BLOCK = 227 * 1024  # H100/H200 (jtblas.hardware.H200.smem_per_block)


def compile_for_sm90(transpose_a, transpose_b, *, block_n=256, stages=3):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    meta = dict(BLOCK_M=128, BLOCK_N=block_n, BLOCK_K=64, GROUP_M=8, STAGES=stages, TRANSPOSE_A=transpose_a,
                TRANSPOSE_B=transpose_b, PRODUCER_REGS=40)
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
    gluon_ws_launch(torch, a_t, b_t, c, transpose_a=transpose_a, transpose_b=transpose_b)
    torch.cuda.synchronize()
    assert relative_error(c.double().cpu().numpy(), reference) < tolerance(dtype, dtype)
