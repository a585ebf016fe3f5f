"""Stream-K on the GPU: does it pay on the H200? (issue 6, item 2)

    python benchmarks/stream_k_probe.py [--shapes 3072x3072x3072,256x256x65536,...] [--json FILE]

For each M x N x K (NN, bf16) shape, side by side in one run (torch launches in CUDA graphs,
operand sets rotating past the L2, as `jtblas bench` times): cuBLAS, the model's plan (plain or
split-K tiled kernel) and the experimental Stream-K kernels (`jtblas/kernels/stream_k.py`: a
persistent grid computing all but the last full wave of tiles whole and sharing the rest's K
iterations, then a fix-up launch for the shared tiles) over a few
wgmma tiles and grids of one or two programs per SM. Prints TFLOP/s per contender; the JSON holds
every timing. The shapes are chosen where wave quantization or few tiles cost the tiled kernel:
deep K with a handful of tiles, tile counts just past a whole number of waves, a decode product.
"""

from __future__ import annotations

DEFAULT_SHAPES = ("3072x3072x3072,2432x1792x8192,4096x4096x4096,256x256x65536,512x512x16384,"
                  "1024x1024x32768,128x4096x14336,16x4096x14336")
# (block_m, block_n, block_k, num_warps, num_stages): wgmma tiles of the model's usual picks.
TILES = ((128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 64, 4, 4), (64, 128, 64, 4, 4))


def stream_k_launcher(torch, ops, m: int, n: int, k: int, tile: tuple, programs: int, input_precision: str):
    """launch(i): the Stream-K kernel and its fix-up on operand set i (C = ops.c[i])."""
    import triton

    from jtblas.kernels.stream_k import stream_k_fixup, stream_k_kernel
    from jtblas.ops import divisibility_unit

    block_m, block_n, block_k, warps, stages = tile
    workspace = torch.empty((programs, 2, block_m, block_n), device="cuda", dtype=torch.float32)
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
    dp_tiles = max(0, tiles // programs - 1) * programs  # all but the last full wave: whole tiles
    fix_rows = min(block_m, max(1, 2048 // block_n))  # fix-up programs of 2048 elements
    sizes = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8, PROGRAMS=programs)

    def launch(i):
        stream_k_kernel[(programs,)](
            ops.a[i], ops.b[i], m, n, k, k, 1, n, 1, n, 1, dp_tiles, workspace, ops.c[i],
            INPUT_PRECISION=input_precision, EVEN_K=k % block_k == 0, M_UNIT=divisibility_unit(m, 8),
            N_UNIT=divisibility_unit(n, 8), num_warps=warps, num_stages=stages, **sizes)
        stream_k_fixup[(tiles - dp_tiles, block_m // fix_rows)](
            workspace, m, n, k, n, 1, dp_tiles, ops.c[i], FIX_ROWS=fix_rows, num_warps=4, **sizes)

    return launch


def probe_shape(torch, timer, text: str, sms: int, l2: int) -> dict:
    from jtblas.bench import probes

    m, n, k = (int(v) for v in text.lower().split("x"))
    shape, nbuf, ops, careful = probes.product(torch, timer, text, l2)
    row = dict(shape=text, flops=2 * m * n * k, operand_sets=nbuf, **probes.baselines(ops, shape, careful))
    rows = []
    for tile in TILES:
        for per_sm in (1, 2):
            def measure(tile=tile, programs=per_sm * sms) -> dict:
                launch = stream_k_launcher(torch, ops, m, n, k, tile, programs, shape.problem().input_precision)
                return dict(seconds=careful(launch), max_rel_err=ops.error(launch))

            entry = dict(tile="%dx%dx%d w%d s%d" % tile, programs=per_sm * sms)
            rows.append(probes.measure_entry(entry, measure))
    row["stream_k"] = rows
    timed = [r for r in rows if "seconds" in r]
    row["stream_k_best"] = min(timed, key=lambda r: r["seconds"]) if timed else None
    ops.free()
    torch.cuda.empty_cache()
    return row


def summary_line(row: dict) -> str:
    from jtblas.bench import probes

    tflops = lambda seconds: row["flops"] / seconds / 1e12  # noqa: E731
    line = probes.baseline_line(row, "model plan")
    best = row["stream_k_best"]
    if best:
        line += (f"  Stream-K {tflops(best['seconds']):5.0f} ({best['tile']}, {best['programs']} programs, "
                 f"err {best['max_rel_err']:.1e})  Stream-K / plan {row['plan_s'] / best['seconds']:.2f}")
    return line


def main(argv=None) -> None:
    from jtblas.bench import probes

    probes.main(__doc__, DEFAULT_SHAPES, probe_shape, summary_line, argv)


if __name__ == "__main__":
    main()
