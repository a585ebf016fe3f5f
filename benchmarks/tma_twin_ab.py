"""The pointer kernel against its TMA twin (the same tile on `Config.tma`), through JAX, interleaved.

What `cost.Constants.tma_setup_seconds` and `tma_k_step_overhead_clocks` rest on: for each shape
the model's pick (or the config after "=") is timed on both kernels in the bench's slope loop
(`jtblas.bench.contenders.slope_timer_jax`, each compiled once), in interleaved rounds; the best of the rounds each.

    python benchmarks/tma_twin_ab.py [--shapes "MxNxK dtype LAYOUT[=CONFIG],..."] [--rounds 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib

import jtblas
from jtblas import hardware
from jtblas.config import Config
from jtblas.model import resources
from pick_ab import shape_from_key, time_interleaved

# One tile (the set-up alone), small and medium products, then the large ones of the benchmark.
DEFAULT_SHAPES = (
    "128x256x64 bfloat16 NN=128x256x64 w8 s3 g8", "256x512x512 bfloat16 NN", "1024x1024x1024 bfloat16 NN",
    "1024x1024x1024 bfloat16 TN", "4096x768x768 bfloat16 NN", "512x4096x4096 bfloat16 NN",
    "2048x2048x2048 bfloat16 NN", "1024x4096x4096 bfloat16 NN", "4096x4096x4096 bfloat16 NN",
    "4096x4096x4096 bfloat16 TN", "8192x14336x4096 bfloat16 NN", "8192x4096x14336 bfloat16 NN",
    "4096x14336x8192 bfloat16 TN", "4096x4096x4096 bfloat16 NT", "4096x768x768 bfloat16 NT",
)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(DEFAULT_SHAPES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rows = []
    for item in args.shapes.split(","):
        key, _, forced = item.partition("=")
        shape = shape_from_key(key)
        pick = Config.from_short(forced) if forced else jtblas.select(
            shape.m, shape.n, shape.k, dtype=shape.dtype, transpose_a=shape.transpose_a, transpose_b=shape.transpose_b)
        # split_k first: a Config with tma=True must not split K
        if pick.split_k > 1 or resources.tma_errors(dataclasses.replace(pick, tma=True), shape.problem(),
                                                    hardware.H200):
            print(f"{key}: {pick.short()} has no TMA twin")
            continue
        configs = {"pointer": dataclasses.replace(pick, tma=False), "tma": dataclasses.replace(pick, tma=True)}
        seconds = time_interleaved(shape, configs, args.rounds)
        best = {name: min(values) for name, values in seconds.items()}
        rows.append(dict(shape=key, config=configs["pointer"].short(), seconds=seconds))
        print(f"{key:34s} {configs['pointer'].short():22s} pointer {best['pointer'] * 1e6:9.2f} µs  "
              f"tma {best['tma'] * 1e6:9.2f} µs  tma − pointer {(best['tma'] - best['pointer']) * 1e6:+7.2f} µs  "
              f"pointer ÷ tma time {best['pointer'] / best['tma']:.3f}", flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(dict(rows=rows), indent=1))


if __name__ == "__main__":
    main()
