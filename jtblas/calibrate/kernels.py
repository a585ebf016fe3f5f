"""The Triton kernels `jtblas calibrate` times (imported only on the GPU path: imports Triton).

They are microbenchmarks, not GEMM kernels, so they live apart from `jtblas/kernels/`.
"""

import triton
import triton.language as tl


@triton.jit
def stream_read_kernel(x_ptr, sink_ptr, chunk, repeats, BLOCK: tl.constexpr):
    """Program p reads x[p·chunk : (p+1)·chunk] `repeats` times, BLOCK elements per step.

    One step's loads (BLOCK·4 bytes per program) are in flight at a time: the masked store that
    consumes them waits for the data, and the next step's loads issue after it (launch with
    num_stages=1 so that Triton does not pipeline the loop). `x` holds values in [0, 1), so the
    store never writes; it only keeps the loads alive. `.cg` loads bypass L1, so repeated reads
    measure L2, not the SM's own cache. `chunk` must be a multiple of BLOCK.
    """
    pid = tl.program_id(0)
    base = x_ptr + pid.to(tl.int64) * chunk
    offsets = tl.arange(0, BLOCK)
    for _r in range(repeats):
        for start in range(0, chunk, BLOCK):
            x = tl.load(base + start + offsets, cache_modifier=".cg")
            tl.store(sink_ptr + offsets, x, mask=x < 0.0)


@triton.jit
def tiny_kernel(out_ptr):
    """One store per program: a launch with (almost) nothing in it, for the per-launch cost."""
    tl.store(out_ptr + tl.program_id(0), 1.0)


@triton.jit
def increment_kernel(x_ptr, out_ptr):
    """out[0] = x[0] + 1: a launch that depends on the previous one's output, for the cost of one
    more launch inside `jax.jit` (chained, so launches cannot overlap)."""
    tl.store(out_ptr, tl.load(x_ptr) + 1.0)
