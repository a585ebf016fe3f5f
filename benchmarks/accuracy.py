"""Relative error of jtblas.matmul against a float64 product, per dtype, precision and layout,
on the default JAX device (the numbers BENCHMARKS.md records for the H200).

    python benchmarks/accuracy.py [--shape 1000x520x777] [--json FILE]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np

import jtblas

CASES = [("float32", None), ("float32", jax.lax.Precision.HIGHEST), ("float16", None), ("bfloat16", None)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="1000x520x777")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    m, n, k = (int(x) for x in args.shape.split("x"))
    rng = np.random.default_rng(0)
    rows = []
    for (dtype, precision), (transpose_a, transpose_b) in itertools.product(CASES, itertools.product([0, 1], repeat=2)):
        a = jnp.asarray(rng.standard_normal((k, m) if transpose_a else (m, k)), dtype)
        b = jnp.asarray(rng.standard_normal((n, k) if transpose_b else (k, n)), dtype)
        product = functools.partial(
            jtblas.matmul, transpose_a=bool(transpose_a), transpose_b=bool(transpose_b), precision=precision
        )
        out = jax.jit(product)(a, b)
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        reference = (a64.T if transpose_a else a64) @ (b64.T if transpose_b else b64)
        error = np.linalg.norm(np.asarray(out, np.float64) - reference) / np.linalg.norm(reference)
        layout = ("T" if transpose_a else "N") + ("T" if transpose_b else "N")
        label = f"{dtype}{'/HIGHEST' if precision else ''}"
        print(f"{label:18s} {layout}  relative error {error:.2e}")
        rows.append(dict(dtype=label, layout=layout, relative_error=float(error)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=jax.devices()[0].device_kind, shape=args.shape, results=rows), f, indent=1)


if __name__ == "__main__":
    main()
