"""The tiled GEMM kernel: C = A · B with fp32 accumulation, any strides, masked tails.

Only `@triton.jit` code lives here. The launcher passes runtime arguments in this order:
operand pointers, sizes, strides, then the output pointer (jax-triton appends outputs last).
"""

import triton
import triton.language as tl


@triton.jit
def grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Maps a linear program id to (tile row, tile column), walking GROUP_M tile rows together
    so that consecutive programs share B columns and A rows in L2 (Triton tutorial 03)."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * tiles_n
    group = pid // tiles_per_group
    first_m = group * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % tiles_per_group) % group_rows
    pid_n = (pid % tiles_per_group) // group_rows
    return pid_m, pid_n


@triton.jit
def converted(x, DTYPE: tl.constexpr):
    """x converted in registers to DTYPE ("bfloat16", "float16" or "float32"; "" leaves it)."""
    if DTYPE == "bfloat16":
        x = x.to(tl.bfloat16)
    elif DTYPE == "float16":
        x = x.to(tl.float16)
    elif DTYPE == "float32":
        x = x.to(tl.float32)
    return x


@triton.jit
def rounded(x, DTYPE: tl.constexpr):
    """x as fp32, rounded to the nearest value of DTYPE ("bfloat16", "float16"; ties to even): the
    values `converted` gives, kept in fp32 (ROUND_ONLY). bf16 by integer arithmetic on the bits:
    Triton's interpreter truncates fp32 to bf16 (triton/runtime/interpreter.py, `_convert_float`)."""
    x = x.to(tl.float32)
    if DTYPE == "bfloat16":
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & 0xFFFF0000
        x = bits.to(tl.float32, bitcast=True)
    elif DTYPE == "float16":
        x = x.to(tl.float16).to(tl.float32)
    return x


@triton.jit
def erf(x):
    """erf of the fp32 x without branches: x clamped to [-4, 4] (erf is ±1 in fp32 beyond), then
    an odd degree-13 polynomial over an even degree-8 one in x (the rational form of Eigen's and
    XLA's fp32 erf; at most 4.2e-7 from erf). libdevice's erff branches on |x| per element."""
    x = tl.minimum(tl.maximum(x, -4.0), 4.0)
    x2 = x * x
    p = -2.72614225801306e-10 * x2 + 2.77068142495902e-08
    p = p * x2 - 2.10102402082508e-06
    p = p * x2 - 5.69250639462346e-05
    p = p * x2 - 7.34990630326855e-04
    p = p * x2 - 2.95459980854025e-03
    p = p * x2 - 1.60960333262415e-02
    q = -1.45660718464996e-05 * x2 - 2.13374055278905e-04
    q = q * x2 - 1.68282697438203e-03
    q = q * x2 - 7.37332916720468e-03
    q = q * x2 - 1.42647390514189e-02
    return x * p / q


@triton.jit
def activated(x, ACTIVATION: tl.constexpr):
    """The activation ACTIVATION of the fp32 x ("" leaves it): "relu" max(x, 0); "gelu_tanh"
    x/2 · (1 + tanh(√(2/π)·(x + 0.044715·x³))), with tanh(z) = 2·sigmoid(2z) − 1 (Triton's core
    language has sigmoid, not tanh); "gelu" x/2 · (1 + erf(x/√2)) (`erf`); "silu" x · sigmoid(x).
    The forms of `jax.nn.relu`, `jax.nn.gelu(approximate=True / False)` and `jax.nn.silu`."""
    if ACTIVATION == "relu":
        x = tl.maximum(x, 0.0)
    elif ACTIVATION == "gelu_tanh":
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        x = x * tl.sigmoid(2.0 * inner)  # x/2 · (1 + tanh(inner)) = x · sigmoid(2·inner)
    elif ACTIVATION == "gelu":
        x = 0.5 * x * (1.0 + erf(x * 0.7071067811865476))
    elif ACTIVATION == "silu":
        x = x * tl.sigmoid(x)
    return x


@triton.jit
def tile_bases(
    a_ptr, b_ptr, pid_m, pid_n, M, N, stride_am, stride_bn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, M_UNIT: tl.constexpr, N_UNIT: tl.constexpr,
    SHORT_A_ROWS: tl.constexpr = 0, GATED: tl.constexpr = False,
):
    """Pointers to the tile's A rows ([BLOCK_M, 1]) and B columns ([1, BLOCK_N]) at K = 0.
    SHORT_A_ROWS > 0: the rows past M are not wrapped; `reduce_k_blocks` masks them instead.
    GATED: B has 2·N columns (a gate's N, then an up projection's N) and the tile's BLOCK_N columns
    are the gate's BLOCK_N / 2 columns of output tile pid_n, then the up projection's same ones."""
    # Rows and columns past the edge wrap around (modulo) so loads stay in bounds without masks;
    # the store is masked, so wrapped values are never written.
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    if SHORT_A_ROWS == 0:
        offs_m = offs_m % M
    if GATED:
        pair = tl.arange(0, BLOCK_N)
        offs_n = (pid_n * (BLOCK_N // 2) + pair % (BLOCK_N // 2)) % N + (pair // (BLOCK_N // 2)) * N
    else:
        offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    # What the hints may claim: the wrap happens at multiples of M (N), so runs of M_UNIT (N_UNIT)
    # offsets stay contiguous and start at multiples of it, but no longer runs. (Tutorial 03's
    # hint, runs of BLOCK_M, is false past the wrap: with a 16-byte-aligned row stride and N = 2
    # mod 8 it made a 16-byte load start at column 2, a misaligned address on the H200.)
    offs_m = tl.max_contiguous(tl.multiple_of(offs_m, M_UNIT), M_UNIT)
    offs_n = tl.max_contiguous(tl.multiple_of(offs_n, N_UNIT), N_UNIT)
    return a_ptr + offs_m[:, None] * stride_am, b_ptr + offs_n[None, :] * stride_bn


@triton.jit
def reduce_k_blocks(
    a_rows, b_cols, K, first, last, stride_ak, stride_bk,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, EVEN_K: tl.constexpr, INDEX_64: tl.constexpr,
    K_FROM_INDICES: tl.constexpr, SHORT_A_ROWS: tl.constexpr = 0, SWAP_AB: tl.constexpr = False,
    PADDED_A: tl.constexpr = False, CAST_A: tl.constexpr = "", CAST_B: tl.constexpr = "",
    ROUND_ONLY: tl.constexpr = False,
):
    """The fp32 sum over K blocks [first, last) of A·B, from the tile's row and column pointers
    (`tile_bases`). Without EVEN_K the K tail (past K) is masked to zeros. SHORT_A_ROWS > 0: only
    the tile's first SHORT_A_ROWS rows of A are loaded, the others are zeros (set where the whole of A is
    shorter than a tile: wrapped, its few rows were loaded BLOCK_M / M times over, by every
    program at the same K, and M = 1 products streamed B 5-15% slower than M = 16 ones with the
    same config on the H200, 2026-12-01, BENCHMARKS.md at 705f18b).

    SWAP_AB: the tile is accumulated transposed, [BLOCK_N, BLOCK_M] += Bᵀ·Aᵀ (transposed views of
    the same loaded tiles), and returned transposed back, so that the MMA's rows are the tile's
    columns (a 16-row tile 64 or more columns wide then runs wgmma on Hopper).

    PADDED_A: A holds zeros past K up to whole K blocks (a phase-major copy), so its loads need
    no K mask (a mask against the run-time K would keep them one element wide).

    CAST_A, CAST_B: the operand is loaded as stored and converted in registers to this dtype (the
    product's compute dtype, `converted`) before the dot: operands of different dtypes, no
    converted copy in memory. ROUND_ONLY: the tiles are rounded to those values and multiplied as
    fp32 (`rounded`; for Triton's interpreter, whose bf16 dot reads raw bits and whose fp32 to bf16
    conversion truncates: the CPU backend's bf16 operands arrive as fp32).

    Two ways to address a K step, the same values, compiled differently. Carried: the [BLOCK_M,
    BLOCK_K] and [BLOCK_K, BLOCK_N] pointer tiles are built once and advanced by BLOCK_K·stride
    each step. K_FROM_INDICES: each step builds them anew from its K indices. Neither is faster
    everywhere on the H200 (Triton 3.6); `jtblas.model.resources.k_from_indices` chooses.
    """
    if SWAP_AB:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    offs_k = tl.arange(0, BLOCK_K)
    a_row_mask = tl.arange(0, BLOCK_M)[:, None] < SHORT_A_ROWS  # used only where SHORT_A_ROWS > 0
    if not K_FROM_INDICES:
        a_ptrs = a_rows + offs_k[None, :] * stride_ak
        b_ptrs = b_cols + offs_k[:, None] * stride_bk
        if first != 0:
            a_ptrs += first * BLOCK_K * stride_ak
            b_ptrs += first * BLOCK_K * stride_bk
    for k in range(first, last):
        if K_FROM_INDICES:
            ks = k * BLOCK_K + offs_k
            if INDEX_64:
                ks = ks.to(tl.int64)
            a_ptrs = a_rows + ks[None, :] * stride_ak
            b_ptrs = b_cols + ks[:, None] * stride_bk
        if EVEN_K:
            if SHORT_A_ROWS > 0:
                a = tl.load(a_ptrs, mask=a_row_mask, other=0.0)
            else:
                a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k * BLOCK_K
            if PADDED_A:
                if SHORT_A_ROWS > 0:
                    a = tl.load(a_ptrs, mask=a_row_mask, other=0.0)
                else:
                    a = tl.load(a_ptrs)
            else:
                a_mask = offs_k[None, :] < k_left
                if SHORT_A_ROWS > 0:
                    a_mask = a_mask & a_row_mask
                a = tl.load(a_ptrs, mask=a_mask, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if ROUND_ONLY:
            a = rounded(a, CAST_A)
            b = rounded(b, CAST_B)
        else:
            a = converted(a, CAST_A)
            b = converted(b, CAST_B)
        if SWAP_AB:
            acc = tl.dot(tl.trans(b), tl.trans(a), acc, input_precision=INPUT_PRECISION)
        else:
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        if not K_FROM_INDICES:
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
    if SWAP_AB:
        acc = tl.trans(acc)
    return acc


@triton.jit
def tile_epilogue(acc, bias_ptr, residual_ptr, pid_m, pid_n, M, N, stride_rm, stride_rn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                  HAS_RESIDUAL: tl.constexpr):
    """The fp32 tile `acc` at (pid_m, pid_n) of C after the epilogue: + bias[cols] (HAS_BIAS, a
    bias [N] read once per tile and broadcast over its rows), the activation, + the residual's
    tile (HAS_RESIDUAL, [M, N] with strides stride_rm, stride_rn), each read in its own dtype and
    added in fp32. Elements past the edges read zeros (they are never stored)."""
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + cols, mask=cols < N, other=0.0)
        acc += bias.to(tl.float32)[None, :]
    acc = activated(acc, ACTIVATION)
    if HAS_RESIDUAL:
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        residual = tl.load(residual_ptr + rows[:, None] * stride_rm + cols[None, :] * stride_rn, mask=mask, other=0.0)
        acc += residual.to(tl.float32)
    return acc


@triton.jit
def gated_tile_epilogue(acc, bias_ptr, residual_ptr, pid_m, pid_n, M, N, stride_rm, stride_rn,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr,
                        ACTIVATION: tl.constexpr, HAS_RESIDUAL: tl.constexpr):
    """The [BLOCK_M, BLOCK_N / 2] tile (pid_m, pid_n) of a gated product's C from its fp32 tile
    `acc` (the gate's columns, then the up projection's: `tile_bases` GATED): activation(gate +
    bias[cols]) · (up + bias[N + cols]) (HAS_BIAS: a bias [2·N]), + the residual's tile
    (HAS_RESIDUAL, [M, N] with strides stride_rm, stride_rn), all in fp32."""
    half: tl.constexpr = BLOCK_N // 2
    if HAS_BIAS:
        pair = tl.arange(0, BLOCK_N)
        cols = pid_n * half + pair % half
        bias = tl.load(bias_ptr + cols + (pair // half) * N, mask=cols < N, other=0.0)
        acc += bias.to(tl.float32)[None, :]
    # [BLOCK_M, 2, half] -> [BLOCK_M, half, 2]: the gate and the up projection of each column pair.
    gate, up = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, half)), (0, 2, 1)))
    out = activated(gate, ACTIVATION) * up
    if HAS_RESIDUAL:
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = pid_n * half + tl.arange(0, half)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        residual = tl.load(residual_ptr + rows[:, None] * stride_rm + cols[None, :] * stride_rn, mask=mask, other=0.0)
        out += residual.to(tl.float32)
    return out


@triton.jit
def store_tile(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               ATOMIC: tl.constexpr = False, row_shift=0, col_shift=0, SHIFTED: tl.constexpr = False):
    """Stores the tile's accumulator into C, cast to C's dtype, masked at the edges; with ATOMIC,
    adds the fp32 partial into an fp32 C with atomics instead (relaxed ordering: only the final
    sums are read, after the launch). SHIFTED: the tile's rows (columns) start row_shift
    (col_shift) before C's, and those before C's first are masked too (a `K_PHASES` partial)."""
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if SHIFTED:
        rows -= row_shift
        cols -= col_shift
        mask = (rows[:, None] >= 0) & (rows[:, None] < M) & (cols[None, :] >= 0) & (cols[None, :] < N)
    else:
        mask = (rows[:, None] < M) & (cols[None, :] < N)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    if ATOMIC:
        tl.atomic_add(c_ptrs, acc, mask=mask, sem="relaxed")
    else:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gemm_program(
    a_ptr,
    b_ptr,
    bias_ptr,
    residual_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_ab,
    stride_bb,
    stride_cb,
    c_ptr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    EVEN_K: tl.constexpr,
    INDEX_64: tl.constexpr,
    M_UNIT: tl.constexpr,
    N_UNIT: tl.constexpr,
    K_UNIT: tl.constexpr,
    STRIDE_AM_UNIT: tl.constexpr,
    STRIDE_AK_UNIT: tl.constexpr,
    STRIDE_BK_UNIT: tl.constexpr,
    STRIDE_BN_UNIT: tl.constexpr,
    STRIDE_CM_UNIT: tl.constexpr,
    STRIDE_AB_UNIT: tl.constexpr,
    STRIDE_BB_UNIT: tl.constexpr,
    STRIDE_CB_UNIT: tl.constexpr,
    SPLIT_K: tl.constexpr,
    ATOMIC_SPLIT: tl.constexpr,
    K_FROM_INDICES: tl.constexpr,
    SHORT_A_ROWS: tl.constexpr,
    SWAP_AB: tl.constexpr,
    K_PHASES: tl.constexpr,
    SHIFT_A: tl.constexpr,
    SHIFT_B: tl.constexpr,
    VECTOR: tl.constexpr,
    PHASE_MAJOR_A: tl.constexpr,
    TILE_M_UNIT: tl.constexpr,
    TILE_N_UNIT: tl.constexpr,
    CAST_A: tl.constexpr,
    CAST_B: tl.constexpr,
    ROUND_ONLY: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    GATED: tl.constexpr,
    PADDED_M: tl.constexpr,
    PADDED_N: tl.constexpr,
):
    """One program computes one BLOCK_M × BLOCK_N tile of C; grid axis 1 runs over a batch of
    independent products (batch strides stride_ab, stride_bb, stride_cb; 0 broadcasts an operand).

    SPLIT_K > 1: grid axis 2 splits each tile's K loop into SPLIT_K slices of whole K blocks; C is
    then an fp32 workspace [SPLIT_K, batch, M, N] of partial sums that `sum_splits_kernel` adds
    up in a fixed order (the two launches are deterministic, run after run).
    With ATOMIC_SPLIT, C is instead a zeroed fp32 [batch, M, N] buffer into which every split adds
    its partial with fp32 atomics (one launch; the order of the adds, hence the bits, may vary).

    EVEN_K: K is a multiple of BLOCK_K (of BLOCK_K·K_PHASES with phases), so the K loop needs no mask.
    INDEX_64: some operand has ≥ 2^31 elements, so offsets are computed in int64 (program ids and
    strides cast once; off by default, so products below 2^31 elements keep int32 addressing).
    K_FROM_INDICES: how a K step is addressed (`reduce_k_blocks`).
    SWAP_AB: the tile is computed as Cᵀ = Bᵀ·Aᵀ (`reduce_k_blocks`); loads and stores are unchanged.
    SHORT_A_ROWS: 0, or M where all of A is shorter than a tile (M < BLOCK_M, one tile row): A's
    rows past it are masked, not wrapped (`reduce_k_blocks`). A compile-time constant, so is the
    row mask: compared with the run-time M − pid_m·BLOCK_M, the masked copies' predicates were
    re-derived in every K step at some M (M = 1: 284 instructions and 180 registers in the K loop
    of a 16x64x256 2-warp tile, against 275 and 158 at M = 4; M = 1 and 2 streamed 8-24% slower
    than M = 4 and 16 on the H200, 2026-12-01, BENCHMARKS.md at 705f18b).
    K_PHASES > 1: grid axis 2 runs over K_PHASES phases, phase p reducing the K rows p,
    p + K_PHASES, p + 2·K_PHASES, ... into its fp32 partial of the [K_PHASES, batch, M, N]
    workspace (summed like split-K's). It is how an operand stored with its rows along K (B [K, N],
    or A stored [K, M]) whose row stride is not a multiple of 16 bytes is still loaded 16 bytes at
    a time: K_PHASES rows apart the stride is, so within a phase every row starts at the same
    offset (its shift, < VECTOR elements) past a 16-byte boundary. SHIFT_A (SHIFT_B): the phase's
    A (B) tiles start at that boundary instead, so the tile's rows (columns) are C's shifted by
    the shift, and the store shifts them back (`store_tile`). VECTOR: operand elements per shifted
    load (16 bytes' worth with the phases that align rows to 16 bytes, fewer with fewer phases:
    2 phases of an odd bf16 row stride load 4 bytes at a time). PHASE_MAJOR_A: A is a K-contiguous
    [M, K_PHASES · columns] copy holding phase p's K indices p, p + K_PHASES, ... contiguously at
    column p · columns, zero-padded to whole K blocks (`jtblas.ops`), so a phase loads it 16
    bytes at a time rather than one element (columns = stride_am / K_PHASES).
    CAST_A, CAST_B, ROUND_ONLY: operands of another dtype than the product's, converted in
    registers (`reduce_k_blocks`).
    HAS_BIAS, ACTIVATION, HAS_RESIDUAL: the epilogue (`tile_epilogue`), applied to an unsplit
    tile (SPLIT_K = K_PHASES = 1) before its store: bias_ptr holds a bias [batch, N] (N apart),
    residual_ptr a residual laid out as C (strides stride_cm, stride_cn, stride_cb).
    GATED: a gated product (`jtblas.config.Problem.gated`, unsplit, unswapped): N is C's columns,
    B has 2·N (the gate's, then the up projection's), the bias 2·N per batch entry; each program's
    BLOCK_N columns of B are one C tile's BLOCK_N / 2 column pairs (`tile_bases`), which
    `gated_tile_epilogue` multiplies into it.
    PADDED_M (PADDED_N): A stored [K, M] (B stored [K, N]) is a copy whose rows hold stride_ak
    (stride_bk) elements, more than M (N) (`jtblas.model.repack`): the tile's row (column) offsets
    wrap at that padded row length, a multiple of 16 bytes, instead of at M (N), so that its loads
    keep full width; C keeps the caller's M and N.
    TILE_M_UNIT (TILE_N_UNIT): the runs the phase's row (column) offsets come in, VECTOR
    where shifted, else M_UNIT (N_UNIT). Reads reach at most VECTOR − 1 elements before a row (the
    previous row's, or for the first row, none: its shift is 0) and after it, inside the 16-byte
    block that holds the row's last element; so they never leave the pages the operand is in,
    and what lies outside the row lands only in rows (columns) of the tile that are never stored.
    M_UNIT, ..., STRIDE_CB_UNIT: each size and stride arrives divided by a power of two (≤ 16 bytes)
    that divides it, and is multiplied back here. The product tells the compiler the divisibility
    that Triton's own launcher would have specialised on but jax-triton does not pass (nor does
    `tl.multiple_of` on a scalar argument): without it no load or store is vectorised, nothing is
    pipelined through cp.async, and the kernel ran 5x slower on the H200 (4096^3 bf16).
    """
    M = M * M_UNIT
    N = N * N_UNIT
    K = K * K_UNIT
    stride_am = stride_am * STRIDE_AM_UNIT
    stride_ak = stride_ak * STRIDE_AK_UNIT
    stride_bk = stride_bk * STRIDE_BK_UNIT
    stride_bn = stride_bn * STRIDE_BN_UNIT
    stride_cm = stride_cm * STRIDE_CM_UNIT
    stride_ab = stride_ab * STRIDE_AB_UNIT
    stride_bb = stride_bb * STRIDE_BB_UNIT
    stride_cb = stride_cb * STRIDE_CB_UNIT
    if INDEX_64:
        # Every product with a stride in int64: an int32 BLOCK_K · stride_ak (the K loop's step) or
        # offs_k · stride_ak wraps once a transposed A has 2^25 rows at BLOCK_K 64 (2^31 elements).
        stride_am = tl.cast(stride_am, tl.int64)
        stride_ak = tl.cast(stride_ak, tl.int64)
        stride_bk = tl.cast(stride_bk, tl.int64)
        stride_bn = tl.cast(stride_bn, tl.int64)
        stride_cm = tl.cast(stride_cm, tl.int64)
        stride_ab = tl.cast(stride_ab, tl.int64)
        stride_bb = tl.cast(stride_bb, tl.int64)
        stride_cb = tl.cast(stride_cb, tl.int64)
    pid = tl.program_id(0)
    batch = tl.program_id(1)
    if K_PHASES > 1:
        phase = tl.program_id(2)
        if INDEX_64:
            batch = batch.to(tl.int64)
            phase = phase.to(tl.int64)
        if PHASE_MAJOR_A:
            # stride_am = K_PHASES · columns with columns a multiple of BLOCK_K: written so that the
            # compiler sees the offset's divisibility.
            a_offset = batch * stride_ab + phase * (stride_am // (K_PHASES * BLOCK_K) * BLOCK_K)
            a_k_stride = stride_ak
        else:
            a_offset = batch * stride_ab + phase * stride_ak
            a_k_stride = stride_ak * K_PHASES
        b_offset = batch * stride_bb + phase * stride_bk
        a_shift = 0
        b_shift = 0
        # A shifted tile spans up to VECTOR - 1 more rows (columns) than C: the grid covers them,
        # and its offsets wrap at the next multiple of VECTOR past the last one the phase needs.
        tile_rows = M
        tile_cols = N
        grid_rows = M
        grid_cols = N
        if SHIFT_A:
            a_shift = a_offset % VECTOR
            a_offset = a_offset // VECTOR * VECTOR
            tile_rows = tl.cdiv(M + a_shift, VECTOR) * VECTOR
            grid_rows = M + VECTOR - 1
        if SHIFT_B:
            b_shift = b_offset % VECTOR
            b_offset = b_offset // VECTOR * VECTOR
            tile_cols = tl.cdiv(N + b_shift, VECTOR) * VECTOR
            grid_cols = N + VECTOR - 1
        pid_m, pid_n = grouped_tile(pid, grid_rows, grid_cols, BLOCK_M, BLOCK_N, GROUP_M)
        if INDEX_64:
            pid_m = pid_m.to(tl.int64)
            pid_n = pid_n.to(tl.int64)
        a_rows, b_cols = tile_bases(
            a_ptr + a_offset, b_ptr + b_offset, pid_m, pid_n, tile_rows, tile_cols, stride_am, stride_bn,
            BLOCK_M, BLOCK_N, TILE_M_UNIT, TILE_N_UNIT, SHORT_A_ROWS,
        )
        phase_k = tl.cdiv(K - phase, K_PHASES)  # K rows of this phase (0 when K <= phase)
        acc = reduce_k_blocks(
            a_rows, b_cols, phase_k, 0, tl.cdiv(phase_k, BLOCK_K), a_k_stride, stride_bk * K_PHASES,
            BLOCK_M, BLOCK_N, BLOCK_K, INPUT_PRECISION, EVEN_K, INDEX_64, K_FROM_INDICES, SHORT_A_ROWS, SWAP_AB,
            PHASE_MAJOR_A, CAST_A, CAST_B, ROUND_ONLY,
        )
        c_ptr += batch * stride_cb
        if not ATOMIC_SPLIT:
            c_ptr += phase * tl.num_programs(1) * stride_cb
        store_tile(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N, ATOMIC_SPLIT,
                   a_shift, b_shift, True)
    else:
        if GATED:
            pid_m, pid_n = grouped_tile(pid, M, N, BLOCK_M, BLOCK_N // 2, GROUP_M)
        else:
            pid_m, pid_n = grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        if INDEX_64:
            pid_m = pid_m.to(tl.int64)
            pid_n = pid_n.to(tl.int64)
            batch = batch.to(tl.int64)
        a_ptr += batch * stride_ab
        b_ptr += batch * stride_bb
        c_ptr += batch * stride_cb
        rows_wrap = M
        cols_wrap = N
        if PADDED_M:
            rows_wrap = stride_ak
        if PADDED_N:
            cols_wrap = stride_bk
        a_rows, b_cols = tile_bases(
            a_ptr, b_ptr, pid_m, pid_n, rows_wrap, cols_wrap, stride_am, stride_bn, BLOCK_M, BLOCK_N,
            STRIDE_AK_UNIT if PADDED_M else M_UNIT, STRIDE_BK_UNIT if PADDED_N else N_UNIT, SHORT_A_ROWS, GATED,
        )
        k_blocks = tl.cdiv(K, BLOCK_K)
        if SPLIT_K == 1:
            acc = reduce_k_blocks(
                a_rows, b_cols, K, 0, k_blocks, stride_ak, stride_bk,
                BLOCK_M, BLOCK_N, BLOCK_K, INPUT_PRECISION, EVEN_K, INDEX_64, K_FROM_INDICES, SHORT_A_ROWS, SWAP_AB,
                False, CAST_A, CAST_B, ROUND_ONLY,
            )
            if GATED:
                out = gated_tile_epilogue(acc, bias_ptr + batch * 2 * N, residual_ptr + batch * stride_cb, pid_m,
                                          pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N, HAS_BIAS, ACTIVATION,
                                          HAS_RESIDUAL)
                store_tile(c_ptr, out, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N // 2)
            else:
                if HAS_BIAS or HAS_RESIDUAL or ACTIVATION != "":
                    acc = tile_epilogue(acc, bias_ptr + batch * N, residual_ptr + batch * stride_cb, pid_m, pid_n, M,
                                        N, stride_cm, stride_cn, BLOCK_M, BLOCK_N, HAS_BIAS, ACTIVATION, HAS_RESIDUAL)
                store_tile(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N, ATOMIC_SPLIT)
        else:
            # Program (tile, batch, split) reduces K blocks [split·chunk, (split+1)·chunk) into its
            # own fp32 partial, c[split, batch] of a dense [SPLIT_K, batch, M, N] workspace (the
            # launcher passes stride_cb = M·N). A split past the last K block reduces nothing and
            # writes zeros, so every partial is written and the sum never reads an unwritten element.
            split = tl.program_id(2)
            if INDEX_64:
                split = split.to(tl.int64)
            chunk = tl.cdiv(k_blocks, SPLIT_K)
            first = split * chunk
            last = tl.minimum(first + chunk, k_blocks)
            if not ATOMIC_SPLIT:
                c_ptr += split * tl.num_programs(1) * stride_cb
            acc = reduce_k_blocks(
                a_rows, b_cols, K, first, last, stride_ak, stride_bk,
                BLOCK_M, BLOCK_N, BLOCK_K, INPUT_PRECISION, EVEN_K, INDEX_64, K_FROM_INDICES, SHORT_A_ROWS, SWAP_AB,
                False, CAST_A, CAST_B, ROUND_ONLY,
            )
            store_tile(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N, ATOMIC_SPLIT)


# M, N, K and the batch strides already carry their divisibility in *_UNIT; Triton's launcher
# (the benchmark launches on torch tensors) need not specialise on the reduced values again.
@triton.jit(do_not_specialize=["M", "N", "K", "stride_ab", "stride_bb", "stride_cb"])
def matmul_kernel(
    a_ptr,
    b_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_ab,
    stride_bb,
    stride_cb,
    c_ptr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    EVEN_K: tl.constexpr,
    INDEX_64: tl.constexpr,
    M_UNIT: tl.constexpr,
    N_UNIT: tl.constexpr,
    K_UNIT: tl.constexpr,
    STRIDE_AM_UNIT: tl.constexpr,
    STRIDE_AK_UNIT: tl.constexpr,
    STRIDE_BK_UNIT: tl.constexpr,
    STRIDE_BN_UNIT: tl.constexpr,
    STRIDE_CM_UNIT: tl.constexpr,
    STRIDE_AB_UNIT: tl.constexpr,
    STRIDE_BB_UNIT: tl.constexpr,
    STRIDE_CB_UNIT: tl.constexpr,
    SPLIT_K: tl.constexpr = 1,
    ATOMIC_SPLIT: tl.constexpr = False,
    K_FROM_INDICES: tl.constexpr = False,
    SHORT_A_ROWS: tl.constexpr = 0,
    SWAP_AB: tl.constexpr = False,
    K_PHASES: tl.constexpr = 1,
    SHIFT_A: tl.constexpr = False,
    SHIFT_B: tl.constexpr = False,
    VECTOR: tl.constexpr = 8,
    PHASE_MAJOR_A: tl.constexpr = False,
    TILE_M_UNIT: tl.constexpr = 1,
    TILE_N_UNIT: tl.constexpr = 1,
    CAST_A: tl.constexpr = "",
    CAST_B: tl.constexpr = "",
    ROUND_ONLY: tl.constexpr = False,
    PADDED_M: tl.constexpr = False,
    PADDED_N: tl.constexpr = False,
):
    """C = A · B: one program per BLOCK_M × BLOCK_N tile of C (`gemm_program`, whose docstring
    says what each argument does), without an epilogue."""
    gemm_program(a_ptr, b_ptr, a_ptr, a_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
        stride_cn, stride_ab, stride_bb, stride_cb, c_ptr, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, INPUT_PRECISION,
        EVEN_K, INDEX_64, M_UNIT, N_UNIT, K_UNIT, STRIDE_AM_UNIT, STRIDE_AK_UNIT, STRIDE_BK_UNIT,
        STRIDE_BN_UNIT, STRIDE_CM_UNIT, STRIDE_AB_UNIT, STRIDE_BB_UNIT, STRIDE_CB_UNIT, SPLIT_K, ATOMIC_SPLIT,
        K_FROM_INDICES, SHORT_A_ROWS, SWAP_AB, K_PHASES, SHIFT_A, SHIFT_B, VECTOR, PHASE_MAJOR_A, TILE_M_UNIT,
        TILE_N_UNIT, CAST_A, CAST_B, ROUND_ONLY, False, "", False, False, PADDED_M, PADDED_N)


@triton.jit(do_not_specialize=["M", "N", "K", "stride_ab", "stride_bb", "stride_cb"])
def matmul_epilogue_kernel(
    a_ptr,
    b_ptr,
    bias_ptr,
    residual_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_ab,
    stride_bb,
    stride_cb,
    c_ptr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    EVEN_K: tl.constexpr,
    INDEX_64: tl.constexpr,
    M_UNIT: tl.constexpr,
    N_UNIT: tl.constexpr,
    K_UNIT: tl.constexpr,
    STRIDE_AM_UNIT: tl.constexpr,
    STRIDE_AK_UNIT: tl.constexpr,
    STRIDE_BK_UNIT: tl.constexpr,
    STRIDE_BN_UNIT: tl.constexpr,
    STRIDE_CM_UNIT: tl.constexpr,
    STRIDE_AB_UNIT: tl.constexpr,
    STRIDE_BB_UNIT: tl.constexpr,
    STRIDE_CB_UNIT: tl.constexpr,
    SPLIT_K: tl.constexpr = 1,
    ATOMIC_SPLIT: tl.constexpr = False,
    K_FROM_INDICES: tl.constexpr = False,
    SHORT_A_ROWS: tl.constexpr = 0,
    SWAP_AB: tl.constexpr = False,
    K_PHASES: tl.constexpr = 1,
    SHIFT_A: tl.constexpr = False,
    SHIFT_B: tl.constexpr = False,
    VECTOR: tl.constexpr = 8,
    PHASE_MAJOR_A: tl.constexpr = False,
    TILE_M_UNIT: tl.constexpr = 1,
    TILE_N_UNIT: tl.constexpr = 1,
    CAST_A: tl.constexpr = "",
    CAST_B: tl.constexpr = "",
    ROUND_ONLY: tl.constexpr = False,
    HAS_BIAS: tl.constexpr = False,
    ACTIVATION: tl.constexpr = "",
    HAS_RESIDUAL: tl.constexpr = False,
    GATED: tl.constexpr = False,
    PADDED_M: tl.constexpr = False,
    PADDED_N: tl.constexpr = False,
):
    """C = epilogue(A · B) (`gemm_program`): `matmul_kernel` with a bias [batch, N] (HAS_BIAS),
    an activation and a residual laid out as C (HAS_RESIDUAL) applied to each fp32 tile before
    its store; with GATED, C [M, N] pairs B's 2·N columns (a gate's, then an up projection's).
    Launched only without a K split (split-K and K phase partials get theirs in
    `sum_splits_epilogue_kernel`)."""
    gemm_program(a_ptr, b_ptr, bias_ptr, residual_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
        stride_cm, stride_cn, stride_ab, stride_bb, stride_cb, c_ptr, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
        INPUT_PRECISION, EVEN_K, INDEX_64, M_UNIT, N_UNIT, K_UNIT, STRIDE_AM_UNIT, STRIDE_AK_UNIT,
        STRIDE_BK_UNIT, STRIDE_BN_UNIT, STRIDE_CM_UNIT, STRIDE_AB_UNIT, STRIDE_BB_UNIT, STRIDE_CB_UNIT,
        SPLIT_K, ATOMIC_SPLIT, K_FROM_INDICES, SHORT_A_ROWS, SWAP_AB, K_PHASES, SHIFT_A, SHIFT_B, VECTOR,
        PHASE_MAJOR_A, TILE_M_UNIT, TILE_N_UNIT, CAST_A, CAST_B, ROUND_ONLY, HAS_BIAS, ACTIVATION,
        HAS_RESIDUAL, GATED, PADDED_M, PADDED_N)
