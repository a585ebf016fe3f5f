"""A change to the model, checked as users run it: every corpus product whose pick it moves, the
old pick and the new one timed beside XLA's dot, through JAX.

    # the model before the change (a second checkout: git worktree add /tmp/before HEAD~1)
    PYTHONPATH=/tmp/before python benchmarks/select_latency.py --dump /tmp/before.json
    python benchmarks/select_latency.py --dump /tmp/after.json
    python benchmarks/picks_ab.py /tmp/before.json /tmp/after.json --list        # any machine
    python benchmarks/picks_ab.py /tmp/before.json /tmp/after.json --out ab.json  # on the GPU
    python benchmarks/picks_ab.py /tmp/before.json /tmp/after.json --sample 60    # 60, evenly spaced
    python benchmarks/picks_ab.py /tmp/before.json /tmp/after.json --dtype float32  # the fp32 variants
    python benchmarks/picks_ab.py /tmp/before.json /tmp/after.json --dtype float32 --precision ieee

The dumps hold every corpus product's plan on each built-in GPU description; the products timed
are those whose plan differs on the description of the GPU that runs this (`--gpu` names
another), in the corpus's dtype (`--dtype`: the dumps' fp32 or fp16 variants of the corpus
products, at the default precision, or for fp32 at `--precision ieee`: `jax.lax.Precision.HIGHEST`
for jtblas and XLA alike). Both picks run as forced configs on the operands as stored (the
kernels are this checkout's: the change must be to the model alone), in the same jitted slope
loop as XLA's dot, rounds in turn (`jtblas.bench.through_jax.time_product`; a batched product
runs its config under `jax.vmap`, one launch). A plan that copies an operand first (repacking)
cannot be forced so: where the pick after copies and the one before does not, and this checkout's
model plans the pick after (the usual case: the checkout is the change), the pick after is timed
as `jtblas.matmul` runs it (the model's whole plan, copies included, in the same loop); the
others are listed as not timed. The dumps also hold the fused layers'
products (`fused_layer.py`'s set, each with its bias, activation, residual or gate): a moved one
is timed as that layer, its fused launch on each pick beside XLA's dot with the same epilogue in
jnp. So do the fresh draw's products (`fresh_shapes.py`: shapes no change was tuned on), timed as
corpus products. Prints one line per product and the geometric means (and the fresh draw's
alone); writes the records as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path
from typing import NamedTuple

from jtblas.bench import shapes
from jtblas.config import Config

sys.path.insert(0, str(Path(__file__).parent))  # its neighbours fused_layer.py, fresh_shapes.py
import fresh_shapes  # noqa: E402
import fused_layer  # noqa: E402
import select_latency  # noqa: E402

REPACK_FLAGS = (" +A", " +B", " +At", " +Bt")


class Moved(NamedTuple):
    """A product whose pick moved: its dump key, shape, pick before and after, and for a fused
    layer's product its layer and activation (`fused_layer.layer_products`)."""

    key: str
    shape: shapes.Shape
    before: str
    after: str
    layer: str | None = None
    activation: str | None = None
    planned_after: bool = False  # the pick after repacks: timed as this checkout's model plans it


def corpus_keys(gpu: str, dtype: str | None = None, precision: str = "tf32") -> dict[str, shapes.Shape]:
    """The dump key (`select_latency.picks`) of every distinct corpus product on `gpu`, in its
    corpus dtype or in `dtype` ("float32" or "float16", the dumps' variants at the default
    precision, or fp32 at `precision` "ieee"), with one of its shape rows."""
    found: dict[str, shapes.Shape] = {}
    for shape in shapes.load():
        if dtype is not None:
            shape = dataclasses.replace(shape, dtype=dtype, precision=precision)
        problem = shape.problem()
        found.setdefault(f"{gpu} {problem.short()} {problem.input_precision}", shape)
    return found


def fresh_keys(gpu: str) -> dict[str, shapes.Shape]:
    """The dump key of every product of the fresh draw on `gpu`, with its shape."""
    return {f"{gpu} {problem.short()} {problem.input_precision}": shape
            for shape in fresh_shapes.fresh() for problem in [shape.problem()]}


def fused_keys(gpu: str) -> dict[str, tuple[shapes.Shape, str, str | None]]:
    """The dump key of every fused layer's product on `gpu` (`select_latency.fused_problems`),
    with its shape, layer and activation."""
    return {f"{gpu} {problem.short()} {problem.input_precision}": (shape, layer, activation)
            for shape, layer, activation in fused_layer.layer_products()
            for problem in [fused_layer.fused_problem(shape, layer, activation)]}


def moved(before: dict, after: dict, gpu: str, dtype: str | None = None,
          precision: str = "tf32") -> tuple[list[Moved], list[Moved]]:
    """(timeable, not timeable): every corpus product and fused layer's product on `gpu` whose
    pick differs between the dumps; not timeable where the pick before repacks an operand (forced
    configs run none; a batched product runs its config under `jax.vmap`), nor where the pick
    after does and this checkout's model, planning the product on `gpu`, does not pick it. Fused
    products count where both dumps hold them (dumps older than 2026-12-06 do not), and so do the
    fresh draw's. With `dtype` (the dumps' fp32 or fp16 variants), the corpus products in that
    dtype (at `precision`) only."""
    found = [Moved(key, shape, "", "") for key, shape in corpus_keys(gpu, dtype, precision).items()]
    if dtype is None:
        found += [Moved(key, shape, "", "", layer, activation)
                  for key, (shape, layer, activation) in fused_keys(gpu).items() if key in before and key in after]
        found += [Moved(key, shape, "", "") for key, shape in fresh_keys(gpu).items()
                  if key in before and key in after]
    timeable, other = [], []
    for product in found:
        if product.key not in before or product.key not in after:
            raise ValueError(f"picks_ab: {product.key!r} is missing from a dump (dumps of another corpus?)")
        was, now = before[product.key]["pick"], after[product.key]["pick"]
        if was == now:
            continue
        product = product._replace(before=was, after=now)
        if not any(f in was or f in now for f in REPACK_FLAGS):
            timeable.append(product)
        elif not any(f in was for f in REPACK_FLAGS) and product.layer is None and planned_here(product, gpu):
            timeable.append(product._replace(planned_after=True))
        else:
            other.append(product)
    return timeable, other


def planned_here(product: Moved, gpu: str) -> bool:
    """Whether this checkout's model plans `product` on `gpu` as its pick after."""
    from jtblas import hardware, model

    return select_latency.pick_of(model.plan_for_problem(product.shape.problem(), hardware.get(gpu))) == product.after


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def contenders(product: Moved) -> dict:
    """XLA's dot and the product on each pick (a fused layer's with its epilogue, in jnp for XLA)."""
    from jtblas.bench import jax_loop

    was = Config.from_short(product.before)
    now = None if product.planned_after else Config.from_short(product.after)  # None: the model's plan
    if product.layer is None:
        return {"xla": jax_loop.xla_dot(product.shape), "before": jax_loop.jtblas_dot(product.shape, was),
                "after": jax_loop.jtblas_dot(product.shape, now)}
    layer = (product.shape, product.layer, product.activation)
    return {"xla": fused_layer.contenders(*layer)["xla"],
            "before": fused_layer.contenders(*layer, config=was)["jtblas"],
            "after": fused_layer.contenders(*layer, config=now)["jtblas"]}


def time_moved(timeable: list[Moved], *, rounds: int, trials: int, log=print) -> list[dict]:
    """Each moved product's record: XLA, the pick before and the pick after, in one loop."""
    from jtblas import hardware
    from jtblas.bench import through_jax

    hw = hardware.detect()
    records = []
    for product in timeable:
        key, shape, was, now, layer, activation, _ = product
        problem = None if layer is None else fused_layer.fused_problem(shape, layer, activation)
        record = through_jax.time_product([shape], l2_bytes=hw.l2_bytes, hardware=hw, rounds=rounds, trials=trials,
                                          dots=contenders(product), problem=problem)
        record.update(before_pick=was, after_pick=now, layer=layer, activation=activation)
        records.append(record)
        seconds = {name: entry.get("seconds") for name, entry in record["contenders"].items()}
        if all(seconds.values()):
            xla, old, new = seconds["xla"], seconds["before"], seconds["after"]
            log(f"{key}: XLA {xla * 1e6:.1f} µs, before {old * 1e6:.1f} ({xla / old:.2f}x XLA), after "
                f"{new * 1e6:.1f} ({xla / new:.2f}x XLA), after ÷ before in speed {old / new:.3f}  {was} -> {now}")
        else:
            log(f"{key}: ERROR {record['contenders']}")
    return records


def summary(records: list[dict]) -> str:
    timed = [r for r in records if all(e.get("seconds") for e in r["contenders"].values())]
    if not timed:
        return "no product timed"
    speed = [r["contenders"]["before"]["seconds"] / r["contenders"]["after"]["seconds"] for r in timed]
    before = [r["contenders"]["xla"]["seconds"] / r["contenders"]["before"]["seconds"] for r in timed]
    after = [r["contenders"]["xla"]["seconds"] / r["contenders"]["after"]["seconds"] for r in timed]
    return (f"{len(timed)} moved products timed: after ÷ before in speed {geomean(speed):.3f} geomean "
            f"({sum(s > 1.01 for s in speed)} faster by > 1%, {sum(s < 0.99 for s in speed)} slower by > 1%, "
            f"range {min(speed):.3f}-{max(speed):.3f}); against XLA {geomean(before):.3f} -> {geomean(after):.3f}")


def evenly_spaced(products: list, count: int | None) -> list:
    """`count` of `products` spread evenly over their order (every len/count-th, the first
    included), or all of them when `count` is None or not smaller: a change that moves more
    products than one GPU visit can time is still checked across all kinds of them."""
    if count is None or count >= len(products):
        return list(products)
    return [products[i * len(products) // count] for i in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", help="select_latency.py --dump of the model before the change")
    parser.add_argument("after", help="select_latency.py --dump of the model after it")
    parser.add_argument("--gpu", default=None, help="the built-in description whose picks count (default: this GPU's)")
    parser.add_argument("--list", action="store_true", help="list the moved products; time nothing")
    parser.add_argument("--rounds", type=int, default=3, help="rounds in turn (the median is kept)")
    parser.add_argument("--trials", type=int, default=3, help="slope samples per round")
    parser.add_argument("--out", default=None, help="JSON file for the records")
    parser.add_argument("--dtype", choices=("float32", "float16"), default=None,
                        help="the corpus products in this dtype (the dumps' variants) instead of the corpus's own, "
                             "with the fused layers and the fresh draw left out")
    parser.add_argument("--precision", choices=("tf32", "ieee"), default="tf32",
                        help="with --dtype float32: the fp32 variants at this input precision (ieee: "
                             "Precision.HIGHEST, the FMA tiles)")
    parser.add_argument("--sample", type=int, default=None,
                        help="time only this many of the moved products, evenly spaced in their order")
    args = parser.parse_args(argv)
    try:
        if args.rounds < 1 or args.trials < 1:
            raise ValueError(f"picks_ab: --rounds and --trials must be >= 1, got {args.rounds} and {args.trials}")
        if args.sample is not None and args.sample < 1:
            raise ValueError(f"picks_ab: --sample must be >= 1, got {args.sample}")
        if args.precision == "ieee" and args.dtype != "float32":
            raise ValueError(f"picks_ab: --precision ieee needs --dtype float32, got --dtype {args.dtype}")
        dumps = []
        for path in (args.before, args.after):
            try:
                with open(path) as f:
                    dumps.append(json.load(f))
            except (OSError, json.JSONDecodeError) as error:
                raise ValueError(f"picks_ab: cannot read the dump {path!r}: {error}") from None
        if args.gpu is None:
            from jtblas import hardware

            args.gpu = hardware.detect().name
        held = sorted({key.split(" ", 1)[0] for dump in dumps for key in dump})
        if args.gpu not in held:
            raise ValueError(f"picks_ab: the dumps hold no picks for {args.gpu!r} (they hold {held}): "
                             "name one with --gpu")
        timeable, other = moved(*dumps, args.gpu, args.dtype, args.precision)
    except ValueError as error:
        print(str(error).splitlines()[0], file=sys.stderr)
        return 2
    fresh = set(fresh_keys(args.gpu))
    drawn = sum(product.key in fresh for product in timeable + other)
    print(f"{len(timeable) + len(other)} products moved on {args.gpu} ({drawn} of the fresh draw): "
          f"{len(timeable)} to time ({sum(p.planned_after for p in timeable)} of them as the model plans them), "
          f"{len(other)} not timeable (repacked)")
    for name, keys in (("fused layers", fused_keys(args.gpu)), ("the fresh draw", fresh)):
        if not all(any(key in dump for key in keys) for dump in dumps):
            print(f"  {name} not compared: a dump holds none (an older select_latency.py; run this one with "
                  "PYTHONPATH naming the old checkout)")
    for product in other:
        print(f"  not timed: {product.key}: {product.before} -> {product.after}")
    if args.list:
        for product in timeable:
            print(f"  {product.key}{' (fresh)' if product.key in fresh else ''}: {product.before} -> {product.after}")
        return 0
    chosen = evenly_spaced(timeable, args.sample)
    if len(chosen) < len(timeable):
        print(f"timing {len(chosen)} of the {len(timeable)}, evenly spaced (--sample)")
    records = time_moved(chosen, rounds=args.rounds, trials=args.trials)
    print(summary(records))
    drawn_records = [record for record in records if "fresh" in record.get("sets", ())]
    if drawn_records:
        print(f"of which the fresh draw: {summary(drawn_records)}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(gpu=args.gpu, before=args.before, after=args.after, products=records), f, indent=1,
                      default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
