"""The split-K reduction: out = Σ_s partials[s], summed in a fixed order and cast once.

Only `@triton.jit` code lives here. Arguments: the fp32 partials pointer (then, for the epilogue
variant, the bias and residual pointers), the scalar sizes, then the output pointer (jax-triton
appends outputs last).
"""

import triton
import triton.language as tl

from jtblas.kernels.matmul import activated


@triton.jit
def sum_splits(partials_ptr, bias_ptr, residual_ptr, size, N, MN, out_ptr, SPLIT_K: tl.constexpr,
               BLOCK: tl.constexpr, INDEX_64: tl.constexpr, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
               HAS_RESIDUAL: tl.constexpr):
    """One program sums BLOCK consecutive elements over the SPLIT_K dense partials
    [SPLIT_K, size] (fp32), adding split 0, 1, ... in that order (bit-reproducible, whatever the
    GPU), applies the epilogue (HAS_BIAS: + bias[b, n] of a bias [batch, N], element
    (b, m, n) of the [batch, M, N] output being flat index b·MN + m·N + n; the activation;
    HAS_RESIDUAL: + the residual laid out as the output), and stores them cast to the output dtype."""
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
        size = size.to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)
    mask = offs < size
    acc = tl.load(partials_ptr + offs, mask=mask, other=0.0)
    for split in tl.static_range(1, SPLIT_K):
        acc += tl.load(partials_ptr + split * size + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs // MN * N + offs % N, mask=mask, other=0.0).to(tl.float32)
    acc = activated(acc, ACTIVATION)
    if HAS_RESIDUAL:
        acc += tl.load(residual_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


# `size` carries its divisibility in SIZE_UNIT (see matmul_kernel's *_UNIT parameters).
@triton.jit(do_not_specialize=["size"])
def sum_splits_kernel(
    partials_ptr,
    size,
    out_ptr,
    SPLIT_K: tl.constexpr,
    BLOCK: tl.constexpr,
    SIZE_UNIT: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """out [size] = Σ_s partials[s] (`sum_splits`), cast to the output dtype.

    INDEX_64: SPLIT_K · size ≥ 2^31, so offsets are computed in int64.
    """
    sum_splits(partials_ptr, partials_ptr, partials_ptr, size * SIZE_UNIT, 1, 1, out_ptr, SPLIT_K, BLOCK, INDEX_64,
               False, "", False)


@triton.jit(do_not_specialize=["size", "N", "MN"])
def sum_splits_epilogue_kernel(
    partials_ptr,
    bias_ptr,
    residual_ptr,
    size,
    N,
    MN,
    out_ptr,
    SPLIT_K: tl.constexpr,
    BLOCK: tl.constexpr,
    SIZE_UNIT: tl.constexpr,
    INDEX_64: tl.constexpr,
    HAS_BIAS: tl.constexpr = False,
    ACTIVATION: tl.constexpr = "",
    HAS_RESIDUAL: tl.constexpr = False,
):
    """out = epilogue(Σ_s partials[s]) (`sum_splits`): the split-K (or K phase) product's bias,
    activation and residual, applied once to the summed fp32 value. N: the output's columns; MN:
    elements of one batch entry (M·N)."""
    sum_splits(partials_ptr, bias_ptr, residual_ptr, size * SIZE_UNIT, N, MN, out_ptr, SPLIT_K, BLOCK, INDEX_64,
               HAS_BIAS, ACTIVATION, HAS_RESIDUAL)
