"""Checks `jtblas bench`'s through-JAX slope against the GPU's own kernel durations.

    python benchmarks/kernel_time_check.py [--shapes 8192x768x768,1x50257x1600,...] [--json FILE]

For each M x N x K[:layout] (bf16) product, builds the benchmark's slope loop (`jax_loop.SlopeTimer`)
for jtblas.matmul and for XLA's dot, takes the slope as the bench does, then runs the same compiled
loop once more under `torch.profiler`, whose CUPTI records every kernel of the process, XLA's too,
and divides the summed kernel durations by the products run. The slope includes what runs between
kernels (launch gaps, the loop's one-element chaining update); the kernel sum does not, so the
slope should be at or a little above it. (Nsight Compute segfaulted with JAX in the profiled
process on the H200, 2026-11-30; CUPTI through torch.profiler reads the same durations.) Needs torch.
"""

from __future__ import annotations

import argparse
import json

import jax

from jtblas.bench import jax_loop, shapes, through_jax

DEFAULT_SHAPES = "8192x768x768,768x768x6304:TN,1x50257x1600,16x6144x4096,4096x4096x4096:NT,128x128x32768"


def parse(text: str) -> shapes.Shape:
    dims, _, layout = text.partition(":")
    m, n, k = (int(x) for x in dims.lower().split("x"))
    return shapes.Shape(name=text, set="check", family="check", regime="check", m=m, n=n, k=k,
                        layout=(layout or "NN").upper(), dtype="bfloat16")


def kernel_seconds(run, products: int) -> tuple[float, int]:
    """(summed CUDA kernel durations / products, kernels seen) of one `run()` under CUPTI."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type.name == "CUDA"]
    total_us = sum(e.time_range.end - e.time_range.start for e in events)
    return total_us * 1e-6 / products, len(events)


def check(shape: shapes.Shape, l2_bytes: int) -> dict:
    sets = jax_loop.operand_sets(shape.bytes_moved, l2_bytes)
    as_, bs = jax_loop.operands(shape, sets)
    row = dict(shape=shape.name, operand_sets=sets)
    for name, dot in (("jtblas", jax_loop.jtblas_dot(shape)), ("xla", jax_loop.xla_dot(shape))):
        timer = jax_loop.SlopeTimer(dot, as_, bs, estimate_s=through_jax.estimate_seconds(shape))
        slope = timer.measure(5)["seconds"]
        kernels, count = kernel_seconds(lambda t=timer: t._run(2 * t.products), 2 * timer.products)
        row[name] = dict(slope_s=slope, kernel_s=kernels, slope_over_kernels=slope / kernels,
                         kernels_per_product=count / (2 * timer.products))
    jax.clear_caches()
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    from jtblas import hardware

    l2_bytes = hardware.detect().l2_bytes
    rows = []
    print(f"{'product':>22} {'contender':>8} {'slope us':>9} {'kernels us':>10} {'slope/kern':>10} {'kern/prod':>9}")
    for text in args.shapes.split(","):
        row = check(parse(text), l2_bytes)
        rows.append(row)
        for name in ("jtblas", "xla"):
            r = row[name]
            print(f"{text:>22} {name:>8} {r['slope_s'] * 1e6:9.1f} {r['kernel_s'] * 1e6:10.1f} "
                  f"{r['slope_over_kernels']:10.3f} {r['kernels_per_product']:9.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=jax.devices()[0].device_kind, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
