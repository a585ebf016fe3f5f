"""Device time per product of the MLP block's six GEMMs, gaps excluded: jtblas through JAX (the
model's whole plan), XLA's dot and torch.mm (cuBLAS), each kernel's duration read from CUPTI
(torch.profiler), on the GPU.

    python benchmarks/kernel_durations.py [--gemms fwd1,dx1,...] [--rounds 4] [--calls 30] [--json FILE]

The slope loops of `mlp_block.py` and `jtblas bench` time whole iterations, launch gaps and the
loop's own work included; here only the kernels' own durations count. Each contender first runs
for `--warm` seconds (the GPU settles at its power-limited clock), then `--calls` products are
profiled; the contenders take turns, the order reversed every other round, and the median of all
rounds' per-product times is kept (every kernel a product launches summed: a repacking copy, a
split-K reduction, XLA's fusions around its GEMM; per record of the main kernel, see
`device_seconds_per_call`). BENCHMARKS.md, session 14.
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import torch

import jtblas

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from jax_timeline import timeline  # noqa: E402
from mlp_gemms import gemms, jtblas_product, xla_product  # noqa: E402


def wait(result) -> None:
    """Until the GPU has finished `result` (a JAX array) and everything torch queued."""
    if hasattr(result, "block_until_ready"):
        result.block_until_ready()
    torch.cuda.synchronize()


def device_seconds_per_call(run, calls: int, warm_s: float) -> tuple[float, int]:
    """Device seconds per product while `run` is called `calls` times (`jax_timeline.timeline`'s
    CUPTI records): every kernel's summed time ÷ the records of the main kernel (the one with the
    largest total), and that count, which checks that each call was recorded once."""
    end = time.perf_counter() + warm_s
    while time.perf_counter() < end:
        wait(run())

    def batch() -> None:
        for _ in range(calls):
            result = run()
        wait(result)

    kernels = timeline(torch, batch, calls)["kernels"]
    main_kernel = max(kernels.values(), key=lambda k: k["count"] * k["us_each"])
    busy_us = sum(k["count"] * k["us_each"] for k in kernels.values())
    return busy_us * 1e-6 / main_kernel["count"], main_kernel["count"]


def measure_gemm(name: str, a_shape, b_shape, ta: bool, tb: bool, mnk: tuple[int, int, int],
                 args: argparse.Namespace) -> dict:
    """One GEMM: each contender's device seconds per product (median over the rounds), printed."""
    m, n, k = mnk
    keys = jax.random.split(jax.random.key(0), 2)
    a = jax.random.normal(keys[0], a_shape, jnp.bfloat16)
    b = jax.random.normal(keys[1], b_shape, jnp.bfloat16)
    a_torch, b_torch = torch.from_dlpack(a), torch.from_dlpack(b)
    a_op, b_op = (a_torch.t() if ta else a_torch), (b_torch.t() if tb else b_torch)
    c_torch = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    runs = {
        "jtblas (JAX)": functools.partial(jax.jit(jtblas_product(ta, tb)), a, b),
        "XLA dot": functools.partial(jax.jit(xla_product(ta, tb)), a, b),
        "torch.mm": functools.partial(torch.mm, a_op, b_op, out=c_torch),
    }
    times = {label: [] for label in runs}
    counted = {label: [] for label in runs}
    for index in range(args.rounds):
        for label in (list(runs) if index % 2 == 0 else reversed(list(runs))):
            seconds, records = device_seconds_per_call(runs[label], args.calls, args.warm)
            times[label].append(seconds)
            counted[label].append(records)
    row = dict(gemm=name, m=m, n=n, k=k, pick=jtblas.select(m, n, k, transpose_a=ta, transpose_b=tb).short(),
               seconds={label: statistics.median(values) for label, values in times.items()}, rounds=times,
               main_kernel_records=counted)
    flops = 2 * m * n * k
    line = "  ".join(f"{label} {seconds * 1e6:8.1f} µs ({flops / seconds / 1e12:4.0f} TFLOP/s)"
                     for label, seconds in row["seconds"].items())
    ratio = row["seconds"]["XLA dot"] / row["seconds"]["jtblas (JAX)"]
    records = " ".join(f"{min(values)}-{max(values)}" for values in counted.values())
    print(f"{name:8s} {m}x{n}x{k}  {line}  XLA ÷ jtblas time {ratio:.3f}  pick {row['pick']}  "
          f"main-kernel records per batch {records}", flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--ffn", type=int, default=14336)
    parser.add_argument("--gemms", default="fwd1,fwd2,dx2,dx1,dw2,dw1")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--warm", type=float, default=0.3, help="seconds of load before each profiled batch")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    wanted = {name.strip() for name in args.gemms.split(",")}
    rows = []
    for name, a_shape, b_shape, ta, tb, mnk in gemms(args.tokens, args.hidden, args.ffn):
        if name.split()[0] in wanted:
            rows.append(measure_gemm(name, a_shape, b_shape, ta, tb, mnk, args))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(dict(device=jax.devices()[0].device_kind, method=__doc__,
                                                           rows=rows), indent=1))


if __name__ == "__main__":
    main()
