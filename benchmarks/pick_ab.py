"""Before/after a model change: the picks that changed, timed against each other through JAX.

Two steps. On any machine, once at the old commit and once at the new one, write the model's pick
(for the H200) of every benchmark shape:

    python benchmarks/pick_ab.py --dump-picks before.json      # at the old commit
    python benchmarks/pick_ab.py --dump-picks after.json       # at the new commit

Then on the GPU: every shape whose pick differs (or those named by --shapes), old config and new,
each in the bench's slope loop through JAX (`jtblas.bench.contenders.slope_timer_jax`), in
interleaved rounds; prints and writes the best of the rounds per config:

    python benchmarks/pick_ab.py --before before.json --after after.json [--shapes "MxNxK dtype LAYOUT,..."]
                                 [--rounds 2] [--json FILE]

Or any configs of the named shapes against each other and XLA's dot, the same way (medians and
minima of the rounds, with the model's prediction of each):

    python benchmarks/pick_ab.py --shapes "1024x1024x32768 bfloat16 NN" \
                                 --configs "128x256x64 w8 s4 g8 k4;128x256x64 w8 s3 g8 k4" [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import statistics

from jtblas import hardware
from jtblas.bench import contenders, shapes
from jtblas.bench.shapes import Shape
from jtblas.config import Config
from jtblas.model import cost, select


def dump_picks(path: str) -> None:
    """{shape key: [pick, predicted µs]} of every benchmark shape on the H200 description."""
    picks = {}
    for shape in shapes.load():
        best = select.rank(shape.problem(), hardware.H200)[0]
        picks[shape.key()] = [best.config.short(), best.predicted_seconds * 1e6]
    pathlib.Path(path).write_text(json.dumps(picks, indent=0))
    print(f"{len(picks)} picks written to {path}")


def shape_from_key(key: str) -> Shape:
    size, dtype, layout = key.split()
    m, n, k = map(int, size.split("x"))
    return Shape(name=size, set="ab", group="ab", m=m, n=n, k=k, layout=layout, dtype=dtype)


def time_interleaved(shape: Shape, configs: dict[str, Config], rounds: int, *, xla: bool = False
                     ) -> dict[str, list[float]]:
    """Seconds per product of each named config on `shape` (and of XLA's dot as "xla"), through
    JAX (the bench's slope loop, each compiled once), `rounds` interleaved rounds over one set of
    operands, the order reversed every other round; JAX's caches cleared afterwards."""
    import jax

    # Each loop's length comes from its own config's predicted time (XLA's from the fastest).
    estimates = {name: cost.predicted_seconds(config, shape.problem(), hardware.H200)
                 for name, config in configs.items()}
    as_, bs = contenders.jax_operands(shape, contenders.operand_sets(shape.bytes_moved, hardware.H200.l2_bytes))
    dots = {name: contenders.jtblas_dot(shape, config) for name, config in configs.items()}
    if xla:
        dots["xla"] = contenders.xla_dot(shape)
        estimates["xla"] = min(estimates.values())
    timers = {name: contenders.slope_timer_jax(dot, as_, bs, estimate_s=estimates[name])[0]
              for name, dot in dots.items()}
    seconds = in_turns(timers, rounds)
    del as_, bs
    jax.clear_caches()
    return seconds


def in_turns(timers: dict, rounds: int) -> dict[str, list[float]]:
    """Seconds per product from each compiled slope timer (`contenders.slope_timer_jax`'s measure),
    `rounds` rounds in turn, the order reversed every other round."""
    seconds = {name: [] for name in timers}
    for round_index in range(rounds):
        for name in (list(timers) if round_index % 2 == 0 else list(reversed(timers))):
            seconds[name].append(timers[name](5)["seconds"])
    return seconds


def time_changed(before: dict, after: dict, keys: list[str], rounds: int) -> list[dict]:
    rows = []
    for key in keys:
        configs = {"before": Config.from_short(before[key][0]), "after": Config.from_short(after[key][0])}
        seconds = time_interleaved(shape_from_key(key), configs, rounds)
        best = {name: min(values) for name, values in seconds.items()}
        rows.append(dict(shape=key, before=before[key][0], after=after[key][0], seconds=seconds))
        print(f"{key:34s} before {before[key][0]:26s} {best['before'] * 1e6:9.2f} µs   after {after[key][0]:26s} "
              f"{best['after'] * 1e6:9.2f} µs   speed-up {best['before'] / best['after']:.3f}", flush=True)
    return rows


def time_configs(keys: list[str], names: list[str], rounds: int) -> list[dict]:
    """Every config of `names` and XLA's dot on each shape of `keys`, interleaved; prints each."""
    rows = []
    for key in keys:
        shape = shape_from_key(key)
        configs = {name: Config.from_short(name) for name in names}
        seconds = time_interleaved(shape, configs, rounds, xla=True)
        rows.append(dict(shape=key, seconds=seconds))
        print(key, flush=True)
        for name, values in seconds.items():
            predicted = (f"predicted {cost.predicted_seconds(configs[name], shape.problem(), hardware.H200) * 1e6:8.2f}"
                         if name in configs else "")
            print(f"  {name:26s} median {statistics.median(values) * 1e6:8.2f} µs  min {min(values) * 1e6:8.2f}  "
                  f"{predicted}", flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump-picks", metavar="FILE", help="write this commit's picks and stop")
    parser.add_argument("--before")
    parser.add_argument("--after")
    parser.add_argument("--shapes", help="comma-separated shape keys (default: every changed pick)")
    parser.add_argument("--configs", help="semicolon-separated configs to time on --shapes (with XLA's dot)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.dump_picks:
        dump_picks(args.dump_picks)
        return
    if args.configs:
        if not args.shapes:
            parser.error("--configs needs --shapes")
        rows = time_configs(args.shapes.split(","), args.configs.split(";"), args.rounds)
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(dict(rows=rows), indent=1))
        return
    if not (args.before and args.after):
        parser.error("--before and --after are required (or --dump-picks)")
    before = json.loads(pathlib.Path(args.before).read_text())
    after = json.loads(pathlib.Path(args.after).read_text())
    keys = args.shapes.split(",") if args.shapes else [k for k in before if k in after and before[k][0] != after[k][0]]
    rows = time_changed(before, after, keys, args.rounds)
    ratios = [min(r["seconds"]["before"]) / min(r["seconds"]["after"]) for r in rows]
    if ratios:
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"{len(ratios)} shapes: speed-up geomean {geomean:.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(dict(rows=rows), indent=1))


if __name__ == "__main__":
    main()
