"""Stream-K GEMM (Osama et al., PPoPP 2023), in its data-parallel + Stream-K hybrid: a persistent
grid of PROGRAMS computes the first DP_TILES tiles whole (round robin), then shares the K
iterations of the remaining tiles evenly. Experimental: measured by
`benchmarks/stream_k_probe.py`, not a candidate of the model.

Only `@triton.jit` code lives here. Program p of P takes the K iterations [p·T/P, (p+1)·T/P) of
the T = (tiles − DP_TILES) · k_blocks of the shared tiles, in tile order. A tile it covers whole
is stored into C; a piece of a tile goes, in fp32, to its own slot of a workspace [P, 2,
BLOCK_M, BLOCK_N] (slot 0: the tile where the program starts, slot 1: the one where it ends),
and `stream_k_fixup` adds the pieces of each shared tile in program order, so the result is the
same run after run.
"""

import triton
import triton.language as tl

from jtblas.kernels.matmul import grouped_tile, reduce_k_blocks, store_tile, tile_bases


@triton.jit
def first_iteration(program, total, PROGRAMS: tl.constexpr):
    """The first K iteration of `program` (the even share of `total` iterations)."""
    return (program * total) // PROGRAMS


@triton.jit
def shared_iterations(M, N, K, DP_TILES, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """(K blocks per tile, first iteration of the shared tiles, number of shared iterations)."""
    k_blocks = tl.cdiv(K, BLOCK_K)
    shared = DP_TILES * k_blocks
    return k_blocks, shared, tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N) * k_blocks - shared


@triton.jit
def workspace_tile(ws_ptr, program, slot, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Pointers to one [BLOCK_M, BLOCK_N] fp32 slot of the workspace, row-major."""
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    return ws_ptr + (program * 2 + slot) * BLOCK_M * BLOCK_N + rows[:, None] * BLOCK_N + cols[None, :]


@triton.jit
def stream_k_kernel(
    a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, DP_TILES,
    ws_ptr, c_ptr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PROGRAMS: tl.constexpr, INPUT_PRECISION: tl.constexpr, EVEN_K: tl.constexpr,
    M_UNIT: tl.constexpr, N_UNIT: tl.constexpr,
):
    """Program `program_id(0)` of PROGRAMS: tiles program, program + PROGRAMS, ... below DP_TILES
    whole, then its share of the other tiles' K iterations (module doc).
    Sizes and strides as `matmul_kernel`'s, unscaled (the probe launches from torch, whose
    launcher specialises on their divisibility itself); M_UNIT, N_UNIT as there."""
    program = tl.program_id(0)
    k_blocks, shared, total = shared_iterations(M, N, K, DP_TILES, BLOCK_M, BLOCK_N, BLOCK_K)
    for tile in range(program, DP_TILES, PROGRAMS):
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        a_rows, b_cols = tile_bases(a_ptr, b_ptr, pid_m, pid_n, M, N, stride_am, stride_bn,
                                    BLOCK_M, BLOCK_N, M_UNIT, N_UNIT)
        acc = reduce_k_blocks(a_rows, b_cols, K, 0, k_blocks, stride_ak, stride_bk,
                              BLOCK_M, BLOCK_N, BLOCK_K, INPUT_PRECISION, EVEN_K, False, False)
        store_tile(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)
    start = shared + first_iteration(program, total, PROGRAMS)
    end = shared + first_iteration(program + 1, total, PROGRAMS)
    first_tile = start // k_blocks
    iteration = start
    while iteration < end:
        tile = iteration // k_blocks
        k_first = iteration - tile * k_blocks
        k_last = tl.minimum(k_blocks, k_first + end - iteration)
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        a_rows, b_cols = tile_bases(a_ptr, b_ptr, pid_m, pid_n, M, N, stride_am, stride_bn,
                                    BLOCK_M, BLOCK_N, M_UNIT, N_UNIT)
        acc = reduce_k_blocks(a_rows, b_cols, K, k_first, k_last, stride_ak, stride_bk,
                              BLOCK_M, BLOCK_N, BLOCK_K, INPUT_PRECISION, EVEN_K, False, False)
        if (k_first == 0) & (k_last == k_blocks):
            store_tile(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)
        else:
            slot = tl.where(tile == first_tile, 0, 1)
            tl.store(workspace_tile(ws_ptr, program, slot, BLOCK_M, BLOCK_N), acc)
        iteration += k_last - k_first


@triton.jit
def stream_k_fixup(
    ws_ptr, M, N, K, stride_cm, stride_cn, DP_TILES, c_ptr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PROGRAMS: tl.constexpr, FIX_ROWS: tl.constexpr,
):
    """Program (i, j): rows [j·FIX_ROWS, (j+1)·FIX_ROWS) of shared tile DP_TILES + i. If several
    programs shared the tile, the sum of their pieces (in program order) into C; a tile one
    program covered whole is left alone. (Rows apart, so that a few shared tiles with many
    pieces are summed by many SMs.)"""
    tile = DP_TILES + tl.program_id(0)
    k_blocks, shared, total = shared_iterations(M, N, K, DP_TILES, BLOCK_M, BLOCK_N, BLOCK_K)
    low = tile * k_blocks - shared
    high = low + k_blocks - 1
    # The programs holding iterations `low` and `high`: first_iteration(p) <= i < first_iteration(p+1).
    first = (low * PROGRAMS) // total
    while first_iteration(first + 1, total, PROGRAMS) <= low:
        first += 1
    last = (high * PROGRAMS) // total
    while first_iteration(last + 1, total, PROGRAMS) <= high:
        last += 1
    if first != last:
        rows = tl.program_id(1) * FIX_ROWS + tl.arange(0, FIX_ROWS)
        cols = tl.arange(0, BLOCK_N)
        piece = rows[:, None] * BLOCK_N + cols[None, :]
        acc = tl.zeros((FIX_ROWS, BLOCK_N), dtype=tl.float32)
        for program in range(first, last + 1):
            begin = first_iteration(program, total, PROGRAMS)
            if first_iteration(program + 1, total, PROGRAMS) > begin:  # programs may get none
                slot = tl.where((shared + begin) // k_blocks == tile, 0, 1)
                acc += tl.load(ws_ptr + (program * 2 + slot) * BLOCK_M * BLOCK_N + piece)
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        c_rows = pid_m * BLOCK_M + rows
        c_cols = pid_n * BLOCK_N + cols
        mask = (c_rows[:, None] < M) & (c_cols[None, :] < N)
        tl.store(c_ptr + c_rows[:, None] * stride_cm + c_cols[None, :] * stride_cn,
                 acc.to(c_ptr.dtype.element_ty), mask=mask)
