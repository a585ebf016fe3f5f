"""Carried against indexed K addressing of the same config, through JAX (a probe; session 15).

    python benchmarks/k_addressing_ab.py [--cases "1x4096x4096:16x32x256 w2 s4 g1,..."] [--rounds 3]
                                         [--json FILE]

`matmul_kernel` addresses a K step either by advancing carried pointer tiles or from its K
indices (`K_FROM_INDICES`, chosen by `jtblas.model.resources.k_from_indices`, by layout). Read on
the CPU (`benchmarks/sass_stats.py`), the carried form of 16x32x256 w2 s4 at M = 1 and 8 (A's
rows masked, half or more of its copies constant zero-fills) compiles to 96 registers and sends
every copy's address through one register pair (`IADD3 R24 ...; LDGSTS ... [R24.64]` 21 times per
K step), which looked as if each copy waited for the previous one to read its address; at M = 15
and 16 and in the indexed form the addresses spread over 10-12 registers. This probe times both
forms of each case in the bench's slope loop, interleaved rounds (the form is switched while each
is compiled). Run in session 16 (`k_addressing.json`): the two forms were within 3% of each other
in 12 of 13 cases (16x32x256 w2 s4 at M = 1 / 8 / 16 x 4096x4096: indexed ÷ carried speed 1.005 /
0.996 / 0.991; the exception, 16x32x512 w2 s3 at 1x3584x3584, 1.061), so the funnelled addresses
are not why those tiles are slow at M <= 8 (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys

import jax

from jtblas import hardware
from jtblas.bench import contenders
from jtblas.config import Config
from jtblas.model import cost, resources

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from pick_ab import in_turns, shape_from_key  # noqa: E402

DEFAULT_CASES = ("1x4096x4096:16x32x256 w2 s4 g1,8x4096x4096:16x32x256 w2 s4 g1,16x4096x4096:16x32x256 w2 s4 g1,"
                 "1x4096x4096:16x64x256 w2 s4 g1,8x6144x4096:16x64x256 w2 s4 g1,1x3584x3584:16x64x256 w2 s4 g1,"
                 "1x3584x18944:16x64x256 w2 s4 g1 k2,1x8192x28672:16x64x256 w2 s4 g1")


def time_forms(size: str, config: Config, rounds: int) -> dict[str, list[float]]:
    """Seconds per product of `config` on the bf16 NN product `size` ("MxNxK") with carried and
    with indexed K addressing, `rounds` interleaved rounds."""
    shape = shape_from_key(f"{size} bfloat16 NN")
    estimate = cost.predicted_seconds(config, shape.problem(), hardware.H200)
    as_, bs = contenders.jax_operands(shape, contenders.operand_sets(shape.bytes_moved, hardware.H200.l2_bytes))
    chosen = resources.k_from_indices
    timers = {}
    try:
        for form, indexed in (("carried", False), ("indexed", True)):
            resources.k_from_indices = lambda problem, indexed=indexed: indexed
            timers[form] = contenders.slope_timer_jax(contenders.jtblas_dot(shape, config), as_, bs,
                                                      estimate_s=estimate)[0]
    finally:
        resources.k_from_indices = chosen
    seconds = in_turns(timers, rounds)
    del as_, bs
    jax.clear_caches()
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=DEFAULT_CASES, help="comma-separated MxNxK:config pairs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rows = []
    for case in args.cases.split(","):
        size, name = case.split(":")
        seconds = time_forms(size, Config.from_short(name), args.rounds)
        median = {form: statistics.median(values) for form, values in seconds.items()}
        print(f"{size:14s} {name:24s} carried {median['carried'] * 1e6:8.2f} µs  indexed "
              f"{median['indexed'] * 1e6:8.2f} µs  indexed speed-up {median['carried'] / median['indexed']:.3f}",
              flush=True)
        rows.append(dict(shape=size, config=name, seconds=seconds))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(dict(rows=rows), indent=1))


if __name__ == "__main__":
    main()
