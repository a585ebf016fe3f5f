"""The persistent GEMM kernel with TMA: C = A · B, fp32 accumulation, operands and C through
tensor descriptors; `matmul_tma_epilogue_kernel` adds a bias, an activation and a residual to each
tile before its store.

Only `@triton.jit` code lives here. Each program creates its descriptors on the device
(`tl.make_tensor_descriptor`: 128 bytes of global scratch each, which the launcher allocates) and
then walks tiles `program_id(0), program_id(0) + num_programs(0), ...` in grouped order, over
every entry of a batch in turn (descriptors over [batch, rows, columns]). The
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
def batch_descriptor(ptr, batch, rows, cols, batch_stride, row_stride, BLOCK_ROWS: tl.constexpr,
                     BLOCK_COLS: tl.constexpr, BATCHED: tl.constexpr):
    """`operand_descriptor` of one [rows, cols] matrix, or, BATCHED, of `batch` of them
    `batch_stride` elements apart ([batch, rows, cols], read one entry's BLOCK_ROWS x BLOCK_COLS
    at a time: the edges of each entry zero-fill and clip as a matrix's do)."""
    if BATCHED:
        desc = tl.make_tensor_descriptor(ptr, shape=[batch, rows, cols], strides=[batch_stride, row_stride, 1],
                                         block_shape=[1, BLOCK_ROWS, BLOCK_COLS])
    else:
        desc = operand_descriptor(ptr, rows, cols, row_stride, BLOCK_ROWS, BLOCK_COLS)
    return desc


@triton.jit
def load_block(desc, entry, row, col, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
               TRANSPOSED: tl.constexpr, BATCHED: tl.constexpr):
    """The operand's BLOCK_ROWS x BLOCK_COLS tile at (row, col) of the matrix as used (A: [M, K],
    B: [K, N]; of batch entry `entry` where the descriptor is BATCHED): from the descriptor of its
    stored rows, or, TRANSPOSED (stored [K, M] / [N, K]), as a transposed view of the tile loaded
    at (col, row)."""
    if TRANSPOSED:
        if BATCHED:
            block = desc.load([entry, col, row]).reshape(BLOCK_COLS, BLOCK_ROWS).T
        else:
            block = desc.load([col, row]).T
    else:
        if BATCHED:
            block = desc.load([entry, row, col]).reshape(BLOCK_ROWS, BLOCK_COLS)
        else:
            block = desc.load([row, col])
    return block


@triton.jit
def gemm_descriptors(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, BATCH, stride_ab, stride_bb, stride_cb,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     TRANSPOSE_A: tl.constexpr, TRANSPOSE_B: tl.constexpr, STORE_HALVES: tl.constexpr,
                     A_BATCHED: tl.constexpr, B_BATCHED: tl.constexpr, C_BATCHED: tl.constexpr):
    """Descriptors of A and B over their stored rows and of the dense C [M, N] (stored in halves
    of BLOCK_N / 2 columns with STORE_HALVES); each over all BATCH entries where it is batched
    (a broadcast operand, batch stride 0, is one matrix)."""
    if TRANSPOSE_A:
        a_desc = batch_descriptor(a_ptr, BATCH, K, M, stride_ab, lda, BLOCK_K, BLOCK_M, A_BATCHED)
    else:
        a_desc = batch_descriptor(a_ptr, BATCH, M, K, stride_ab, lda, BLOCK_M, BLOCK_K, A_BATCHED)
    if TRANSPOSE_B:
        b_desc = batch_descriptor(b_ptr, BATCH, N, K, stride_bb, ldb, BLOCK_N, BLOCK_K, B_BATCHED)
    else:
        b_desc = batch_descriptor(b_ptr, BATCH, K, N, stride_bb, ldb, BLOCK_K, BLOCK_N, B_BATCHED)
    STORE_N: tl.constexpr = BLOCK_N // 2 if STORE_HALVES else BLOCK_N
    return a_desc, b_desc, batch_descriptor(c_ptr, BATCH, M, N, stride_cb, N, BLOCK_M, STORE_N, C_BATCHED)


@triton.jit
def store_block(c_desc, block, entry, row, col, BATCHED: tl.constexpr):
    """Stores `block` (in C's dtype) at (row, col) of C, of batch entry `entry` where BATCHED."""
    if BATCHED:
        c_desc.store([entry, row, col], block.reshape(1, block.shape[0], block.shape[1]))
    else:
        c_desc.store([row, col], block)


@triton.jit
def store_tile(c_desc, acc, entry, row, col, BLOCK_N: tl.constexpr, STORE_HALVES: tl.constexpr,
               BATCHED: tl.constexpr):
    """Stores the fp32 tile `acc` at (row, col) of C (of batch entry `entry` where BATCHED) in C's
    dtype (two halves: STORE_HALVES)."""
    if STORE_HALVES:
        left, right = tl.split(tl.permute(tl.reshape(acc, (acc.shape[0], 2, BLOCK_N // 2)), (0, 2, 1)))
        store_block(c_desc, left.to(c_desc.dtype), entry, row, col, BATCHED)
        store_block(c_desc, right.to(c_desc.dtype), entry, row, col + BLOCK_N // 2, BATCHED)
    else:
        store_block(c_desc, acc.to(c_desc.dtype), entry, row, col, BATCHED)


@triton.jit
def batch_tile(tile, entry_tiles, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr,
               BATCHED: tl.constexpr):
    """(batch entry, pid_m, pid_n) of tile number `tile` of a batch numbered entry after entry,
    `entry_tiles` per entry in grouped order (entry 0 where not BATCHED)."""
    if BATCHED:
        entry = tile // entry_tiles
        pid_m, pid_n = grouped_tile(tile - entry * entry_tiles, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    else:
        entry = 0
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    return entry, pid_m, pid_n


@triton.jit
def whole_tiles(a_desc, b_desc, c_desc, first, end, step, M, N, K, stride_cb, bias_ptr, residual_ptr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                INPUT_PRECISION: tl.constexpr, TRANSPOSE_A: tl.constexpr, TRANSPOSE_B: tl.constexpr,
                STORE_HALVES: tl.constexpr, INDEX_64: tl.constexpr, A_BATCHED: tl.constexpr,
                B_BATCHED: tl.constexpr, C_BATCHED: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                HAS_RESIDUAL: tl.constexpr):
    """Computes and stores the tiles first, first + step, ... below `end` (numbered over the batch
    entries in turn, each entry's in grouped order), each over its whole K, as one flattened loop
    (the next tile's loads start during this one's store, also across entries); each tile through
    `tile_epilogue` first where there is one (a bias [N] per entry, a residual laid out as C)."""
    k_blocks = tl.cdiv(K, BLOCK_K)
    entry_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    # The epilogue recomputes its tile from a counter of its own rather than reusing the loop's
    # (tile, pid_m, pid_n): with `flatten` the loop's values are not live there (Triton tutorial 09).
    stored = first - step
    for tile in tl.range(first, end, step, flatten=True):
        entry, pid_m, pid_n = batch_tile(tile, entry_tiles, M, N, BLOCK_M, BLOCK_N, GROUP_M, C_BATCHED)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kb in range(k_blocks):
            a = load_block(a_desc, entry, pid_m * BLOCK_M, kb * BLOCK_K, BLOCK_M, BLOCK_K, TRANSPOSE_A, A_BATCHED)
            b = load_block(b_desc, entry, kb * BLOCK_K, pid_n * BLOCK_N, BLOCK_K, BLOCK_N, TRANSPOSE_B, B_BATCHED)
            acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        stored += step
        entry, pid_m, pid_n = batch_tile(stored, entry_tiles, M, N, BLOCK_M, BLOCK_N, GROUP_M, C_BATCHED)
        if HAS_BIAS or HAS_RESIDUAL or ACTIVATION != "":
            entry_bias, entry_residual = bias_ptr, residual_ptr
            if C_BATCHED:
                offset = entry.to(tl.int64) if INDEX_64 else entry
                entry_bias, entry_residual = bias_ptr + offset * N, residual_ptr + offset * stride_cb
            acc = tile_epilogue(acc, entry_bias, entry_residual, pid_m, pid_n, M, N, N, 1, BLOCK_M, BLOCK_N,
                                HAS_BIAS, ACTIVATION, HAS_RESIDUAL)
        store_tile(c_desc, acc, entry, pid_m * BLOCK_M, pid_n * BLOCK_N, BLOCK_N, STORE_HALVES, C_BATCHED)


@triton.jit
def tma_program(a_ptr, b_ptr, bias_ptr, residual_ptr, M, N, K, lda, ldb, stride_ab, stride_bb, stride_cb, BATCH,
                c_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                INPUT_PRECISION: tl.constexpr, TRANSPOSE_A: tl.constexpr, TRANSPOSE_B: tl.constexpr,
                STORE_HALVES: tl.constexpr, INDEX_64: tl.constexpr, A_BATCHED: tl.constexpr,
                B_BATCHED: tl.constexpr, C_BATCHED: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                HAS_RESIDUAL: tl.constexpr):
    """Program p: the tiles p, p + programs, ... of the BATCH products (`matmul_tma_kernel`), with
    each batch entry's bias (N apart) and residual (stride_cb apart, as C) where there are."""
    a_desc, b_desc, c_desc = gemm_descriptors(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, BATCH, stride_ab, stride_bb,
                                              stride_cb, BLOCK_M, BLOCK_N, BLOCK_K, TRANSPOSE_A, TRANSPOSE_B,
                                              STORE_HALVES, A_BATCHED, B_BATCHED, C_BATCHED)
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N) * BATCH
    whole_tiles(a_desc, b_desc, c_desc, tl.program_id(0), tiles, tl.num_programs(0), M, N, K, stride_cb, bias_ptr,
                residual_ptr, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, INPUT_PRECISION, TRANSPOSE_A, TRANSPOSE_B,
                STORE_HALVES, INDEX_64, A_BATCHED, B_BATCHED, C_BATCHED, HAS_BIAS, ACTIVATION, HAS_RESIDUAL)


@triton.jit(do_not_specialize=["M", "N", "K", "lda", "ldb", "stride_ab", "stride_bb", "stride_cb", "BATCH"])
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
    BATCH,
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
    A_BATCHED: tl.constexpr = False,
    B_BATCHED: tl.constexpr = False,
    C_BATCHED: tl.constexpr = False,
):
    """Program p of a grid of programs computes the BLOCK_M x BLOCK_N tiles p, p + programs, ... of
    the BATCH products C[batch] (dense [M, N]), numbered entry after entry: one persistent grid
    over the whole batch. A is stored [M, K] (TRANSPOSE_A: [K, M]) with rows lda elements apart,
    B [K, N] (TRANSPOSE_B: [N, K]) with rows ldb apart; batch strides stride_ab, stride_bb,
    stride_cb, read through descriptors over [BATCH, rows, columns] where A_BATCHED, B_BATCHED,
    C_BATCHED (an operand not batched, stride 0, is one matrix every entry reads).

    STORE_HALVES: the tile is stored as two BLOCK_M x BLOCK_N/2 halves (half the shared-memory
    staging of the TMA store). INDEX_64: some operand has ≥ 2^31 elements (an epilogue's batch
    offsets in int64).
    """
    tma_program(a_ptr, b_ptr, a_ptr, a_ptr, M, N, K, lda, ldb, stride_ab, stride_bb, stride_cb, BATCH, c_ptr,
                BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, INPUT_PRECISION, TRANSPOSE_A, TRANSPOSE_B, STORE_HALVES,
                INDEX_64, A_BATCHED, B_BATCHED, C_BATCHED, False, "", False)


@triton.jit(do_not_specialize=["M", "N", "K", "lda", "ldb", "stride_ab", "stride_bb", "stride_cb", "BATCH"])
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
    BATCH,
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
    A_BATCHED: tl.constexpr = False,
    B_BATCHED: tl.constexpr = False,
    C_BATCHED: tl.constexpr = False,
    HAS_BIAS: tl.constexpr = False,
    ACTIVATION: tl.constexpr = "",
    HAS_RESIDUAL: tl.constexpr = False,
):
    """C = epilogue(A · B) (`matmul_tma_kernel`): a bias [batch, N] (HAS_BIAS), an activation and a
    residual laid out as C (HAS_RESIDUAL, dense [batch, M, N]) applied to each fp32 tile before
    its store (`tile_epilogue`, loaded through pointers: a bias row and a residual tile per tile)."""
    tma_program(a_ptr, b_ptr, bias_ptr, residual_ptr, M, N, K, lda, ldb, stride_ab, stride_bb, stride_cb, BATCH,
                c_ptr, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, INPUT_PRECISION, TRANSPOSE_A, TRANSPOSE_B, STORE_HALVES,
                INDEX_64, A_BATCHED, B_BATCHED, C_BATCHED, HAS_BIAS, ACTIVATION, HAS_RESIDUAL)
