"""jtblas.matmul vs jnp.dot under jax.jit, device time per call, on the GPU.

Method (shared/GPU.md): the slope between two loop lengths, (t(2R) - t(R)) / R, of one jitted
function that runs the product R times in a `lax.fori_loop`; the fixed cost of the call cancels.
Each iteration writes one element of A from the loop carry, so XLA cannot hoist the product out of
the loop, and carries the whole C, so XLA computes all of it (were only C[0, 0] used, XLA would
reduce one element of a split-K product: BENCHMARKS.md, session 11). The same function body is
used for both contenders.

    python benchmarks/matmul_vs_xla.py [--shapes 4096x4096x4096,8192x1024x8192] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable

import jax
import jax.numpy as jnp

import jtblas
from jtblas.bench.timing import measure_slope


def looped(product, repeats: int):
    """A jitted function running `product(a, b)` `repeats` times on a carry-dependent A; returns
    (the checksum of the C[0, 0]s, the last C)."""

    def run(a, b):
        def body(_, carry):
            a, checksum, _ = carry
            c = product(a, b)
            checksum = checksum + c[0, 0].astype(jnp.float32)
            a = a.at[0, 0].set((checksum * 0).astype(a.dtype) + a[0, 0])
            return a, checksum, c

        out = jax.eval_shape(product, a, b)
        c0 = jnp.zeros(out.shape, out.dtype)
        _, checksum, c = jax.lax.fori_loop(0, repeats, body, (a, jnp.float32(0), c0))
        return checksum, c

    return jax.jit(run)


def slope_timer(product, a, b, *, repeats: int = 20) -> Callable[[int], float]:
    """Compiles `product` looped R and 2R times and returns measure(trials): seconds per call by
    `jtblas.bench.timing.measure_slope` (the two lengths alternated `trials` times, the slope of
    their medians), callable again for another sample without recompiling."""
    looped_by_repeats = {repeats: looped(product, repeats), 2 * repeats: looped(product, 2 * repeats)}
    for function in looped_by_repeats.values():
        jax.block_until_ready(function(a, b))

    def run(count: int) -> None:
        jax.block_until_ready(looped_by_repeats[count](a, b))

    return lambda trials: measure_slope(run, repeats, trials=trials)["seconds"]


def seconds_per_call(product, a, b, *, repeats: int = 20, trials: int = 5) -> float:
    """Seconds per call of `product`, (t(2R) - t(R)) / R (`slope_timer`, measured once)."""
    return slope_timer(product, a, b, repeats=repeats)(trials)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="4096x4096x4096")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    results = []
    print(f"{'M x N x K':>22} {'jtblas us':>10} {'XLA us':>10} {'jtblas/XLA':>10}  config")
    for text in args.shapes.split(","):
        m, n, k = (int(x) for x in text.lower().split("x"))
        key_a, key_b = jax.random.split(jax.random.key(0))
        a = jax.random.normal(key_a, (m, k), args.dtype)
        b = jax.random.normal(key_b, (k, n), args.dtype)
        config = jtblas.select(m, n, k, dtype=args.dtype) if hasattr(jtblas, "select") else jtblas.Config()
        ours = seconds_per_call(functools.partial(jtblas.matmul, config=config), a, b)
        xla = seconds_per_call(jnp.dot, a, b)
        flops = 2 * m * n * k
        print(f"{text:>22} {ours * 1e6:10.1f} {xla * 1e6:10.1f} {xla / ours:10.3f}  {config.short()}"
              f"   ({flops / ours / 1e12:.0f} vs {flops / xla / 1e12:.0f} TFLOP/s)")
        results.append(dict(shape=text, dtype=args.dtype, config=config.short(), jtblas_seconds=ours,
                            xla_seconds=xla, speedup_vs_xla=xla / ours))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=jax.devices()[0].device_kind, jax=jax.__version__, results=results), f, indent=1)


if __name__ == "__main__":
    main()
