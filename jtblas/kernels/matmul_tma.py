"""The persistent GEMM kernel with TMA: C = A · B, fp32 accumulation, operands and C through
tensor descriptors; `matmul_tma_epilogue_kernel` adds a bias, an activation and a residual to each
tile before its store.

Only `@triton.jit` code lives here. Each program creates its descriptors on the device
(`tl.make_tensor_descriptor`: 128 bytes of global scratch each, which the launcher allocates) and
then walks tiles `program_id(0), program_id(0) + num_programs(0), ...` in grouped order. The
tensor-memory accelerator loads the tiles into shared memory whatever the layout (a transposed
operand is a descriptor over its stored [K, M] or [N, K] rows, the loaded tile transposed as a
view), zero-fills reads past the edges and clips the stores, so the kernel has no masks and no
per-element addresses (but for an epilogue's bias and residual, read through pointers).
Requirements (checked by the ops layer): 16-byte aligned base pointers and row strides,
contiguous rows.
"""

import triton
import triton.language as tl

from jtblas.kernels.matmul import grouped_tile, tile_epilogue

# Bytes of global scratch per program: three descriptors (A, B, C) of 128 bytes each (the CUDA
# tensor map size, `CU_TENSOR_MAP_NUM_QWORDS` x 8), aligned to 128. Checked against the compiler's
# `global_scratch_size` by a test.
GLOBAL_SCRATCH_BYTES = 3 * 128
GLOBAL_SCRATCH_ALIGN = 128


@triton.jit
def operand_descriptor(ptr, rows, cols, row_stride, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    """A descriptor of a row-major [rows, cols] matrix (rows `row_stride` elements apart) read or
    written BLOCK_ROWS x BLOCK_COLS at a time."""
    return tl.make_tensor_descriptor(ptr, shape=[rows, cols], strides=[row_stride, 1],
                                     block_shape=[BLOCK_ROWS, BLOCK_COLS])


@triton.jit
def load_block(desc, row, col, TRANSPOSED: tl.constexpr):
    """The operand's tile at (row, col) of the matrix as used (A: [M, K], B: [K, N]): from the
    descriptor of its stored rows, or, TRANSPOSED (stored [K, M] / [N, K]), as a transposed view
    of the tile loaded at (col, row)."""
    if TRANSPOSED:
        block = desc.load([col, row]).T
    else:
        block = desc.load([row, col])
    return block


@triton.jit
def gemm_descriptors(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, TRANSPOSE_A: tl.constexpr, TRANSPOSE_B: tl.constexpr,
                     STORE_HALVES: tl.constexpr):
    """Descriptors of A and B over their stored rows and of the dense C [M, N] (stored in halves
    of BLOCK_N / 2 columns with STORE_HALVES)."""
    if TRANSPOSE_A:
        a_desc = operand_descriptor(a_ptr, K, M, lda, BLOCK_K, BLOCK_M)
    else:
        a_desc = operand_descriptor(a_ptr, M, K, lda, BLOCK_M, BLOCK_K)
    if TRANSPOSE_B:
        b_desc = operand_descriptor(b_ptr, N, K, ldb, BLOCK_N, BLOCK_K)
    else:
        b_desc = operand_descriptor(b_ptr, K, N, ldb, BLOCK_K, BLOCK_N)
    STORE_N: tl.constexpr = BLOCK_N // 2 if STORE_HALVES else BLOCK_N
    return a_desc, b_desc, operand_descriptor(c_ptr, M, N, N, BLOCK_M, STORE_N)


@triton.jit
def store_tile(c_desc, acc, row, col, BLOCK_N: tl.constexpr, STORE_HALVES: tl.constexpr):
    """Stores the fp32 tile `acc` at (row, col) of C in C's dtype (two halves: STORE_HALVES)."""
    if STORE_HALVES:
        left, right = tl.split(tl.permute(tl.reshape(acc, (acc.shape[0], 2, BLOCK_N // 2)), (0, 2, 1)))
        c_desc.store([row, col], left.to(c_desc.dtype))
        c_desc.store([row, col + BLOCK_N // 2], right.to(c_desc.dtype))
    else:
        c_desc.store([row, col], acc.to(c_desc.dtype))


@triton.jit
def whole_tiles(a_desc, b_desc, c_desc, first, end, step, M, N, K, bias_ptr, residual_ptr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                INPUT_PRECISION: tl.constexpr, TRANSPOSE_A: tl.constexpr, TRANSPOSE_B: tl.constexpr,
                STORE_HALVES: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                HAS_RESIDUAL: tl.constexpr):
    """Computes and stores the tiles first, first + step, ... below `end` (in grouped order), each
    over its whole K, as one flattened loop (the next tile's loads start during this one's store);
    each tile through `tile_epilogue` first where there is one (a bias [N], a residual laid out as
    the dense C)."""
    k_blocks = tl.cdiv(K, BLOCK_K)
    # The epilogue recomputes its tile from a counter of its own rather than reusing the loop's
    # (tile, pid_m, pid_n): with `flatten` the loop's values are not live there (Triton tutorial 09).
    stored = first - step
    for tile in tl.range(first, end, step, flatten=True):
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kb in range(k_blocks):
            a = load_block(a_desc, pid_m * BLOCK_M, kb * BLOCK_K, TRANSPOSE_A)
            b = load_block(b_desc, kb * BLOCK_K, pid_n * BLOCK_N, TRANSPOSE_B)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        stored += step
        pid_m, pid_n = grouped_tile(stored, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        if HAS_BIAS or HAS_RESIDUAL or ACTIVATION != "":
            acc = tile_epilogue(acc, bias_ptr, residual_ptr, pid_m, pid_n, M, N, N, 1, BLOCK_M, BLOCK_N, HAS_BIAS,
                                ACTIVATION, HAS_RESIDUAL)
        store_tile(c_desc, acc, pid_m * BLOCK_M, pid_n * BLOCK_N, BLOCK_N, STORE_HALVES)


@triton.jit
def tma_program(a_ptr, b_ptr, bias_ptr, residual_ptr, M, N, K, lda, ldb, stride_ab, stride_bb, stride_cb, c_ptr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                INPUT_PRECISION: tl.constexpr, TRANSPOSE_A: tl.constexpr, TRANSPOSE_B: tl.constexpr,
                STORE_HALVES: tl.constexpr, INDEX_64: tl.constexpr, HAS_BIAS: tl.constexpr,
                ACTIVATION: tl.constexpr, HAS_RESIDUAL: tl.constexpr):
    """Program (p, batch): the tiles p, p + programs, ... of C[batch] (`matmul_tma_kernel`), with
    the batch entry's bias (N apart) and residual (stride_cb apart, as C) where there are."""
    batch = tl.program_id(1)
    if INDEX_64:
        batch = batch.to(tl.int64)
    a_ptr += batch * stride_ab
    b_ptr += batch * stride_bb
    c_ptr += batch * stride_cb
    if HAS_BIAS:
        bias_ptr += batch * N
    if HAS_RESIDUAL:
        residual_ptr += batch * stride_cb
    a_desc, b_desc, c_desc = gemm_descriptors(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, BLOCK_M, BLOCK_N, BLOCK_K,
                                              TRANSPOSE_A, TRANSPOSE_B, STORE_HALVES)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    whole_tiles(a_desc, b_desc, c_desc, tl.program_id(0), tiles, tl.num_programs(0), M, N, K, bias_ptr,
                residual_ptr, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, INPUT_PRECISION, TRANSPOSE_A, TRANSPOSE_B,
                STORE_HALVES, HAS_BIAS, ACTIVATION, HAS_RESIDUAL)


@triton.jit(do_not_specialize=["M", "N", "K", "lda", "ldb", "stride_ab", "stride_bb", "stride_cb"])
def matmul_tma_kernel(
    a_ptr,
    b_ptr,
    M,
    N,
    K,
    lda,
    ldb,
    stride_ab,
    stride_bb,
    stride_cb,
    c_ptr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    TRANSPOSE_A: tl.constexpr,
    TRANSPOSE_B: tl.constexpr,
    STORE_HALVES: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """Program (p, batch) of a grid (programs, batch) computes the BLOCK_M x BLOCK_N tiles p,
    p + programs, ... of C[batch] (dense [M, N]). A is stored [M, K] (TRANSPOSE_A: [K, M]) with
    rows lda elements apart, B [K, N] (TRANSPOSE_B: [N, K]) with rows ldb apart; batch strides
    stride_ab, stride_bb, stride_cb (0 broadcasts an operand).

    STORE_HALVES: the tile is stored as two BLOCK_M x BLOCK_N/2 halves (half the shared-memory
    staging of the TMA store). INDEX_64: some operand has ≥ 2^31 elements (batch offsets in int64).
    """
    tma_program(a_ptr, b_ptr, a_ptr, a_ptr, M, N, K, lda, ldb, stride_ab, stride_bb, stride_cb, c_ptr, BLOCK_M,
                BLOCK_N, BLOCK_K, GROUP_M, INPUT_PRECISION, TRANSPOSE_A, TRANSPOSE_B, STORE_HALVES, INDEX_64,
                False, "", False)


@triton.jit(do_not_specialize=["M", "N", "K", "lda", "ldb", "stride_ab", "stride_bb", "stride_cb"])
def matmul_tma_epilogue_kernel(
    a_ptr,
    b_ptr,
    bias_ptr,
    residual_ptr,
    M,
    N,
    K,
    lda,
    ldb,
    stride_ab,
    stride_bb,
    stride_cb,
    c_ptr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    TRANSPOSE_A: tl.constexpr,
    TRANSPOSE_B: tl.constexpr,
    STORE_HALVES: tl.constexpr,
    INDEX_64: tl.constexpr,
    HAS_BIAS: tl.constexpr = False,
    ACTIVATION: tl.constexpr = "",
    HAS_RESIDUAL: tl.constexpr = False,
):
    """C = epilogue(A · B) (`matmul_tma_kernel`): a bias [batch, N] (HAS_BIAS), an activation and a
    residual laid out as C (HAS_RESIDUAL, dense [batch, M, N]) applied to each fp32 tile before
    its store (`tile_epilogue`, loaded through pointers: a bias row and a residual tile per tile)."""
    tma_program(a_ptr, b_ptr, bias_ptr, residual_ptr, M, N, K, lda, ldb, stride_ab, stride_bb, stride_cb, c_ptr,
                BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, INPUT_PRECISION, TRANSPOSE_A, TRANSPOSE_B, STORE_HALVES,
                INDEX_64, HAS_BIAS, ACTIVATION, HAS_RESIDUAL)
