"""The split-K reduction: out = Σ_s partials[s], summed in a fixed order and cast once.

Only `@triton.jit` code lives here. Arguments: the fp32 partials pointer, the size of one partial,
then the output pointer (jax-triton appends outputs last).
"""

import triton
import triton.language as tl


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
    """One program sums BLOCK consecutive elements over the SPLIT_K dense partials
    [SPLIT_K, size] (fp32), adding split 0, 1, ... in that order (bit-reproducible, whatever the
    GPU), and stores them cast to the output dtype.

    INDEX_64: SPLIT_K · size ≥ 2^31, so offsets are computed in int64.
    """
    size = size * SIZE_UNIT
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
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)
