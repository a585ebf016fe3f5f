"""Decode products (M ≤ 16) on the GPU: how close a wider tiled-kernel space gets to a copy.

    python benchmarks/decode_space.py 1x4096x14336,16x3584x18944 out.json [--space wide|deep]
                                                            [--top N]   (WORKERS=16 by default)

The model's search space splits K only for tiles of at least 64x64 and runs 4 or 8 warps. This
probe times, per shape, the union of `jtblas.candidates()` and a wider decode space — 16-row tiles,
block_n 32-256, block_k 64-256, 1/2/4 warps, 3/4/6 stages, split-K 1-8 — against cuBLAS and a
same-size device-to-device copy (the copy ratio of issue 6), with the bench's machinery: compiles
in a pool of worker processes, a first pass over every config, the best 8 re-timed carefully
(torch launches in CUDA graphs, operand sets rotating past the L2). Prints one line per shape and
writes every first-pass time to the JSON file. Not a test: it informs what the search space and
the model should offer (BENCHMARKS.md, session 4).

`--space deep` (session 9) times instead the model's pick and 16-row tiles with deep K steps and
many programs: block_n 32-128, block_k 128-512, 2/4 warps, 1-3 stages, split-K 1-32 down to one
K block per split, grids up to 8 programs per SM (XLA's own decode GEMMs split K 8 ways over
16x64 tiles, 4 warps, 3 stages). `--top N` adds the model's N best-ranked candidates to either
space (how far down its own ranking the best config sits).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time

from jtblas import hardware, model
from jtblas.config import Config, Problem
from jtblas.model import resources, select

# Per space: block_n, block_k, warps, stages, splits; programs per SM at most; K blocks per split.
SPACES = {
    "wide": dict(tiles=((32, 64, 128, 256), (64, 128, 256), (1, 2, 4), (3, 4, 6), (1, 2, 4, 8)),
                 max_waves=4, min_k_blocks=2, with_candidates=True),
    "deep": dict(tiles=((32, 64, 128), (128, 256, 512), (2, 4), (1, 2, 3), (1, 2, 4, 8, 16, 32)),
                 max_waves=8, min_k_blocks=1, with_candidates=False),
}


def decode_space(problem: Problem, hw: hardware.Hardware, space: str = "wide") -> list[Config]:
    """16-row tiles the model's space leaves out (and the ones it has), each fitting the SM."""
    rules = SPACES[space]
    out = []
    for block_n, block_k, warps, stages, split in itertools.product(*rules["tiles"]):
        config = Config(block_m=16, block_n=block_n, block_k=block_k, num_warps=warps,
                        num_stages=stages, group_m=1, split_k=split)
        if block_n > problem.n or resources.fit_errors(config, problem, hw):
            continue
        if split > 1 and -(-problem.k // block_k) < rules["min_k_blocks"] * split:
            continue
        if -(-problem.n // block_n) * split > rules["max_waves"] * hw.sm_count:
            continue
        if resources.registers_per_thread(config) > hw.max_regs_per_thread:
            continue
        out.append(config)
    return out


def probe_shape(torch, timer, compiler, problem: Problem, configs: list[Config], hw, l2_bytes: int) -> dict:
    """Copy, cuBLAS, the model's pick and every config of `configs` on one product."""
    from jtblas.bench import contenders, oracle, shapes, timing

    text = f"{problem.m}x{problem.n}x{problem.k}"
    shape = shapes.Shape(name=text, set="probe", group="probe", m=problem.m, n=problem.n, k=problem.k,
                         layout="NN", dtype="bfloat16")
    nbuf = contenders.operand_sets(shape.bytes_moved, l2_bytes)
    ops = contenders.TorchOperands(torch, shape, nbuf)
    weight = problem.n * problem.k * problem.operand_bytes
    row = dict(shape=text, weight_bytes=weight, nbuf=nbuf)
    row["copy_bytes_per_s"] = timing.copy_bandwidth(timer, nbytes=weight, nbuf=nbuf)["bytes_per_s"]
    row["cublas_s"] = timer.time(contenders.cublas_launcher(ops), nbuf, target_s=2e-3, replays=7)
    plan = model.plan_for_problem(problem, hw)
    row["pick"] = plan.config.short()
    found = oracle.search(configs, launcher=lambda c: contenders.kernel_launcher(ops, problem, c),
                          compiled=lambda c: compiler.result((oracle.compile_key(problem, c), c)),
                          timer=timer, nbuf=nbuf, top=8)
    row["first"] = [(c.short(), t, e) for c, t, e in found["first"]]
    row["careful"] = {c.short(): t for c, t in found["careful"].items()}
    row["pick_s"] = timer.time(contenders.kernel_launcher(ops, problem, plan.config), nbuf,
                               target_s=2e-3, replays=7)
    best = min(found["careful"], key=found["careful"].get)
    row["best"], row["best_s"] = best.short(), found["careful"][best]
    # Caution: in multi-shape runs this check read ≈ 1 on later shapes with one operand set,
    # while the same shapes run alone (and every config run once) were correct (BENCHMARKS.md).
    row["best_err"] = ops.error(contenders.kernel_launcher(ops, problem, best))
    ops.free()
    torch.cuda.empty_cache()
    return row


def main(argv: list[str] | None = None) -> None:
    import torch

    from jtblas.bench import oracle, timing

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes")
    parser.add_argument("out")
    parser.add_argument("--space", choices=sorted(SPACES), default="wide")
    parser.add_argument("--top", type=int, default=0, help="also time the model's N best-ranked candidates")
    args = parser.parse_args(argv)
    hw = hardware.detect()
    props = torch.cuda.get_device_properties(0)
    timer = timing.GraphTimer()
    problems = [Problem(m=m, n=n, k=k, dtype="bfloat16", out_dtype="bfloat16")
                for m, n, k in (tuple(int(v) for v in text.split("x")) for text in args.shapes.split(","))]
    compiler = oracle.Compiler(int(os.environ.get("WORKERS", "16")))
    spaces = []
    for problem in problems:
        others = (list(model.candidates_for_problem(problem, hw)) if SPACES[args.space]["with_candidates"]
                  else [model.plan_for_problem(problem, hw).config])
        others += [estimate.config for estimate in select.rank(problem, hw)[:args.top]]
        configs = list(dict.fromkeys(decode_space(problem, hw, args.space) + others))
        for config in configs:
            compiler.submit(problem, config)
        spaces.append(configs)
    start = time.time()
    results = []
    for problem, configs in zip(problems, spaces):
        row = probe_shape(torch, timer, compiler, problem, configs, hw, props.L2_cache_size)
        copy, weight = row["copy_bytes_per_s"], row["weight_bytes"]
        print(f"{row['shape']:>14} {weight / 1e6:5.0f} MB  copy {copy / 1e12:.2f} TB/s  "
              f"cuBLAS {weight / row['cublas_s'] / copy:4.0%}  pick {weight / row['pick_s'] / copy:4.0%} "
              f"({row['pick']})  best {weight / row['best_s'] / copy:4.0%} ({row['best']})  "
              f"[{time.time() - start:.0f} s]", flush=True)
        results.append(row)
        with open(args.out, "w") as out:
            json.dump(results, out, indent=1)
    compiler.shutdown()


if __name__ == "__main__":
    main()
