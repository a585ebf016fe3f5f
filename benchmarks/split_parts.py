"""Decode products on the GPU: where a split-K product's time goes, launch by launch (torch
launches in CUDA graphs, operand sets rotating past the L2, as `jtblas bench` times).

    python benchmarks/split_parts.py [--shapes 1x6144x4096,...] [--json FILE]

For each shape and each split config of CONFIGS: the whole deterministic product (GEMM into fp32
partials, then the fixed-order sum), the GEMM alone, the sum alone, the atomic product (zeroing,
GEMM adding with atomics, the cast) and its parts; with the copy, the best read-once kernel
(`read_ceiling.py`) and the model's plan. It says what a one-launch split would gain.
"""

from __future__ import annotations

CONFIGS = ("16x64x128 w4 s3 g1 k2 swap", "16x64x128 w4 s3 g1 k4 swap", "16x64x128 w4 s3 g1 k8 swap",
           "16x64x64 w4 s3 g1 k8 swap", "16x64x256 w4 s3 g1 k2 swap", "16x64x128 w2 s4 g1 k4",
           "16x128x128 w4 s3 g1 k4 swap", "16x64x256 w4 s4 g1 swap")
READS = ((1024, 8, 8), (2048, 4, 8), (1024, 4, 4))  # block, loads, warps
DEFAULT_SHAPES = "1x6144x4096,16x6144x4096,1x4096x4096,16x3584x3584"


def parts(torch, ops, problem, config) -> dict:
    """launch(i) for each part of a split product: name -> callable."""
    from jtblas.bench import contenders
    from jtblas.kernels.matmul import matmul_kernel
    from jtblas.kernels.reduce import sum_splits_kernel
    from jtblas.ops import launch_spec, sum_splits_spec

    out = dict(product=contenders.kernel_launcher(ops, problem, config))
    if config.split_k == 1:
        return out
    spec = launch_spec(problem, config)
    gemm = matmul_kernel[spec.grid]
    reduce = sum_splits_spec(problem, config)
    reducer = sum_splits_kernel[reduce.grid]
    partials = torch.empty((config.split_k, problem.m, problem.n), device="cuda", dtype=torch.float32)
    a, b, c = ops.a, ops.b, ops.c
    out["gemm"] = lambda i: gemm(a[i], b[i], *spec.scalars, partials, num_warps=spec.num_warps,
                                 num_stages=spec.num_stages, **spec.metaparams)
    out["sum"] = lambda i: reducer(partials, *reduce.scalars, c[i], num_warps=reduce.num_warps,
                                   num_stages=reduce.num_stages, **reduce.metaparams)
    atomic = launch_spec(problem, config, atomic=True)
    cast = sum_splits_spec(problem, config, atomic=True)
    caster = sum_splits_kernel[cast.grid]
    total = torch.empty((problem.m, problem.n), device="cuda", dtype=torch.float32)
    atomic_gemm = lambda i: gemm(a[i], b[i], *atomic.scalars, total, num_warps=atomic.num_warps,
                                 num_stages=atomic.num_stages, **atomic.metaparams)
    out["zero"] = lambda i: total.zero_()
    out["atomic_gemm"] = atomic_gemm
    out["cast"] = lambda i: caster(total, *cast.scalars, c[i], num_warps=cast.num_warps,
                                   num_stages=cast.num_stages, **cast.metaparams)

    out["atomic_product"] = lambda i: (out["zero"](i), atomic_gemm(i), out["cast"](i))
    return out


def probe_shape(torch, timer, text: str, sms: int, l2: int) -> dict:
    """Copy, the best flat read, cuBLAS, the plan and every part of each config of CONFIGS on one
    M x N x K (NN, bf16) shape; seconds each, and each product's max relative error."""
    from jtblas.bench import probes, timing
    from jtblas.config import Config
    from read_ceiling import read_launcher

    shape, nbuf, ops, careful = probes.product(torch, timer, text, l2)
    problem = shape.problem()
    weight_bytes = shape.k * shape.n * 2
    row = dict(shape=text, weight_bytes=weight_bytes, operand_sets=nbuf, flops=2 * shape.m * shape.n * shape.k)
    row["copy_bytes_per_s"] = timing.copy_bandwidth(timer, nbytes=weight_bytes, nbuf=nbuf)["bytes_per_s"]
    row.update(probes.baselines(ops, shape, careful))
    row["read_s"] = min(careful(read_launcher(torch, ops.b, *read)) for read in READS)
    row["configs"] = {}
    for short in CONFIGS:
        config = Config.from_short(short)
        entry = row["configs"][short] = {}
        launches = parts(torch, ops, problem, config)
        for name, launch in launches.items():
            probes.measure_entry(entry, lambda name=name, launch=launch: {f"{name}_s": careful(launch)})
        probes.measure_entry(entry, lambda launches=launches: dict(product_err=ops.error(launches["product"])))
    ops.free()
    torch.cuda.empty_cache()
    return row


def summary_line(row: dict) -> str:
    copy, weight = row["copy_bytes_per_s"], row["weight_bytes"]
    pct = lambda seconds: f"{weight / seconds / copy:4.0%}" if seconds else "  - "
    lines = [f"{row['shape']:>14} {weight / 1e6:5.0f} MB copy {copy / 1e9:5.0f} GB/s  read {pct(row['read_s'])} "
             f"({row['read_s'] * 1e6:.2f} us)  plan {pct(row['plan_s'])} ({row['plan_config']}, "
             f"{row['plan_s'] * 1e6:.2f} us)"]
    for short, entry in row["configs"].items():
        times = "  ".join(f"{key[:-2]} {value * 1e6:.2f}" for key, value in entry.items() if key.endswith("_s"))
        lines.append(f"    {short:<28} {pct(entry.get('product_s'))}  {times}  err {entry.get('product_err', '-')}"
                     + (f"  ERROR {entry['error']}" if "error" in entry else ""))
    return "\n".join(lines)


def main(argv=None) -> None:
    from jtblas.bench import probes

    probes.main(__doc__, DEFAULT_SHAPES, probe_shape, summary_line, argv)


if __name__ == "__main__":
    main()
