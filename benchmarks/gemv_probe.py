"""Decode products (M ≤ 4) on the GPU: the experimental GEMV kernel vs the tiled kernel's pick,
cuBLAS and a copy of the weight's bytes, side by side in one run (torch launches in CUDA graphs,
operand sets rotating past the L2, as `jtblas bench` times).

    python benchmarks/gemv_probe.py [--shapes 1x4096x14336,...] [--json FILE]

For each shape: the weight's bytes per second of every contender and its ratio to the copy.
The GEMV kernel is timed over a small grid of its meta-parameters (the split chosen so that at
least two programs per SM stream the weight); its partials are summed by torch in the same graph.
This decides whether the kernel becomes a candidate of the model (issue 6).
"""

from __future__ import annotations

import itertools
import math

DEFAULT_SHAPES = ("1x3584x3584,1x4096x4096,1x6144x4096,1x4096x14336,1x3584x18944,1x8192x28672,"
                  "4x4096x14336,2x6144x4096")


def gemv_launcher(torch, ops, spec, m: int, n: int):
    """launch(i): the GEMV kernel on operand set i, then torch sums its fp32 partials into C."""
    from jtblas.kernels.gemv import gemv_kernel

    partials = torch.empty((spec.grid[1], m, n), device="cuda", dtype=torch.float32)
    kernel = gemv_kernel[spec.grid]

    def launch(i):
        kernel(ops.a[i], ops.b[i], *spec.scalars, partials, num_warps=spec.num_warps,
               num_stages=spec.num_stages, **spec.metaparams)
        ops.c[i].copy_(partials.sum(0))

    return launch


def probe_shape(torch, timer, text: str, sms: int, l2: int) -> dict:
    """Every contender on one M x N x K (NN, bf16) shape; weight bytes per second and copy ratios."""
    from jtblas.bench import contenders, probes, timing
    from jtblas.ops import gemv_spec

    m, n, k = (int(v) for v in text.lower().split("x"))
    shape, nbuf, ops, careful = probes.product(torch, timer, text, l2)
    weight_bytes = k * n * 2
    row = dict(shape=text, weight_bytes=weight_bytes, operand_sets=nbuf)
    row["copy_bytes_per_s"] = timing.copy_bandwidth(timer, nbytes=weight_bytes, nbuf=nbuf)["bytes_per_s"]
    row["cublas_s"] = careful(contenders.cublas_launcher(ops))
    plan, tiled = probes.plan_launch(ops, shape)
    row["tiled_config"] = plan.config.short()
    row["tiled_s"] = careful(tiled)
    gemv_rows = []
    for block_n, block_k, warps in itertools.product((128, 256, 512), (32, 64, 128), (4, 8, 16)):
        if block_n * block_k * (1 << (m - 1).bit_length()) > 32768:  # registers: the [M_PAD, BK, BN] product
            continue
        split = min(max(1, math.ceil(2 * sms / math.ceil(n / block_n))), math.ceil(k / block_k))
        entry = dict(block_n=block_n, block_k=block_k, warps=warps, split=split)
        try:
            launch = gemv_launcher(torch, ops, gemv_spec(m, n, k, block_k=block_k, block_n=block_n,
                                                         split_k=split, num_warps=warps), m, n)
            entry.update(seconds=careful(launch), max_rel_err=ops.error(launch))
        except Exception as error:  # noqa: BLE001 - e.g. out of registers: record it and go on
            entry["error"] = str(error)[:200]
        gemv_rows.append(entry)
    row["gemv"] = gemv_rows
    timed = [g for g in gemv_rows if "seconds" in g]
    row["gemv_best"] = min(timed, key=lambda g: g["seconds"]) if timed else None
    ops.free()
    torch.cuda.empty_cache()
    return row


def summary_line(row: dict) -> str:
    copy, weight = row["copy_bytes_per_s"], row["weight_bytes"]
    line = (f"{row['shape']:>14} {weight / 1e6:6.0f} MB  copy {copy / 1e9:5.0f} GB/s  "
            f"cuBLAS {weight / row['cublas_s'] / copy:5.0%}  "
            f"tiled {weight / row['tiled_s'] / copy:5.0%} ({row['tiled_config']})")
    best = row["gemv_best"]
    if best:
        line += (f"  gemv {weight / best['seconds'] / copy:5.0%} (BN {best['block_n']} BK {best['block_k']} "
                 f"w{best['warps']} split {best['split']}, err {best['max_rel_err']:.1e})")
    return line


def main(argv=None) -> None:
    from jtblas.bench import probes

    probes.main(__doc__, DEFAULT_SHAPES, probe_shape, summary_line, argv)


if __name__ == "__main__":
    main()
