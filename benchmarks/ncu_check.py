"""Kernel durations under Nsight Compute for each contender, to validate the benchmark's timers.

Run under ncu (the profiled region is bracketed by cudaProfilerStart/Stop, so XLA's compile-time
autotuning is not profiled):

    ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \\
        python benchmarks/ncu_check.py --shapes 4096x4096x4096,8192x768x3072 > ncu.csv
    python benchmarks/ncu_check.py --parse ncu.csv --results bench-out/results.json

Each contender runs `--repeats` times between marker kernels (torch fill kernels); the parse step
sums the durations of every kernel between two markers (e.g. XLA's split-K GEMM and its reduction)
and divides by the repeats, then sets them beside the benchmark's numbers for the same shapes.

On the H200 (2026-11-30) ncu crashed (segmentation fault) with JAX in the profiled process; to
validate the torch-side timers alone, pass `--contenders jtblas_torch,cublas` to both steps.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys

CONTENDERS = ("jtblas_torch", "jtblas_jax", "xla", "cublas")
SECONDS_PER_UNIT = {"ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "ms": 1e-3, "msecond": 1e-3}


def run(shapes: list[tuple[int, int, int]], repeats: int, contenders: tuple[str, ...] = CONTENDERS) -> None:
    import torch

    import jtblas
    from jtblas.kernels.matmul import matmul_kernel
    from jtblas.ops import launch_spec

    marker = torch.zeros(1, device="cuda")
    plan = []
    for m, n, k in shapes:
        config = jtblas.select(m, n, k, dtype="bfloat16")
        a = torch.randn((m, k), device="cuda", dtype=torch.bfloat16)
        b = torch.randn((k, n), device="cuda", dtype=torch.bfloat16)
        c = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        spec = launch_spec(jtblas.Problem(m=m, n=n, k=k), config)

        def ours(a=a, b=b, c=c, spec=spec):
            matmul_kernel[spec.grid](a, b, *spec.scalars, c, num_warps=spec.num_warps,
                                     num_stages=spec.num_stages, **spec.metaparams)

        calls = {"jtblas_torch": ours, "cublas": lambda a=a, b=b: torch.matmul(a, b)}
        if {"jtblas_jax", "xla"} & set(contenders):  # JAX only when asked: see the module doc
            import jax
            import jax.numpy as jnp

            a_j = jax.random.normal(jax.random.key(0), (m, k), jnp.bfloat16)
            b_j = jax.random.normal(jax.random.key(1), (k, n), jnp.bfloat16)
            ours_jax = jax.jit(lambda x, y, config=config: jtblas.matmul(x, y, config=config))
            xla = jax.jit(jnp.dot)
            calls["jtblas_jax"] = lambda f=ours_jax, x=a_j, y=b_j: f(x, y).block_until_ready()
            calls["xla"] = lambda f=xla, x=a_j, y=b_j: f(x, y).block_until_ready()
        calls = {name: calls[name] for name in contenders}
        for call in calls.values():  # compile and autotune outside the profiled region
            call()
        torch.cuda.synchronize()
        plan.append(calls)
    torch.cuda.profiler.start()
    for calls in plan:
        for name in contenders:
            marker.fill_(1.0)
            torch.cuda.synchronize()
            for _ in range(repeats):
                calls[name]()
            torch.cuda.synchronize()
    marker.fill_(1.0)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def parse(csv_path: str, shapes: list[tuple[int, int, int]], repeats: int, results: str | None,
          contenders: tuple[str, ...] = CONTENDERS) -> list[dict]:
    text = open(csv_path).read()
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    segments, current = [], None
    for row in rows:
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        if "FillFunctor" in row["Kernel Name"]:
            if current is not None:
                segments.append(current)
            current = []
            continue
        if current is not None:
            unit = row.get("Metric Unit", "ns")
            scale = SECONDS_PER_UNIT.get(unit, 1e-9)
            current.append((row["Kernel Name"], float(row["Metric Value"].replace(",", "")) * scale))
    bench = {}
    if results:
        for record in json.load(open(results))["shapes"]:
            if record["layout"] == "NN" and record["dtype"] == "bfloat16":
                bench[(record["M"], record["N"], record["K"])] = record["contenders"]
    table = []
    names = [(shape, name) for shape in shapes for name in contenders]
    for (shape, name), kernels in zip(names, segments):
        seconds = sum(duration for _, duration in kernels) / repeats
        measured = bench.get(shape, {}).get({"jtblas_torch": "jtblas"}.get(name, name), {}).get("seconds")
        table.append(dict(shape="x".join(map(str, shape)), contender=name, ncu_seconds=seconds,
                          kernels=sorted({re.sub(r"\(.*", "", k)[:60] for k, _ in kernels}),
                          bench_seconds=measured, bench_over_ncu=(measured / seconds) if measured else None))
    for row in table:
        ratio = f"{row['bench_over_ncu']:.3f}" if row["bench_over_ncu"] else "-"
        bench_us = f"{row['bench_seconds'] * 1e6:9.1f}" if row["bench_seconds"] else "        -"
        print(f"{row['shape']:>16} {row['contender']:>13} ncu {row['ncu_seconds'] * 1e6:9.1f} us  "
              f"bench {bench_us} us  bench/ncu {ratio}  {', '.join(row['kernels'])}")
    return table


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="4096x4096x4096,8192x768x3072,16x12288x4096")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help="subset of " + ",".join(CONTENDERS) + " (the same for the run and the parse)")
    parser.add_argument("--parse", default=None, help="ncu CSV to read instead of running")
    parser.add_argument("--results", default=None, help="bench results.json to compare with")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    contenders = tuple(args.contenders.split(","))
    unknown = set(contenders) - set(CONTENDERS)
    if unknown:
        parser.error(f"unknown contenders {sorted(unknown)}; choose from {CONTENDERS}")
    if args.parse:
        table = parse(args.parse, shapes, args.repeats, args.results, contenders)
        if args.json:
            json.dump(table, open(args.json, "w"), indent=1)
    else:
        run(shapes, args.repeats, contenders)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
