"""Split-K on the GPU: what the reduction costs, by the size of its programs (issue 6)

    python benchmarks/split_k_probe.py [--shapes 256x256x65536,...] [--json FILE]

For each M x N x K (NN, bf16) shape, side by side in one run (torch launches in CUDA graphs,
operand sets rotating past the L2, as `jtblas bench` times): cuBLAS, the model's plan, and a few
wgmma tiles with the largest split factors that keep the grid under two waves, each run three
ways: `matmul_kernel` into the fp32 workspace followed by `sum_splits_kernel` with programs spread
over the SMs (`jtblas.ops.sum_splits_spec`, as `jtblas.matmul` runs it), the same with fixed
1024-element programs (the reduction before session 8), and the first launch alone (no reduction:
the floor the reduction adds to). Prints TFLOP/s; the JSON holds every timing.
"""

from __future__ import annotations

import dataclasses

DEFAULT_SHAPES = ("256x256x65536,128x128x32768,64x64x65536,512x512x16384,1024x1024x32768,"
                  "128x4096x65536,4096x128x65536,256x512x131072")
# (block_m, block_n, block_k, num_warps, num_stages): the wgmma tiles the model splits.
TILES = ((64, 64, 128, 4, 5), (64, 128, 64, 4, 5), (128, 128, 64, 4, 5), (128, 256, 64, 8, 4))
SPLITS = (2, 4, 8, 16, 32, 64, 128, 256)
SPLITS_PER_TILE = 3  # the largest that fit


def splits_for(m: int, n: int, k: int, tile: tuple, sms: int) -> list[int]:
    """The SPLITS_PER_TILE largest splits with a grid under two waves and ≥ 2 K blocks per split
    (none for a tile larger than the product)."""
    block_m, block_n, block_k = tile[:3]
    if block_m > max(64, m) or block_n > max(64, n):
        return []  # a tile past the product's edge only pads
    tiles = -(-m // block_m) * -(-n // block_n)
    k_blocks = -(-k // block_k)
    fits = [s for s in SPLITS if tiles * s < 2 * sms and k_blocks >= 2 * s]
    return fits[-SPLITS_PER_TILE:]


def two_launches(ops, problem, config, *, reduce_block: int, reduce: bool = True):
    """launch(i): matmul_kernel writing fp32 partials, then (with `reduce`) sum_splits_kernel in
    programs of `reduce_block` elements (4 warps) instead of those `sum_splits_spec` sizes."""
    from jtblas.kernels.matmul import matmul_kernel
    from jtblas.kernels.reduce import sum_splits_kernel
    from jtblas.ops import launch_spec, sum_splits_spec

    torch = ops.torch
    spec = launch_spec(problem, config)
    workspace = torch.empty((config.split_k, problem.m, problem.n), device="cuda", dtype=torch.float32)
    sums = sum_splits_spec(problem, config)
    grid, meta = (-(-problem.m * problem.n // reduce_block),), dict(sums.metaparams, BLOCK=reduce_block)

    def launch(i):
        matmul_kernel[spec.grid](ops.a[i], ops.b[i], *spec.scalars, workspace, num_warps=spec.num_warps,
                                 num_stages=spec.num_stages, **spec.metaparams)
        if reduce:
            sum_splits_kernel[grid](workspace, *sums.scalars, ops.c[i], num_warps=4, num_stages=1, **meta)

    return launch


def probe_shape(torch, timer, text: str, sms: int, l2: int) -> dict:
    from jtblas import Config
    from jtblas.bench import contenders, probes

    m, n, k = (int(v) for v in text.lower().split("x"))
    shape, nbuf, ops, careful = probes.product(torch, timer, text, l2)
    problem = shape.problem()
    row = dict(shape=text, flops=2 * m * n * k, operand_sets=nbuf, **probes.baselines(ops, shape, careful))
    rows = []
    for tile in TILES:
        block_m, block_n, block_k, warps, stages = tile
        for split in splits_for(m, n, k, tile, sms):
            config = Config(block_m=block_m, block_n=block_n, block_k=block_k, num_warps=warps,
                            num_stages=stages, group_m=8, split_k=split)

            def measure(config=config) -> dict:
                spread = contenders.kernel_launcher(ops, problem, config)  # as jtblas.matmul runs it
                fixed = two_launches(ops, problem, config, reduce_block=1024)
                partials = two_launches(ops, problem, config, reduce_block=1024, reduce=False)
                return dict(spread_s=careful(spread), spread_err=ops.error(spread),
                            fixed_1024_s=careful(fixed), fixed_1024_err=ops.error(fixed),
                            partials_only_s=careful(partials))

            entry = dict(config=config.short(), config_dict=dataclasses.asdict(config))
            rows.append(probes.measure_entry(entry, measure))
    row["splits"] = rows
    timed = [r for r in rows if "spread_s" in r]
    row["best_spread"] = min(timed, key=lambda r: r["spread_s"]) if timed else None
    row["best_fixed_1024"] = min(timed, key=lambda r: r["fixed_1024_s"]) if timed else None
    ops.free()
    torch.cuda.empty_cache()
    return row


def summary_line(row: dict) -> str:
    from jtblas.bench import probes

    tflops = lambda seconds: row["flops"] / seconds / 1e12  # noqa: E731
    line = probes.baseline_line(row)
    spread, fixed = row["best_spread"], row["best_fixed_1024"]
    if spread and fixed:
        line += (f"  spread {tflops(spread['spread_s']):5.0f} ({spread['config']}, err {spread['spread_err']:.1e})"
                 f"  1024 {tflops(fixed['fixed_1024_s']):5.0f} ({fixed['config']})"
                 f"  [same config: partials only {tflops(spread['partials_only_s']):5.0f}]")
    return line


def main(argv=None) -> None:
    from jtblas.bench import probes

    probes.main(__doc__, DEFAULT_SHAPES, probe_shape, summary_line, argv)


if __name__ == "__main__":
    main()
