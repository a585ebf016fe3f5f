"""Our kernels launched on torch tensors, outside JAX: what the torch-launch benchmark
contenders and `jtblas calibrate` time with CUDA graphs (`jtblas.timing.GraphTimer`). The grid
and constexprs come from `jtblas.launch_specs.launch_spec`, exactly as `jtblas.matmul` launches
them. torch, Triton, the kernels and the launch specs are imported when a launcher is built."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from jtblas.config import Config, Problem


@dataclasses.dataclass
class LaunchOperands:
    """The operand lists `kernel_launcher` reads (a, b, c per operand set) and the torch module."""

    a: list
    b: list
    c: list
    torch: object = None


def kernel_launcher(ops: LaunchOperands, problem: Problem, config: Config) -> Callable[[int], object]:
    """launch(i): our `matmul_kernel` on operand set i with `config` (the grid and constexprs come
    from `jtblas.launch_specs.launch_spec`, exactly as `jtblas.matmul` launches it). `ops` is
    anything with LaunchOperands' attributes (the benchmark's `TorchOperands` too)."""
    from jtblas.kernels.matmul import matmul_kernel
    from jtblas.kernels.matmul_tma import matmul_tma_kernel
    from jtblas.kernels.reduce import sum_splits_kernel
    from jtblas.launch_specs import launch_spec, sum_splits_spec

    spec = launch_spec(problem, config)
    if config.tma:
        use_torch_global_scratch(ops.torch)
    kernel = (matmul_tma_kernel if config.tma else matmul_kernel)[spec.grid]
    scalars, meta = spec.scalars, spec.metaparams
    a, b, c = ops.a, ops.b, ops.c

    if config.split_k == 1:
        def launch(i):
            kernel(a[i], b[i], *scalars, c[i], num_warps=spec.num_warps, num_stages=spec.num_stages, **meta)

        return launch

    # Split-K: fp32 partials [split_k, M, N] (one workspace: launches are serialised on a stream),
    # then the fixed-order sum and cast; both launches are timed as one product.
    workspace = ops.torch.empty((config.split_k, problem.m, problem.n), device="cuda", dtype=ops.torch.float32)
    reduce = sum_splits_spec(problem, config)
    reducer = sum_splits_kernel[reduce.grid]

    def launch_split(i):
        kernel(a[i], b[i], *scalars, workspace, num_warps=spec.num_warps, num_stages=spec.num_stages, **meta)
        reducer(workspace, *reduce.scalars, c[i], num_warps=reduce.num_warps, num_stages=reduce.num_stages,
                **reduce.metaparams)

    return launch_split


def use_torch_global_scratch(torch) -> None:
    """Lets Triton's own launcher allocate the global scratch of kernels that need it (the TMA
    kernel's device-side descriptors) from torch's caching allocator, on the current stream
    (graph-capturable)."""
    import triton

    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
