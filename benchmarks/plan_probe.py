"""Products timed under several plans beside XLA's dot, through JAX: to check a choice of the model.

    python benchmarks/plan_probe.py 2048x50257x1280:NN 1280x50257x128:TN \
        --plans pick,never,always,strides,"128x256x64 w8 s4 g8" --out probe.json

Each product runs, in the same jitted slope loop and rounds in turn (`jtblas.bench.through_jax`,
B changing every iteration), XLA's `lax.dot_general` and one `jtblas.matmul` per plan:

  pick       the model's whole plan (what a user's call runs)
  always     `jtblas.ops.repack_mode("always")`: every axis padded, C computed padded and sliced
  strides    the same copies, C kept at the caller's shape (the kernel wraps at the row strides)
  transpose  a B stored [N, K] copied into [K, N]
  never      the plain kernel on the operands as stored
  a config   `jtblas.Config.from_short` text (e.g. "128x256x64 w8 s4 g8"), on the operands as stored

Before timing, every plan's result on one operand pair is compared with XLA's (relative norm).
Prints one line per product (µs, and XLA's time ÷ the plan's: > 1 is faster than XLA) and writes
the records (times in seconds) as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp

import jtblas
from jtblas import hardware, ops
from jtblas.bench import jax_loop, shapes, through_jax
from jtblas.config import Config
from jtblas.model import repack

MODES = ("always", "strides", "transpose", "never")


def parse_product(text: str, dtype: str = "bfloat16") -> shapes.Shape:
    """`MxNxK:LAYOUT` (layout NN, NT, TN or TT; NN if left out) as a benchmark shape."""
    sizes, _, layout = text.partition(":")
    layout = layout or "NN"
    try:
        m, n, k = (int(part) for part in sizes.lower().split("x"))
    except ValueError:
        raise ValueError(f"product must be MxNxK[:LAYOUT] with three integers, got {text!r}") from None
    if min(m, n, k) < 1 or layout not in ("NN", "NT", "TN", "TT"):
        raise ValueError(f"product must have sizes >= 1 and a layout NN, NT, TN or TT, got {text!r}")
    return shapes.Shape(name=f"probe.{m}x{n}x{k}.{layout}", set="probe", family="probe", regime="probe",
                        m=m, n=n, k=k, layout=layout, dtype=dtype)


def plan_dots(shape: shapes.Shape, plans: list[str]) -> dict[str, Callable]:
    """The contenders: XLA's dot, then one `dot(a, b)` per plan name (see the module doc)."""
    dots = {"xla": jax_loop.xla_dot(shape)}
    for plan in plans:
        if plan == "pick":
            dots[plan] = jax_loop.jtblas_dot(shape)
        elif plan in MODES:
            dots[plan] = _in_mode(shape, plan)
        else:
            dots[plan] = jax_loop.jtblas_dot(shape, Config.from_short(plan))
    return dots


def _in_mode(shape: shapes.Shape, mode: str) -> Callable:
    def dot(a, b):
        # Inside the function: the mode is read when it is traced, in the timer's own thread.
        with ops.repack_mode(mode):
            return jtblas.matmul(a, b, transpose_a=shape.transpose_a, transpose_b=shape.transpose_b)
    return dot


def agreement(dots: dict[str, Callable], shape: shapes.Shape) -> dict[str, float | str]:
    """Each plan's relative norm against XLA's result on one seeded operand pair (or its error)."""
    (a,), (b,) = jax_loop.operands(shape, 1, seed=7)
    reference = jax.jit(dots["xla"])(a, b).astype(jnp.float32)
    found: dict[str, float | str] = {}
    for name, dot in dots.items():
        try:
            out = jax.jit(dot)(a, b).astype(jnp.float32)
            found[name] = float(jnp.linalg.norm(out - reference) / jnp.linalg.norm(reference))
        except Exception as error:  # noqa: BLE001 - one plan failing must not end the probe
            found[name] = f"{type(error).__name__}: {error}"[:300]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("products", nargs="+", help="MxNxK[:LAYOUT], e.g. 1280x50257x128:TN")
    parser.add_argument("--plans", default="pick,never", help="comma-separated plans (module doc)")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--rounds", type=int, default=3, help="rounds in turn (the median is kept)")
    parser.add_argument("--trials", type=int, default=3, help="slope samples per round")
    parser.add_argument("--out", default=None, help="JSON file for the records")
    args = parser.parse_args(argv)
    try:
        rows = [parse_product(text, args.dtype) for text in args.products]
        plans = [plan.strip() for plan in args.plans.split(",") if plan.strip()]
        for plan in plans:
            if plan != "pick" and plan not in MODES:
                Config.from_short(plan)
        if args.rounds < 1 or args.trials < 1:
            raise ValueError(f"--rounds and --trials must be >= 1, got {args.rounds} and {args.trials}")
    except ValueError as error:
        print(f"plan_probe: {error}", file=sys.stderr)
        return 2
    hw = hardware.detect()
    records = []
    for shape in rows:
        dots = plan_dots(shape, plans)
        agreed = agreement(dots, shape)
        record = through_jax.time_product([shape], l2_bytes=hw.l2_bytes, hardware=hw, rounds=args.rounds,
                                          trials=args.trials, dots=dots)
        record["agreement"] = agreed
        record["model_plan"] = repack.plan_for_problem(shape.problem(), hw).reason
        records.append(record)
        xla = record["contenders"].get("xla", {}).get("seconds")
        cells = []
        for name, result in record["contenders"].items():
            if "seconds" in result:
                ratio = f" ({xla / result['seconds']:.2f})" if xla and name != "xla" else ""
                cells.append(f"{name} {result['seconds'] * 1e6:.1f}{ratio}")
            else:
                cells.append(f"{name} error: {result.get('error', '')[:120]}")
        print(f"{shape.m}x{shape.n}x{shape.k} {shape.layout} | " + " | ".join(cells), flush=True)
        print("  vs XLA (relative norm): " + ", ".join(
            f"{name} {value:.1e}" if isinstance(value, float) else f"{name} {value}" for name, value in agreed.items()),
            flush=True)
        if args.out:
            with open(args.out, "w") as handle:
                json.dump(records, handle, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
