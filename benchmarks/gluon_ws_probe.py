"""The experimental warp-specialized Gluon kernel against cuBLAS and our Triton TMA kernel, all
launched by torch, under sustained load with the GPU's clock (as `sustained.py`), on the GPU.

    python benchmarks/gluon_ws_probe.py [--seconds 1] [--rounds 2] [--stages 3] [--json FILE]

The products are the MLP block's six GEMMs (`mlp_gemms.py`) and 4096³, on the bench's torch
operands and launchers (`jtblas.bench.contenders`); each contender is checked against an fp32
product of the same operands first. Both kernels use 128x256x64 tiles with 8 (consumer) warps.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import torch

import jtblas
from jtblas.bench.contenders import TorchOperands, cublas_launcher, gluon_ws_launch, kernel_launcher
from jtblas.config import Problem

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from mlp_gemms import gemms  # noqa: E402
from sustained import ClockSampler, peak_per_ghz, report, time_rounds  # noqa: E402

REPEATS = 20  # products per timed run


def contenders(problem: Problem, stages: int) -> tuple[TorchOperands, list[tuple[str, object]]]:
    """The operands and (label, launch) of cuBLAS, the Gluon kernel and the Triton TMA kernel."""
    operands = TorchOperands(torch, problem, 1)
    tile = jtblas.Config(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=stages, tma=True)
    a, b, c = operands.a[0], operands.b[0], operands.c[0]
    return operands, [
        ("cublas (torch.mm)", cublas_launcher(operands)),
        (f"gluon warp-specialized s{stages}", lambda _: gluon_ws_launch(
            torch, a, b, c, tile, transpose_a=problem.transpose_a, transpose_b=problem.transpose_b)),
        ("triton TMA 128x256x64 w8 s3", kernel_launcher(operands, problem, jtblas.Config(
            block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3, tma=True))),
    ]


def repeated(launch) -> object:
    """A run for `time_rounds`: REPEATS launches on operand set 0, then a wait."""
    def run():
        for _ in range(REPEATS):
            launch(0)
        torch.cuda.synchronize()
    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--stages", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rows = [(name, ta, tb, mnk) for name, _, _, ta, tb, mnk in gemms(8192, 4096, 14336)]
    rows.append(("4096³ NN", False, False, (4096, 4096, 4096)))
    peak = peak_per_ghz()
    sampler = ClockSampler()
    results = []
    try:
        for name, ta, tb, (m, n, k) in rows:
            problem = Problem(m=m, n=n, k=k, transpose_a=ta, transpose_b=tb)
            operands, launches = contenders(problem, args.stages)
            for label, launch in launches:
                error = operands.error(launch)
                if not error < 1e-2:
                    raise SystemExit(f"{name} {label}: max error {error:.2e} relative to the fp32 product")
            mine = time_rounds([(label, repeated(launch)) for label, launch in launches],
                               flops_per_run=2 * m * n * k * REPEATS, seconds=args.seconds, rounds=args.rounds,
                               sampler=sampler, gemm=name, m=m, n=n, k=k)
            report(f"{name:10s}", mine, peak)
            results += mine
            operands.free()
    finally:
        sampler.close()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(dict(device=torch.cuda.get_device_name(), results=results),
                                                      indent=1))


if __name__ == "__main__":
    main()
