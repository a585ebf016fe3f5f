"""The same Triton kernels launched by Triton's own launcher (torch tensors) and through JAX
(`jtblas.matmul`, jax-triton), under sustained load with the GPU's clock (as `sustained.py`), on the GPU.

    python benchmarks/launcher_gap.py [--gemms fwd1,dw1] [--seconds 1] [--rounds 2] [--json FILE]

For each of `mlp_gemms.py`'s GEMMs named, the TMA kernel (which needs global scratch for its
descriptors: an XLA buffer through JAX since session 9) and the pointer kernel (which needs none),
both 128x256x64 w8 s3, each launched both ways: by the bench's torch launcher
(`jtblas.bench.contenders.kernel_launcher`, whose grid, scalars and meta-parameters are
`jtblas.ops.launch_spec`'s, as `jtblas.matmul` uses them) and by `jtblas.matmul` under `jax.jit`.
BENCHMARKS.md, session 7.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import torch

import jtblas
from jtblas.bench.contenders import TorchOperands, kernel_launcher
from jtblas.config import Problem

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from mlp_gemms import gemms  # noqa: E402
from sustained import ClockSampler, peak_per_ghz, report, time_rounds  # noqa: E402

REPEATS = 20  # products per timed run


def launchers(problem: Problem, tma: bool, operands: TorchOperands) -> list[tuple[str, object]]:
    """(label, run) for one kernel launched by torch and through JAX; run() does REPEATS products and waits."""
    config = jtblas.Config(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, group_m=8, tma=tma)
    by_torch = kernel_launcher(operands, problem, config)
    a = jnp.asarray(operands.a[0].float().cpu().numpy(), jnp.bfloat16)
    b = jnp.asarray(operands.b[0].float().cpu().numpy(), jnp.bfloat16)
    product = jax.jit(lambda x, y: jtblas.matmul(x, y, transpose_a=problem.transpose_a,
                                                 transpose_b=problem.transpose_b, config=config))

    def torch_run():
        for _ in range(REPEATS):
            by_torch(0)
        torch.cuda.synchronize()

    def jax_run():
        out = None
        for _ in range(REPEATS):
            out = product(a, b)
        out.block_until_ready()

    kind = "TMA kernel" if tma else "pointer kernel"
    return [(f"{kind}, Triton's launcher", torch_run), (f"{kind}, through JAX", jax_run)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemms", default="fwd1,dw1")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    wanted = {w.strip() for w in args.gemms.split(",")}
    peak = peak_per_ghz()
    sampler = ClockSampler()
    results = []
    try:
        for name, _, _, ta, tb, (m, n, k) in gemms(8192, 4096, 14336):
            if name.split()[0] not in wanted:
                continue
            problem = Problem(m=m, n=n, k=k, transpose_a=ta, transpose_b=tb)
            operands = TorchOperands(torch, problem, 1)
            runs = launchers(problem, True, operands) + launchers(problem, False, operands)
            for _, run in runs:
                run()  # compiles
            mine = time_rounds(runs, flops_per_run=2 * m * n * k * REPEATS, seconds=args.seconds,
                               rounds=args.rounds, sampler=sampler, gemm=name)
            report(f"{name:8s}", mine, peak)
            results += mine
            operands.free()
    finally:
        sampler.close()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(dict(device=jax.devices()[0].device_kind, results=results),
                                                      indent=1))


if __name__ == "__main__":
    main()
