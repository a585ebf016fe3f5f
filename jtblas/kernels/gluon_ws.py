"""A warp-specialized persistent GEMM for Hopper in Gluon (Triton 3.6's lower-level dialect):
C = A · B, fp32 accumulation, bf16/fp16 operands and C through device-side TMA descriptors.

Only `@gluon.jit` code lives here. Experimental, not a model candidate: launched by torch
(`benchmarks/gluon_ws_probe.py`) and through JAX by `jtblas.ops.gluon_ws_matmul` (jax-triton
0.3.1 compiles `@triton.jit` functions only; `jtblas.launch` compiles Gluon ones itself).

Why (2026-11-30, BENCHMARKS.md at 705f18b): under sustained load cuBLAS's warp-specialized kernels do more
work per clock than our Triton kernels, whose K loop issues TMA loads and wgmma from the same
warps (Triton 3.6 warp-specializes only on Blackwell). Here one producer warp runs ahead filling
a ring of STAGES shared-memory buffers with TMA loads (an mbarrier per buffer each way: "ready"
when its bytes have landed, "empty" when the wgmma that read it has finished); the default
partition, two consumer warpgroups, runs wgmma on a 128 x BLOCK_N tile (64 rows each) and the
epilogue, whose TMA store overlaps the next tile's K loop. Tiles are walked persistently
(program p: tiles p, p + programs, ...) in grouped order; tails are the copy engine's (zero-filled
loads, clipped stores). Requirements: 16-byte aligned base pointers and row strides.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from jtblas.kernels.matmul import grouped_tile

# Global scratch per program: three device-side descriptors of 128 bytes (as matmul_tma_kernel).
GLOBAL_SCRATCH_BYTES = 3 * 128
GLOBAL_SCRATCH_ALIGN = 128
# Registers per thread of the producer warp (`setmaxnreg`): it only computes tile coordinates and
# issues copies; the consumers get the rest of the register file.
PRODUCER_REGISTERS = 40


@gluon.jit
def producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K,
             BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
             STAGES: gl.constexpr, TRANSPOSE_A: gl.constexpr, TRANSPOSE_B: gl.constexpr):
    """The worker partition (one warp): for every K step of every tile of this program, waits
    until the ring's next buffer is empty, then loads the A and B blocks into it with TMA."""
    tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    k_blocks = gl.cdiv(K, BLOCK_K)
    count = 0
    for tile in range(gl.program_id(0), tiles, gl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for kb in range(k_blocks):
            stage = count % STAGES
            phase = (count // STAGES) & 1
            mbarrier.wait(empty.index(stage), phase ^ 1)  # a fresh mbarrier counts as phase 1 done
            bar = ready.index(stage)
            mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            if TRANSPOSE_A:
                tma.async_copy_global_to_shared(a_desc, [kb * BLOCK_K, pid_m * BLOCK_M], bar, a_bufs.index(stage))
            else:
                tma.async_copy_global_to_shared(a_desc, [pid_m * BLOCK_M, kb * BLOCK_K], bar, a_bufs.index(stage))
            if TRANSPOSE_B:
                tma.async_copy_global_to_shared(b_desc, [pid_n * BLOCK_N, kb * BLOCK_K], bar, b_bufs.index(stage))
            else:
                tma.async_copy_global_to_shared(b_desc, [kb * BLOCK_K, pid_n * BLOCK_N], bar, b_bufs.index(stage))
            count += 1


@gluon.jit
def consumer(a_bufs, b_bufs, ready, empty, c_desc, c_smem, M, N, K,
             BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
             STAGES: gl.constexpr, TRANSPOSE_A: gl.constexpr, TRANSPOSE_B: gl.constexpr):
    """The default partition (num_warps warps): wgmma over the ring's buffers as they fill, each
    buffer handed back once the next K step's wgmma is issued and its own has finished; then the
    tile's epilogue through shared memory and a TMA store left in flight until the next tile's."""
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                     instr_shape=[16, BLOCK_N, 16])
    tiles = gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    k_blocks = gl.cdiv(K, BLOCK_K)
    count = 0
    for tile in range(gl.program_id(0), tiles, gl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = gl.zeros((BLOCK_M, BLOCK_N), gl.float32, layout)
        for kb in range(k_blocks):
            stage = count % STAGES
            mbarrier.wait(ready.index(stage), (count // STAGES) & 1)
            a = a_bufs.index(stage)
            b = b_bufs.index(stage)
            if TRANSPOSE_A:
                a = a.permute((1, 0))
            if TRANSPOSE_B:
                b = b.permute((1, 0))
            acc = warpgroup_mma(a, b, acc, is_async=True)
            acc, a, b = warpgroup_mma_wait(1, deps=(acc, a, b))
            # The previous K step's wgmma has finished: its buffers go back to the producer.
            mbarrier.arrive(empty.index((count + STAGES - 1) % STAGES), pred=kb > 0)
            count += 1
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty.index((count + STAGES - 1) % STAGES))
        tma.store_wait(0)  # the previous tile's store has read c_smem
        c_smem.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [pid_m * BLOCK_M, pid_n * BLOCK_N], c_smem)
    tma.store_wait(0)


@gluon.jit
def operand_ring(ptr, rows, cols, row_stride, BLOCK_ROWS: gl.constexpr, BLOCK_COLS: gl.constexpr,
                 STAGES: gl.constexpr):
    """A descriptor of a row-major [rows, cols] operand (rows `row_stride` elements apart) read
    BLOCK_ROWS x BLOCK_COLS at a time, and a ring of STAGES shared-memory buffers for its blocks."""
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_ROWS, BLOCK_COLS], ptr.dtype.element_ty)
    desc = tma.make_tensor_descriptor(ptr, [rows, cols], [row_stride, 1], [BLOCK_ROWS, BLOCK_COLS], layout)
    return desc, gl.allocate_shared_memory(ptr.dtype.element_ty, [STAGES, BLOCK_ROWS, BLOCK_COLS], layout)


@gluon.jit
def ws_matmul_kernel(a_ptr, b_ptr, M, N, K, lda, ldb, c_ptr,
                     BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                     STAGES: gl.constexpr, TRANSPOSE_A: gl.constexpr, TRANSPOSE_B: gl.constexpr,
                     PRODUCER_REGS: gl.constexpr):
    """C [M, N] (dense) = A · B, A stored [M, K] (TRANSPOSE_A: [K, M]) with rows lda elements
    apart, B [K, N] (TRANSPOSE_B: [N, K]) with rows ldb apart. Launch a grid of (programs,) with
    num_warps=8 (the consumers; the producer warp comes on top, PRODUCER_REGS registers each).
    The output pointer comes last, as jax-triton passes it."""
    if TRANSPOSE_A:
        a_desc, a_bufs = operand_ring(a_ptr, K, M, lda, BLOCK_K, BLOCK_M, STAGES)
    else:
        a_desc, a_bufs = operand_ring(a_ptr, M, K, lda, BLOCK_M, BLOCK_K, STAGES)
    if TRANSPOSE_B:
        b_desc, b_bufs = operand_ring(b_ptr, N, K, ldb, BLOCK_N, BLOCK_K, STAGES)
    else:
        b_desc, b_bufs = operand_ring(b_ptr, K, N, ldb, BLOCK_K, BLOCK_N, STAGES)
    dtype: gl.constexpr = c_ptr.dtype.element_ty
    c_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], dtype)
    c_desc = tma.make_tensor_descriptor(c_ptr, [M, N], [N, 1], [BLOCK_M, BLOCK_N], c_layout)
    c_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], c_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    gl.warp_specialize([
        (consumer, (a_bufs, b_bufs, ready, empty, c_desc, c_smem, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                    STAGES, TRANSPOSE_A, TRANSPOSE_B)),
        (producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
                    STAGES, TRANSPOSE_A, TRANSPOSE_B)),
    ], [1], [PRODUCER_REGS])

