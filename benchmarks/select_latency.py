"""How long `jtblas.select` takes on this machine's CPU, and whether its picks stay put.

    python benchmarks/select_latency.py                  # latency over the benchmark corpus (H200)
    python benchmarks/select_latency.py --dump FILE      # every pick and predicted time -> JSON
    python benchmarks/select_latency.py --compare FILE   # the same, compared with a dump

Latency: every distinct product of the corpus (`jtblas.bench.shapes.load()`, all sets), selected
with every cache cleared (`jtblas.selection.clear_cache`; uncached: the candidates ranked,
repacking planned), three times, its fastest counting (other work on the machine should not);
then again with the caches warm (cached, five times); median and 90th percentile per call.

Picks: the plan (config, repacked operands) and its predicted seconds for every corpus product on
the H200, H100 and A100, in the corpus's dtype and again in fp32 (tf32 and ieee) and fp16, for
every fused layer's product (`fused_layer.py`'s set, with its epilogue), and for the fresh draw
(`fresh_shapes.py`: products no change was tuned on, bf16): what a change to the model's
speed must leave identical, and what `picks_ab.py` reads.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import jtblas
from jtblas import hardware, model, selection
from jtblas.bench import shapes

sys.path.insert(0, str(Path(__file__).parent))  # its neighbours fused_layer.py, fresh_shapes.py
import fresh_shapes  # noqa: E402
import fused_layer  # noqa: E402

GPUS = ("h200", "h100", "a100")
# (dtype, input precision) variants of every corpus product; None keeps the corpus's dtype.
VARIANTS = ((None, "tf32"), ("float32", "tf32"), ("float32", "ieee"), ("float16", "tf32"))


def corpus_problems():
    """The distinct problems of every benchmark set, in load order."""
    seen, problems = set(), []
    for shape in shapes.load():
        problem = shape.problem()
        if problem not in seen:
            seen.add(problem)
            problems.append(problem)
    return problems


def pick_problems():
    """Every corpus problem in every dtype variant, then every fused layer's problem, then the
    fresh draw's (distinct)."""
    seen, problems = set(), []
    for problem in corpus_problems():
        for dtype, precision in VARIANTS:
            variant = problem if dtype is None else dataclasses.replace(
                problem, dtype=dtype, out_dtype=dtype, input_precision=precision)
            if variant not in seen:
                seen.add(variant)
                problems.append(variant)
    later = [fused_layer.fused_problem(*layer) for layer in fused_layer.layer_products()]
    for problem in later + [shape.problem() for shape in fresh_shapes.fresh()]:
        if problem not in seen:
            seen.add(problem)
            problems.append(problem)
    return problems


def pick_of(plan: model.ProductPlan) -> str:
    """A plan in short: its config, then " +A" and " +B" for padded copies, " +At" and " +Bt"
    where copied transposed."""
    flags = ((" +A", plan.pad_a), (" +B", plan.pad_b), (" +At", plan.transpose_a), (" +Bt", plan.transpose_b))
    return plan.config.short() + "".join(flag for flag, on in flags if on)


def picks() -> dict[str, dict]:
    """`{gpu problem: {"pick": ..., "seconds": ..., "plain": ..., "plain_seconds": ...}}`."""
    result, problems = {}, pick_problems()
    for gpu in GPUS:
        target = hardware.get(gpu)
        for problem in problems:
            plan = model.plan_for_problem(problem, target)
            result[f"{gpu} {problem.short()} {problem.input_precision}"] = {
                "pick": pick_of(plan), "seconds": plan.predicted_seconds,
                "plain": plan.plain_config.short(), "plain_seconds": plan.plain_seconds,
            }
    return result


def compare(expected: dict[str, dict], actual: dict[str, dict]) -> int:
    changed = {key: (expected.get(key, {}).get("pick", "(not in the dump)"), value["pick"])
               for key, value in actual.items()
               if key not in expected or expected[key]["pick"] != value["pick"]
               or expected[key]["plain"] != value["plain"]}
    worst = max(abs(value[name] - expected[key][name]) / expected[key][name]
                for key, value in actual.items() if key in expected for name in ("seconds", "plain_seconds"))
    print(f"{len(actual)} plans ({', '.join(GPUS)}; corpus dtype, fp32 tf32/ieee, fp16; fused layers; fresh), "
          f"{len(expected)} expected: {len(changed)} picks changed; "
          f"predicted seconds differ by at most {worst:.3g} (relative)")
    for key, (was, now) in list(changed.items())[:10]:
        print(f"  {key}: {was} -> {now}")
    return 1 if changed or len(actual) != len(expected) else 0


def latency(gpu: str = "h200", repeat: int = 3) -> None:
    problems = corpus_problems()
    target = hardware.get(gpu)
    args = [dict(m=p.m, n=p.n, k=p.k, dtype=p.dtype, transpose_a=p.transpose_a, transpose_b=p.transpose_b,
                 batch=p.batch, hardware=target) for p in problems]
    uncached, cached = [float("inf")] * len(args), []
    for _ in range(repeat):  # each product's fastest of `repeat` uncached selections (a busy machine)
        for i, kwargs in enumerate(args):
            selection.clear_cache()
            start = time.perf_counter()
            jtblas.select(**kwargs)
            uncached[i] = min(uncached[i], time.perf_counter() - start)
    for kwargs in args:
        jtblas.select(**kwargs)
    for _ in range(5):
        for kwargs in args:
            start = time.perf_counter()
            jtblas.select(**kwargs)
            cached.append(time.perf_counter() - start)

    def line(name, values):
        values = sorted(values)
        p90 = values[int(0.9 * (len(values) - 1))]
        return f"{name}: median {statistics.median(values) * 1e6:.1f} µs, p90 {p90 * 1e6:.1f} µs"

    print(f"jtblas.select on {gpu}, {len(problems)} corpus products (uncached: fastest of {repeat} per product)")
    print(line("  uncached", uncached))
    print(line("  cached  ", cached))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", help="write every pick and predicted time to this JSON file")
    parser.add_argument("--compare", help="compare every pick and predicted time with this JSON file")
    parser.add_argument("--repeat", type=int, default=3, help="uncached selections per product (the fastest counts)")
    args = parser.parse_args()
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump(picks(), f, indent=0, sort_keys=True)
        return 0
    if args.compare:
        with open(args.compare) as f:
            return compare(json.load(f), picks())
    latency(repeat=args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
