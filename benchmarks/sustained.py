"""Sustained throughput of GEMM configs against XLA's dot, with the GPU's clock and power, on the GPU.

A training step keeps the tensor cores busy for seconds: the H200 then sits at its power limit
(700 W) at ~1.4-1.5 GHz, not at the short bursts' ~1.98 GHz, and what counts is work per clock.
Each contender runs back to back for `--seconds` after a 2 s warm-up (looped in one jitted call,
as `matmul_vs_xla.looped`), contenders interleaved over `--rounds` (reversed every other round);
`nvidia-smi` is sampled every 100 ms in the background and each window's mean SM clock and power
are reported with TFLOP/s per GHz and the fraction of that clock's dense peak.

    python benchmarks/sustained.py [--gemms fwd1,dx1,...|all] [--shapes 4096x4096x4096:NT,...]
        [--configs "128x256x64 w8 s3 g8 tma;128x256x64 w8 s4 g8"] [--stream-k] [--gluon] [--seconds 1] [--rounds 2]
        [--json FILE]

The GEMMs are those of `mlp_gemms.py` (an MLP block's training step); `--stream-k` adds, for each
TMA config, the experimental Stream-K hybrid (`jtblas.ops.stream_k_tma`: full waves whole, the
remaining tiles' K iterations shared by all programs); `--gluon` the experimental warp-specialized
Gluon kernel with the same tile (`jtblas.ops.gluon_ws_matmul`).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

import jax
import jax.numpy as jnp
import numpy as np

import jtblas
from jtblas import hardware

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from matmul_vs_xla import looped  # noqa: E402
from mlp_gemms import gemms  # noqa: E402

REPEATS = 20  # products per jitted call
# Dense bf16 tensor-core FLOP per clock per Hopper SM: 989.4 TFLOP/s = 132 SMs x 1.83 GHz x 4096
# (NVIDIA H100 whitepaper, SXM5).
HOPPER_FLOP_PER_CLOCK_PER_SM = 4096


def parse_shape(text: str) -> tuple:
    """`MxNxK:LAYOUT` (layout NN, NT, TN or TT; default NN) as a `mlp_gemms.gemms` row."""
    sizes, _, layout = text.partition(":")
    m, n, k = (int(v) for v in sizes.split("x"))
    ta, tb = (layout or "NN")[0] == "T", (layout or "NN")[1] == "T"
    return (text, (k, m) if ta else (m, k), (n, k) if tb else (k, n), ta, tb, (m, n, k))


class ClockSampler:
    """`nvidia-smi` sampling SM clock (MHz) and power (W) every 100 ms in the background."""

    def __init__(self):
        self.file = tempfile.NamedTemporaryFile("w+", suffix=".csv")
        command = ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
                   "-lms", "100", "-i", "0"]
        self.process = subprocess.Popen(command, stdout=self.file) if shutil.which("nvidia-smi") else None

    def window(self, start: float, end: float) -> tuple[float, float] | tuple[None, None]:
        """Mean (clock MHz, power W) of the samples in [start + 0.3 s, end] (epoch seconds)."""
        if self.process is None:
            return None, None
        self.file.flush()
        samples = []
        for line in pathlib.Path(self.file.name).read_text().splitlines():
            try:
                stamp, clock, power = (field.strip() for field in line.split(","))
                when = datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()
                samples.append((when, float(clock), float(power)))
            except ValueError:
                continue
        inside = [(c, p) for when, c, p in samples if start + 0.3 <= when <= end]
        if not inside:
            return None, None
        return statistics.mean(c for c, _ in inside), statistics.mean(p for _, p in inside)

    def close(self) -> None:
        if self.process is not None:
            self.process.terminate()


def contenders(row: tuple, configs: list[jtblas.Config], stream_k: bool, gluon: bool) -> list[tuple[str, object]]:
    name, _, _, ta, tb, (m, n, k) = row
    dims = (((0 if ta else 1,), (1 if tb else 0,)), ((), ()))
    runs = [("xla", lambda x, y: jax.lax.dot_general(x, y, dims))]
    pick = jtblas.select(m, n, k, transpose_a=ta, transpose_b=tb)
    runs.append((f"pick {pick.short()}", lambda x, y: jtblas.matmul(x, y, transpose_a=ta, transpose_b=tb)))
    for config in configs:
        runs.append((config.short(), lambda x, y, c=config: jtblas.matmul(
            x, y, transpose_a=ta, transpose_b=tb, config=c)))
        if stream_k and config.tma:
            runs.append((config.short() + " stream-k", lambda x, y, c=config: jtblas.ops.stream_k_tma(
                x, y, c, transpose_a=ta, transpose_b=tb)))
        if gluon and config.tma:
            runs.append((config.short() + " gluon-ws", lambda x, y, c=config: jtblas.ops.gluon_ws_matmul(
                x, y, c, transpose_a=ta, transpose_b=tb)))
    return runs


def time_rounds(runs: list[tuple[str, object]], *, flops_per_run: float, seconds: float, rounds: int,
                sampler: ClockSampler, warm_seconds: float = 2.0, **tags) -> list[dict]:
    """Sustained timing: `runs[0]` repeated for `warm_seconds` (to reach the power limit), then
    each (label, run) back to back for `seconds`, in order, reversed every other round; `run()`
    does `flops_per_run` FLOP and waits for them. One dict per window: `tags`, contender, round,
    tflops, and the window's mean clock_mhz and power_w (None without nvidia-smi)."""
    warm_until = time.perf_counter() + warm_seconds
    while time.perf_counter() < warm_until:
        runs[0][1]()
    results = []
    for round_index in range(rounds):
        for label, run in runs if round_index % 2 == 0 else runs[::-1]:
            start, began, calls = time.time(), time.perf_counter(), 0
            while time.perf_counter() - began < seconds:
                run()
                calls += 1
            tflops = flops_per_run * calls / (time.perf_counter() - began) / 1e12
            clock, power = sampler.window(start, time.time())
            results.append(dict(tags, contender=label, round=round_index, tflops=tflops, clock_mhz=clock,
                                power_w=power))
    return results


def report(prefix: str, results: list[dict], peak_per_ghz: float) -> None:
    """Prints each contender's mean TFLOP/s over its windows, with the clock, power, TFLOP/s per GHz
    and fraction of that clock's peak where the clock was sampled."""
    for label in dict.fromkeys(r["contender"] for r in results):
        mine = [r for r in results if r["contender"] == label]
        tflops = statistics.mean(r["tflops"] for r in mine)
        line = f"{prefix} {label:40s} {tflops:5.0f} TFLOP/s"
        clocks = [r["clock_mhz"] for r in mine if r["clock_mhz"]]
        if clocks:
            clock = statistics.mean(clocks)
            power = statistics.mean(r["power_w"] for r in mine if r["power_w"])
            per_ghz = tflops * 1e12 / (clock / 1e3)
            line += (f"  {clock:5.0f} MHz {power:4.0f} W  {per_ghz / 1e12:4.0f} TFLOP/s/GHz "
                     f"({per_ghz / peak_per_ghz:.3f} of peak)")
        print(line, flush=True)


def peak_per_ghz() -> float:
    """Dense bf16 FLOP/s per GHz of SM clock of the GPU in use (Hopper)."""
    return hardware.detect().sm_count * HOPPER_FLOP_PER_CLOCK_PER_SM * 1e9

def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemms", default="all", help="names (first word) of mlp_gemms.py's six, or 'all' or ''")
    parser.add_argument("--shapes", default="", help="more products, MxNxK:LAYOUT, comma-separated")
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--ffn", type=int, default=14336)
    parser.add_argument("--configs", default="128x256x64 w8 s3 g8 tma", help="';'-separated Config.short() strings")
    parser.add_argument("--stream-k", action="store_true")
    parser.add_argument("--gluon", action="store_true")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    wanted = {w.strip() for w in args.gemms.split(",") if w.strip()}
    rows = [g for g in gemms(args.tokens, args.hidden, args.ffn) if "all" in wanted or g[0].split()[0] in wanted]
    rows += [parse_shape(s) for s in args.shapes.split(",") if s.strip()]
    configs = [jtblas.Config.from_short(c) for c in args.configs.split(";") if c.strip()]
    peak = peak_per_ghz()
    sampler = ClockSampler()
    results = []
    try:
        for row in rows:
            name, a_shape, b_shape, _, _, (m, n, k) = row
            a = jax.random.normal(jax.random.PRNGKey(0), a_shape, jnp.bfloat16)
            b = jax.random.normal(jax.random.PRNGKey(1), b_shape, jnp.bfloat16)
            runs = contenders(row, configs, args.stream_k, args.gluon)
            reference = np.asarray(jax.jit(runs[0][1])(a, b), np.float32)
            loops = []
            for label, product in runs:
                got = np.asarray(jax.jit(product)(a, b), np.float32)
                error = np.linalg.norm(got - reference) / np.linalg.norm(reference)
                if not error < 1e-2:
                    raise SystemExit(f"{name} {label}: relative difference {error:.2e} from XLA's product")
                loop = looped(product, REPEATS)
                jax.block_until_ready(loop(a, b))
                loops.append((label, lambda loop=loop, a=a, b=b: jax.block_until_ready(loop(a, b))))
            mine = time_rounds(loops, flops_per_run=2 * m * n * k * REPEATS, seconds=args.seconds,
                               rounds=args.rounds, sampler=sampler, gemm=name, m=m, n=n, k=k)
            report(f"{name:10s} {m}x{n}x{k}", mine, peak)
            results += mine
    finally:
        sampler.close()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(dict(device=jax.devices()[0].device_kind, jax=jax.__version__,
                                                           results=results), indent=1))


if __name__ == "__main__":
    main()
