"""The same Triton kernels launched by Triton's own launcher (torch tensors) and through JAX
(`jtblas.matmul`, jax-triton), under sustained load with the GPU's clock (as `sustained.py`), on the GPU.

    python benchmarks/launcher_gap.py [--gemms fwd1,dw1] [--seconds 1] [--rounds 2] [--json FILE]

For each of `mlp_gemms.py`'s GEMMs named, the TMA kernel (which needs global scratch for its
descriptors, allocated by jaxlib around every launch) and the pointer kernel (which needs none),
both 128x256x64 w8 s3, each launched both ways; the grid, scalars and meta-parameters come from
`jtblas.ops.launch_spec`, so the two launches run the same PTX. BENCHMARKS.md, session 7.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import torch

import jtblas
from jtblas import hardware, ops
from jtblas.bench.contenders import use_torch_global_scratch
from jtblas.config import Problem
from jtblas.kernels.matmul import matmul_kernel
from jtblas.kernels.matmul_tma import matmul_tma_kernel

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from mlp_gemms import gemms  # noqa: E402
from sustained import ClockSampler  # noqa: E402

REPEATS = 20


def launchers(row: tuple, tma: bool) -> list[tuple[str, object]]:
    """(label, run) for one kernel launched by torch and through JAX; run() does REPEATS products and waits."""
    _, a_shape, b_shape, ta, tb, (m, n, k) = row
    a_torch = torch.randn(a_shape, device="cuda", dtype=torch.bfloat16)
    b_torch = torch.randn(b_shape, device="cuda", dtype=torch.bfloat16)
    c_torch = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    a = jax.random.normal(jax.random.PRNGKey(0), a_shape, jnp.bfloat16)
    b = jax.random.normal(jax.random.PRNGKey(1), b_shape, jnp.bfloat16)
    config = jtblas.Config(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, group_m=8, tma=tma)
    spec = ops.launch_spec(Problem(m=m, n=n, k=k, transpose_a=ta, transpose_b=tb), config, hw=hardware.detect())
    kernel = (matmul_tma_kernel if tma else matmul_kernel)[spec.grid]
    product = jax.jit(lambda x, y: jtblas.matmul(x, y, transpose_a=ta, transpose_b=tb, config=config))

    def by_torch():
        for _ in range(REPEATS):
            kernel(a_torch, b_torch, *spec.scalars, c_torch, num_warps=spec.num_warps, num_stages=spec.num_stages,
                   **spec.metaparams)
        torch.cuda.synchronize()

    def through_jax():
        out = None
        for _ in range(REPEATS):
            out = product(a, b)
        out.block_until_ready()

    kind = "TMA kernel" if tma else "pointer kernel"
    return [(f"{kind}, Triton's launcher", by_torch), (f"{kind}, through JAX", through_jax)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemms", default="fwd1,dw1")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    use_torch_global_scratch(torch)
    wanted = {w.strip() for w in args.gemms.split(",")}
    sampler = ClockSampler()
    results = []
    try:
        for row in (g for g in gemms(8192, 4096, 14336) if g[0].split()[0] in wanted):
            name, (m, n, k) = row[0], row[5]
            runs = launchers(row, tma=True) + launchers(row, tma=False)
            for _, run in runs:
                run()  # compile
            warm_until = time.perf_counter() + 2.0
            while time.perf_counter() < warm_until:
                runs[0][1]()
            for round_index in range(args.rounds):
                for label, run in runs if round_index % 2 == 0 else runs[::-1]:
                    start, began, calls = time.time(), time.perf_counter(), 0
                    while time.perf_counter() - began < args.seconds:
                        run()
                        calls += REPEATS
                    tflops = 2 * m * n * k * calls / (time.perf_counter() - began) / 1e12
                    clock, power = sampler.window(start, time.time())
                    results.append(dict(gemm=name, contender=label, round=round_index, tflops=tflops,
                                        clock_mhz=clock, power_w=power))
            for label, _ in runs:
                mine = [r for r in results if r["gemm"] == name and r["contender"] == label]
                clocks = [r["clock_mhz"] for r in mine if r["clock_mhz"]]
                print(f"{name:8s} {label:32s} {statistics.mean(r['tflops'] for r in mine):5.0f} TFLOP/s"
                      + (f"  {statistics.mean(clocks):5.0f} MHz" if clocks else ""), flush=True)
    finally:
        sampler.close()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(dict(device=jax.devices()[0].device_kind, results=results),
                                                      indent=1))


if __name__ == "__main__":
    main()
