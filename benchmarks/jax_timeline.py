"""The GPU timeline of jtblas.matmul and XLA's dot inside jax.jit: kernels, their times, the gaps

    python benchmarks/jax_timeline.py [--shapes 128x128x32768,1024x1024x32768:NT,...] [--iterations 20]
        [--config "16x32x256 w2 s4 g1"] [--json FILE]

For each M x N x K[:layout] (bf16) shape, runs the benchmark's jitted slope loop (`jtblas bench`'s
`loop_function`: every operand set once per iteration, chained through A[0, 0]) once under
`torch.profiler`, whose CUPTI records every kernel of the process, XLA's too. Prints per
iteration the span from the first kernel's start to the last one's end, the kernels' summed
time, the median gap between consecutive kernels, and the costliest kernels; checks the last
iteration's products against XLA's (max |jtblas − XLA| / max |XLA|). jtblas runs the model's
plan, or `--config` on every shape (e.g. one tile at M = 1, 2, 3, ... to compare the kernel's own
duration by M, BENCHMARKS.md session 16).

A span well above the kernels' sum with gaps of microseconds means launches from the host
between CUDA graph segments (BENCHMARKS.md, session 8: jax-triton's legacy custom call);
back-to-back kernels mean both run inside XLA's graphs (the TMA kernel too, its descriptors'
scratch an XLA buffer since session 9). Needs torch with CUDA and a GPU JAX.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import statistics

DEFAULT_SHAPES = "128x128x32768,1024x1024x32768,1x4096x4096,4096x4096x4096:NT"


def parse_shape(text: str):
    from jtblas.bench import shapes

    size, _, layout = text.partition(":")
    m, n, k = (int(v) for v in size.lower().split("x"))
    return shapes.Shape(name=text, set="probe", group="probe", m=m, n=n, k=k, layout=layout or "NN",
                        dtype="bfloat16")


def timeline(torch, run, iterations: int) -> dict:
    """Kernel records of one `run()` under torch.profiler, summarised per iteration (µs)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    kernels = collections.defaultdict(lambda: [0, 0.0])
    for event in events:
        entry = kernels[event.name[:80]]
        entry[0] += 1
        entry[1] += event.time_range.end - event.time_range.start
    gaps = [b.time_range.start - a.time_range.end for a, b in zip(events, events[1:])]
    idle_after = collections.defaultdict(lambda: [0, 0.0])
    for a, b in zip(events, events[1:]):
        entry = idle_after[f"{a.name[:40]} -> {b.name[:40]}"]
        entry[0] += 1
        entry[1] += max(0.0, b.time_range.start - a.time_range.end)
    span = events[-1].time_range.end - events[0].time_range.start if events else 0.0
    return dict(
        span_us=span / iterations,
        busy_us=sum(v[1] for v in kernels.values()) / iterations,
        median_gap_us=statistics.median(gaps) if gaps else None,
        kernels={name: dict(count=count, us_each=total / count) for name, (count, total) in kernels.items()},
        idle_between={pair: dict(count=count, us_per_iteration=total / iterations)
                      for pair, (count, total) in sorted(idle_after.items(), key=lambda item: -item[1][1])},
    )


def probe_shape(torch, text: str, iterations: int, config=None) -> dict:
    import jax
    import numpy as np

    from jtblas.bench import contenders

    shape = parse_shape(text)
    sets = contenders.operand_sets(shape.bytes_moved, torch.cuda.get_device_properties(0).L2_cache_size)
    as_, bs = contenders.jax_operands(shape, sets)
    row = dict(shape=text, operand_sets=sets, iterations=iterations, config=config.short() if config else "model")
    outputs = {}
    for name, dot in (("jtblas", contenders.jtblas_dot(shape, config)), ("xla", contenders.xla_dot(shape))):
        loop = jax.jit(contenders.loop_function(dot, iterations))
        outputs[name] = jax.block_until_ready(loop(as_, bs))  # compiled and warm
        row[name] = timeline(torch, lambda loop=loop: jax.block_until_ready(loop(as_, bs)), iterations)
    ours, theirs = (np.asarray(outputs[name][-1][-1], np.float32) for name in ("jtblas", "xla"))
    row["max_rel_diff_vs_xla"] = float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-30))
    return row


def main(argv: list[str] | None = None) -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--config", default=None, help="a forced config for every shape (default: the model's plan)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    from jtblas.config import Config

    config = Config.from_short(args.config) if args.config else None
    rows = []
    for text in args.shapes.split(","):
        row = probe_shape(torch, text, args.iterations, config)
        rows.append(row)
        for name in ("jtblas", "xla"):
            t = row[name]
            print(f"{text:>22} {name:6} span {t['span_us']:8.1f} µs/iteration, kernels {t['busy_us']:8.1f}, "
                  f"median gap {t['median_gap_us']:6.2f} µs", flush=True)
            top = sorted(t["kernels"].items(), key=lambda kv: -kv[1]["count"] * kv[1]["us_each"])[:4]
            for kernel, entry in top:
                print(f"{'':>30}{entry['count']:5d} x {entry['us_each']:8.2f} µs  {kernel}", flush=True)
            for pair, entry in list(t["idle_between"].items())[:4]:
                print(f"{'':>30}idle {entry['us_per_iteration']:7.2f} µs/iteration over {entry['count']:4d} x  {pair}",
                      flush=True)
        print(f"{'':>22} jtblas vs XLA: max relative difference {row['max_rel_diff_vs_xla']:.1e}", flush=True)
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
