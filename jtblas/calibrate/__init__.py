"""`jtblas calibrate`: measure the GPU in hand and write the hardware profile the model reads.

Three modules, one job each: `measure` times probe kernels on the GPU (torch, Triton and JAX,
imported lazily), `derive` turns the measured numbers into profile fields (pure Python, tested
on any machine with recorded numbers), `report` prints measured against built-in numbers. The
probe kernels are in `kernels` (imports Triton).

Each measurement takes a second or less (the whole run ~20-40 s, `--quick` ~10-20 s, most of it
CUDA/cuBLAS start-up and Triton compiles) and is timed on the device (CUDA graphs and events,
`jtblas.timing.GraphTimer`), never by Python wall clock:

| measurement | how | feeds |
|---|---|---|
| DRAM bandwidth | `dst.copy_(src)` of 256 MiB, read + written bytes / time | `dram_bytes_per_s` |
| L2 bandwidth | the largest of several lower bounds: a Triton read kernel, a program per SM | `l2_bytes_per_s` |
|              | re-reading a 17 MB working set (no L1); our GEMM kernels' tile loads / time |                  |
|              | on L2-resident operands (`measure.L2_GEMM_CONFIGS`, 2048x2048x4096)          |                  |
| tensor-core rates | `torch.matmul` (cuBLAS, the practical ceiling) of 8192³ bf16/fp16, tf32 | `tensor_flops` |
| fp32 rate | `torch.matmul` fp32 4096³ with TF32 off | `fp32_flops` |
| launch overhead | a one-element Triton kernel through jax-triton, chained in a jitted loop  | `launch_seconds` |
|                 | (slope; the CUDA-graph launch of an empty kernel is recorded too)        |                  |
| SM clock | NVML (via torch) sampled while the bf16 GEMMs run | `clock_hz` |
| per-SM load rate | the read kernel on 1, 2, 4, 8, ... SMs with 128 KB in flight each | `load_bytes_per_clock` (1) |
| loaded latency | the read kernel on every SM, 8-128 KB in flight each (Little's law) | `memory_latency_seconds` (1) |

(1) model constants (`jtblas.constants.Constants`): always recorded under `measured`, applied
(written under `constants`) only with `--fit-constants`, because the model's values were chosen
against exhaustive GEMM timings and these microbenchmarks measure a related, not identical,
quantity (docs/calibrate.md). The busy-SM curve (`busy_sm_rates`) likewise: recorded under
`measured`, a hardware field only with `--fit-constants`.

Importing the package, `derive` or `report` imports neither torch, Triton nor JAX.
"""
