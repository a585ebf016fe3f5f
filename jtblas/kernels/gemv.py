"""A GEMV-style kernel for decode products (M ≤ 4): partials[s] = x · W over K slice s, no tensor cores.

Only `@triton.jit` code lives here. Arguments: x, W, the sizes and strides, then the output
pointer (jax-triton appends outputs last).

Why (2026-11-30, BENCHMARKS.md at 705f18b): streaming a weight from DRAM, one SM of the tiled kernel moves
~35-48 GB/s however many stages it has (its cp.async path), while a plain-load kernel with 128 KB
in flight moved 80-85 GB/s on one SM; the tiled kernel's decode products reach 51-64% of a
same-size copy for 26-117 MB weights. This kernel streams W with plain vector loads, a whole
[BLOCK_K, BLOCK_N] tile in flight per step (launch it with num_stages=1), and reduces with FMAs
in registers. Not yet a candidate of the model: to be measured against the tiled kernel first
(`benchmarks/gemv_probe.py`).
"""

import triton
import triton.language as tl


# K and N carry their divisibility in *_UNIT (see matmul_kernel); the launcher need not
# specialise on the reduced values.
@triton.jit(do_not_specialize=["K", "N", "stride_xm", "stride_wk"])
def gemv_kernel(
    x_ptr,
    w_ptr,
    K,
    N,
    stride_xm,
    stride_wk,
    partials_ptr,
    M: tl.constexpr,
    M_PAD: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT_K: tl.constexpr,
    K_UNIT: tl.constexpr,
    N_UNIT: tl.constexpr,
    STRIDE_XM_UNIT: tl.constexpr,
    STRIDE_WK_UNIT: tl.constexpr,
):
    """Program (column block, split) computes partials[split, :M, columns] = x[:M, K slice] ·
    W[K slice, columns] in fp32, for x [M, K] (row stride stride_xm, unit stride along K) and W
    [K, N] (row stride stride_wk, unit stride along N). The K slices are whole BLOCK_K blocks,
    ⌈blocks / SPLIT_K⌉ per split; a split past the last block writes zeros. M_PAD is M rounded up
    to a power of two (a tensor dimension); rows past M are masked.
    """
    K = K * K_UNIT
    N = N * N_UNIT
    stride_xm = stride_xm * STRIDE_XM_UNIT
    stride_wk = stride_wk * STRIDE_WK_UNIT
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    rows = tl.arange(0, M_PAD)
    row_ok = rows < M
    k_blocks = tl.cdiv(K, BLOCK_K)
    chunk = tl.cdiv(k_blocks, SPLIT_K)
    first = split * chunk
    last = tl.minimum(first + chunk, k_blocks)
    acc = tl.zeros((M_PAD, BLOCK_N), dtype=tl.float32)
    for block in range(first, last):
        ks = block * BLOCK_K + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        w = tl.load(w_ptr + ks[:, None] * stride_wk + cols[None, :], mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        # [M_PAD, BLOCK_K, 1] x [1, BLOCK_K, BLOCK_N] summed over K: FMAs in registers.
        acc += tl.sum(x.to(tl.float32)[:, :, None] * w.to(tl.float32)[None, :, :], axis=1)
    out = partials_ptr + split * M * N + rows[:, None] * N + cols[None, :]
    tl.store(out, acc, mask=row_ok[:, None] & col_ok[None, :])
