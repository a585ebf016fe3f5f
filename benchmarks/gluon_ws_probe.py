"""The experimental warp-specialized Gluon kernel against cuBLAS and our Triton TMA kernel, all
launched by torch, under sustained load with the GPU's clock (as `sustained.py`), on the GPU.

    python benchmarks/gluon_ws_probe.py [--seconds 1] [--rounds 2] [--stages 3] [--json FILE]

The products are the MLP block's six GEMMs (`mlp_gemms.py`) and 4096³; each contender is checked
against a float32 product of the same operands first.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

import torch

from jtblas.bench.contenders import gluon_ws_launch, use_torch_global_scratch
from jtblas.kernels.matmul_tma import matmul_tma_kernel

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from mlp_gemms import gemms  # noqa: E402
from sustained import HOPPER_FLOP_PER_CLOCK_PER_SM, ClockSampler  # noqa: E402

REPEATS = 20


def contenders(a, b, c, ta: bool, tb: bool, stages: int, sms: int) -> list[tuple[str, object]]:
    """(label, run) of cuBLAS, the Gluon kernel and the Triton TMA kernel, each writing C = op(a) · op(b) into c."""
    (m, n), k = c.shape, (a.shape[0] if ta else a.shape[1])
    a_used, b_used = (a.T if ta else a), (b.T if tb else b)

    def triton_tma():
        matmul_tma_kernel[(sms, 1)](a, b, m, n, k, a.stride(0), b.stride(0), 0, 0, 0, c, BLOCK_M=128, BLOCK_N=256,
                                    BLOCK_K=64, GROUP_M=8, INPUT_PRECISION="tf32", TRANSPOSE_A=ta, TRANSPOSE_B=tb,
                                    STORE_HALVES=True, INDEX_64=False, num_warps=8, num_stages=3)

    return [
        ("cublas (torch.mm)", lambda: torch.mm(a_used, b_used, out=c)),
        (f"gluon warp-specialized s{stages}", lambda: gluon_ws_launch(torch, a, b, c, transpose_a=ta,
                                                                       transpose_b=tb, stages=stages)),
        ("triton TMA 128x256x64 w8 s3", triton_tma),
    ]


def measure(row: tuple, args, sampler: ClockSampler, sms: int) -> list[dict]:
    """Checks each contender against fp32, then times them sustained, interleaved over rounds."""
    name, a_shape, b_shape, ta, tb, (m, n, k) = row
    a = torch.randn(a_shape, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(b_shape, device="cuda", dtype=torch.bfloat16)
    c = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    reference = (a.T if ta else a).float() @ (b.T if tb else b).float()
    runs = contenders(a, b, c, ta, tb, args.stages, sms)
    for label, run in runs:
        c.fill_(float("nan"))
        run()
        error = ((c.float() - reference).norm() / reference.norm()).item()
        if not error < 1e-2:
            raise SystemExit(f"{name} {label}: relative error {error:.2e}")
    warm_until = time.perf_counter() + 2.0
    while time.perf_counter() < warm_until:
        runs[0][1]()
        torch.cuda.synchronize()
    results = []
    for round_index in range(args.rounds):
        for label, run in runs if round_index % 2 == 0 else runs[::-1]:
            start, began, calls = time.time(), time.perf_counter(), 0
            while time.perf_counter() - began < args.seconds:
                for _ in range(REPEATS):
                    run()
                torch.cuda.synchronize()
                calls += REPEATS
            tflops = 2 * m * n * k * calls / (time.perf_counter() - began) / 1e12
            clock, power = sampler.window(start, time.time())
            results.append(dict(gemm=name, m=m, n=n, k=k, contender=label, round=round_index,
                                tflops=tflops, clock_mhz=clock, power_w=power))
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--stages", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    use_torch_global_scratch(torch)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    peak_per_ghz = sms * HOPPER_FLOP_PER_CLOCK_PER_SM * 1e9
    rows = list(gemms(8192, 4096, 14336)) + [("4096³ NN", (4096, 4096), (4096, 4096), False, False, (4096, 4096, 4096))]
    sampler = ClockSampler()
    results = []
    try:
        for row in rows:
            mine = measure(row, args, sampler, sms)
            results += mine
            for label in dict.fromkeys(r["contender"] for r in mine):
                runs = [r for r in mine if r["contender"] == label]
                tflops = statistics.mean(r["tflops"] for r in runs)
                line = f"{row[0]:10s} {label:32s} {tflops:5.0f} TFLOP/s"
                clocks = [r["clock_mhz"] for r in runs if r["clock_mhz"]]
                if clocks:
                    clock = statistics.mean(clocks)
                    line += f"  {clock:5.0f} MHz  {tflops * 1e12 / (clock / 1e3) / peak_per_ghz:.3f} of peak/clock"
                print(line, flush=True)
    finally:
        sampler.close()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(dict(device=torch.cuda.get_device_name(), results=results),
                                                      indent=1))

if __name__ == "__main__":
    main()
