"""The six GEMMs of an MLP block's training step through JAX: XLA's dot vs jtblas.matmul, on the GPU.

Each GEMM on its stored operands, as `jtblas.nn.Dense` runs it (forward NN, dx NT, dw TN), timed
by the slope method of `matmul_vs_xla.seconds_per_call`, contenders interleaved over rounds (the
H200's clock under sustained tensor load drifts by several % over a minute, more than the
differences measured). `--no-tma` adds jtblas without its TMA kernel (as with a jaxlib older than
0.11: the dx GEMMs then copy B transposed); `--tma-twin` adds the model's pick run on the TMA
kernel (the same tile; since session 12 the model's picks for these six are TMA configs already,
so the twin is the same config).

    python benchmarks/mlp_gemms.py [--tokens 8192 --hidden 4096 --ffn 14336] [--rounds 3] [--no-tma]
                                   [--tma-twin] [--json FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import statistics
import sys

import jax
import jax.numpy as jnp

import jtblas
from jtblas import launch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from matmul_vs_xla import seconds_per_call  # noqa: E402


def gemms(tokens: int, hidden: int, ffn: int) -> list[tuple]:
    """(name, A stored shape, B stored shape, transpose_a, transpose_b, (M, N, K)) of the six."""
    t, h, f = tokens, hidden, ffn
    return [
        ("fwd1 NN", (t, h), (h, f), False, False, (t, f, h)),
        ("fwd2 NN", (t, f), (f, h), False, False, (t, h, f)),
        ("dx2 NT", (t, h), (f, h), False, True, (t, f, h)),
        ("dx1 NT", (t, f), (h, f), False, True, (t, h, f)),
        ("dw2 TN", (t, f), (t, h), True, False, (f, h, t)),
        ("dw1 TN", (t, h), (t, f), True, False, (h, f, t)),
    ]


def xla_product(transpose_a: bool, transpose_b: bool):
    dims = (((0 if transpose_a else 1,), (1 if transpose_b else 0,)), ((), ()))
    return lambda a, b: jax.lax.dot_general(a, b, dims)


def jtblas_product(transpose_a: bool, transpose_b: bool, config=None):
    return lambda a, b: jtblas.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b, config=config)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--ffn", type=int, default=14336)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-tma", action="store_true", help="also time jtblas without its TMA kernel")
    parser.add_argument("--tma-twin", action="store_true", help="also time the pick's tile on the TMA kernel")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    scratch = launch._jaxlib_kernel_takes_scratch
    contenders = ["xla", "jtblas"] + ["jtblas-no-tma"] * args.no_tma + ["jtblas-tma"] * args.tma_twin
    rows = []
    for name, a_shape, b_shape, ta, tb, (m, n, k) in gemms(args.tokens, args.hidden, args.ffn):
        a = jax.random.normal(jax.random.PRNGKey(0), a_shape, jnp.bfloat16)
        b = jax.random.normal(jax.random.PRNGKey(1), b_shape, jnp.bfloat16)
        pick = jtblas.select(m, n, k, transpose_a=ta, transpose_b=tb)
        twin = dataclasses.replace(pick, tma=True)
        times = {c: [] for c in contenders}
        for _ in range(args.rounds):
            for contender in contenders:
                # The pointer-kernel-only variant: the launcher reports no global scratch (a fresh
                # trace per call, so the model plans again without the TMA twins).
                launch._jaxlib_kernel_takes_scratch = (lambda: False) if contender == "jtblas-no-tma" else scratch
                if contender == "xla":
                    product = xla_product(ta, tb)
                else:
                    product = jtblas_product(ta, tb, twin if contender == "jtblas-tma" else None)
                try:
                    times[contender].append(seconds_per_call(product, a, b))
                except ValueError as error:  # a pick with no TMA twin (a tile the TMA kernel cannot run)
                    raise SystemExit(f"{name}: --tma-twin: {error}") from None
        launch._jaxlib_kernel_takes_scratch = scratch
        row = dict(name=name, m=m, n=n, k=k, pick=pick.short(),
                   seconds={c: statistics.median(v) for c, v in times.items()}, rounds=times)
        rows.append(row)
        tflops = "  ".join(f"{c} {2 * m * n * k / s / 1e12:.0f}" for c, s in row["seconds"].items())
        print(f"{name} {m}x{n}x{k} (pick {row['pick']}): TFLOP/s {tflops}", flush=True)
    totals = {c: sum(r["seconds"][c] for r in rows) for c in contenders}
    print("sum of the six, ms: " + ", ".join(f"{c} {s * 1e3:.3f}" for c, s in totals.items())
          + f"; XLA time / jtblas time {totals['xla'] / totals['jtblas']:.3f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(dict(device=jax.devices()[0].device_kind, rows=rows), indent=1))


if __name__ == "__main__":
    main()
