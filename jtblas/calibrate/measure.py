"""Measurement for `jtblas calibrate`: probe kernels timed on torch's current CUDA device.

What each step measures and which profile field it feeds: the table in `jtblas.calibrate`.
`Calibration.run` records the raw numbers (`measured`) and hands them to
`jtblas.calibrate.derive` for the profile. torch, Triton and JAX are imported lazily.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any, TextIO

from jtblas import hardware as hardware_lib
from jtblas import profiles
from jtblas.calibrate import derive
from jtblas.config import Config

MIB = 1 << 20
KIB = 1 << 10
FP32 = 4
BF16 = 2
# `Calibration.split_sum`: splits of an M = N = SPLIT_SUM_SIZE product (fp32 partials of 64 MB per
# split, each read from DRAM: L2 holds 50 MB on the H100 and H200).
SPLIT_SUM_SPLITS = (2, 4)
SPLIT_SUM_SIZE = 4096
NO_GPU = "no CUDA GPU found, nothing to calibrate"

# Load-heavy tiles for the L2 measurement (`Calibration.l2_gemm`): 64-row or 64-column tiles, 4
# warps, pointer and TMA kernels (the TMA ones on Hopper only).
L2_GEMM_CONFIGS = (
    Config(block_m=64, block_n=64, block_k=128, num_warps=4, num_stages=4, group_m=8),
    Config(block_m=64, block_n=128, block_k=64, num_warps=4, num_stages=5, group_m=8),
    Config(block_m=128, block_n=64, block_k=64, num_warps=4, num_stages=5, group_m=8),
    Config(block_m=64, block_n=64, block_k=128, num_warps=4, num_stages=4, group_m=8, tma=True),
    Config(block_m=64, block_n=128, block_k=64, num_warps=4, num_stages=5, group_m=8, tma=True),
)

# The tile of `Calibration.tensor_rate_vs_busy_sms`: the model's pick wherever the tensor cores
# bind on Hopper (128x256x64 on 8 warps, 4 stages); 128x128x64 on 4 warps elsewhere.
BUSY_SM_CONFIGS = {
    True: Config(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4, group_m=1),
    False: Config(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3, group_m=1),
}

# `Calibration.tile_cost`: one tile's time on each SM and more, each program of the pointer kernel
# one tile started cold, the TMA kernel's one program per SM walking them all. 128x128x64 on 4
# warps with 4 stages (128 KB) is one program per SM on Hopper and the A100; K of 2 and 16 K steps.
TILE_COST_CONFIG = Config(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=4, group_m=8)
TILE_COST_TILES = (1, 2, 4)
TILE_COST_K = (128, 1024)


# `Calibration.narrow_copies`: our pointer kernel on fp32 products whose B rows are 4-, 8- and
# 16-byte aligned (N = 32001, 32002, 32004: an lm head over a vocabulary not a multiple of 4), each
# timed against its prediction. B streams from DRAM (K · N · 4 bytes ≫ L2). 64x128x32 on 4 warps
# issues 32 four-byte copies of B per thread per stage, under `MAX_NARROW_COPIES_PER_THREAD`; with
# 3 and with 5 stages (1 and 3 stages of loads in flight): a time that drops with more in flight
# is bound by copies in flight, one that does not by the rate copies issue at.
NARROW_COPY_CONFIG = Config(block_m=64, block_n=128, block_k=32, num_warps=4, num_stages=3, group_m=1)
NARROW_COPY_STAGES = (3, 5)
NARROW_COPY_COLUMNS = (32001, 32002, 32004)
# Then two contrasts on the 16-byte-aligned rows (N 32004), 3 stages: B stored [N, K], and a
# 32-row tile (mma.sync). Compiled for sm_90a, the 64-row tile runs tf32 wgmma, which reads both
# operands K-major from shared memory, so it copies a [K, N] B one element (4 bytes) per
# cp.async whatever the rows' alignment; B stored [N, K], or the mma.sync tile, copy 16 bytes at a
# time (docs/model.md, "Four-byte copies of a streamed B"). (B stored [N, K], config) per contrast.
NARROW_COPY_CONTRASTS = ((True, NARROW_COPY_CONFIG), (False, dataclasses.replace(NARROW_COPY_CONFIG, block_m=32)))


def latency_knee(rows: list[dict]) -> dict:
    """Of read rows at several bytes in flight per program, the one with the fewest bytes in
    flight that reaches 90% of the best bandwidth: its time per step is the loaded latency
    (Little's law: latency = bytes in flight / bandwidth, once more in flight adds nothing)."""
    best = max(row["bytes_per_s"] for row in rows)
    return min((row for row in rows if row["bytes_per_s"] >= 0.9 * best),
               key=lambda row: row["inflight_bytes_per_program"])


def tile_grid(tiles: int) -> tuple[int, int]:
    """Rows and columns of a grid of `tiles` tiles, as square as the count allows (rows ≤ columns):
    A's and B's panels are each read by many tiles from L2, so C's stores dominate the DRAM bytes
    and the SM side the time."""
    rows = max(r for r in range(1, int(tiles ** 0.5) + 1) if tiles % r == 0)
    return rows, tiles // rows


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeasurementPlan:
    """Sizes and repetitions of one calibration run (`quick` trades accuracy for time)."""

    quick: bool
    copy_bytes: int  # DRAM copy size
    gemm_size: int  # bf16/fp16/tf32 GEMM M = N = K
    fp32_gemm_size: int  # fp32 (no tensor cores) GEMM size
    read_buffer_bytes: int  # random fp32 data the read kernel streams (≫ L2)
    l2_chunk_bytes: int  # per program (one per SM): working set = SMs x this, ≪ L2
    l2_repeats: int
    inflight_bytes: tuple[int, ...]  # bytes in flight per program (the read kernel's BLOCK·4)
    active_sms: tuple[int, ...]  # grids of the per-SM rate, clipped to the SM count (and the SM count added)
    busy_sm_fractions: tuple[float, ...]  # SMs given one compute-bound tile each, as fractions of the SM count
    busy_sm_k: int  # K of that product (its K steps of 64 set each tile's length)
    target_s: float  # length of one timed CUDA-graph replay
    replays: int
    clock_sample_s: float

    @classmethod
    def make(cls, quick: bool) -> MeasurementPlan:
        if quick:
            return cls(quick=True, copy_bytes=256 * MIB, gemm_size=4096, fp32_gemm_size=4096,
                       read_buffer_bytes=512 * MIB, l2_chunk_bytes=128 * KIB, l2_repeats=16,
                       inflight_bytes=(8 * KIB, 32 * KIB, 128 * KIB), active_sms=(1, 8, 33),
                       busy_sm_fractions=(0.25, 0.55, 1.0), busy_sm_k=8192,
                       target_s=2e-3, replays=3, clock_sample_s=0.1)
        # The copy is 256 MiB in both modes: on the H200 a 1 GiB copy measured 2.77 TB/s, warm or
        # cold, where 256 MiB (and the GEMMs' own streaming) reached 4.2.
        return cls(quick=False, copy_bytes=256 * MIB, gemm_size=8192, fp32_gemm_size=4096,
                   read_buffer_bytes=1024 * MIB, l2_chunk_bytes=128 * KIB, l2_repeats=32,
                   inflight_bytes=(8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB, 128 * KIB),
                   active_sms=(1, 2, 4, 8, 16, 33, 66), busy_sm_fractions=(0.125, 0.25, 0.4, 0.55, 0.7, 0.85, 1.0),
                   busy_sm_k=16384, target_s=10e-3, replays=5, clock_sample_s=0.3)


def find_gpu() -> str | None:
    """None when torch sees a CUDA GPU; else why calibration cannot run (`NO_GPU` when the machine
    has no CUDA GPU at all). Checks without JAX (whose start-up may log to stderr)."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        return None
    if _driver_device_count() == 0:
        return NO_GPU
    if torch is None:
        return "needs PyTorch with CUDA for its microbenchmarks (torch is not installed)"
    return "needs PyTorch with CUDA for its microbenchmarks (this torch has no CUDA)"


def _driver_device_count() -> int:
    """CUDA devices the driver reports (0 without a driver), through libcuda directly."""
    try:
        import ctypes

        libcuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int(0)
        if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
        return count.value
    except (OSError, AttributeError):
        return 0


class _Progress:
    """tqdm over the steps if importable, else one stderr line per step."""

    def __init__(self, total: int, enabled: bool, stream: TextIO):
        self.enabled, self.stream, self.total, self.done = enabled, stream, total, 0
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc="jtblas calibrate", file=stream, leave=False,
                                bar_format="{desc}: {n}/{total} |{bar}| {elapsed} {postfix}")
            except ImportError:
                self.bar = None

    def start(self, name: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(name)
        elif self.enabled:
            print(f"jtblas calibrate [{self.done + 1}/{self.total}] {name} ...", file=self.stream, flush=True)

    def finish(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Calibration:
    """One calibration run on torch's current CUDA device (`run()` returns the profile dict)."""

    def __init__(self, *, quick: bool = False, fit_constants: bool = False, progress: bool = True,
                 stream: TextIO = sys.stderr):
        import torch

        from jtblas.timing import GraphTimer

        self.torch = torch
        self.plan = MeasurementPlan.make(quick)
        self.fit_constants = fit_constants
        self.progress, self.stream = progress, stream
        self.timer = GraphTimer(max_launches=4000)  # ≥ the 64 views a read may rotate over
        self.props = torch.cuda.get_device_properties(torch.cuda.current_device())
        self.device = str(self.props.name).strip()
        self.capability = (int(self.props.major), int(self.props.minor))
        self.sm_count = int(self.props.multi_processor_count)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.base = hardware_lib.from_device_kind(self.device, self.capability)
        self.known_device = not caught  # from_device_kind warns when it has no description
        self.measured: dict[str, Any] = {}
        self.errors: dict[str, str] = {}

    # --- the measurements -------------------------------------------------------------------

    def _time(self, launch: Callable[[int], object], nbuf: int = 1) -> tuple[float, str]:
        seconds = self.timer.time(launch, nbuf, target_s=self.plan.target_s, replays=self.plan.replays)
        return seconds, self.timer.last_method

    def dram_copy(self) -> None:
        from jtblas.timing import copy_bandwidth

        # Copies for 0.2 s first: an idle GPU's first measurement reads low (clocks ramping up).
        self.measured["dram_copy"] = copy_bandwidth(self.timer, nbytes=self.plan.copy_bytes, warm_s=0.2)

    def gemm(self, dtype_name: str) -> None:
        """cuBLAS through torch.matmul: bf16/fp16, fp32 as tf32 ("tf32"), or fp32 without tensor
        cores ("fp32"); random inputs (never zeros)."""
        torch = self.torch
        dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "tf32": torch.float32,
                 "fp32": torch.float32}[dtype_name]
        n = self.plan.fp32_gemm_size if dtype_name == "fp32" else self.plan.gemm_size
        previous = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest" if dtype_name == "fp32" else "high")
        try:
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            out = torch.empty(n, n, device="cuda", dtype=dtype)
            torch.cuda.synchronize()  # the timer runs on its own stream
            seconds, method = self._time(lambda i: torch.matmul(a, b, out=out))
            if dtype_name == "bfloat16":
                self.measured["sm_clock_hz_samples"] = self._sample_clock(lambda: torch.matmul(a, b, out=out),
                                                                          seconds)
        finally:
            torch.set_float32_matmul_precision(previous)
        self.measured.setdefault("gemm", {})[dtype_name] = dict(
            size=n, seconds=seconds, flops_per_s=2.0 * n**3 / seconds, method=f"torch.matmul; {method}")

    def _sample_clock(self, op: Callable[[], object], op_seconds: float) -> list[float]:
        """The SM clock (Hz) read through NVML while `op` runs back to back for clock_sample_s;
        empty if NVML is not available (torch.cuda.clock_rate needs pynvml)."""
        torch = self.torch
        count = max(1, math.ceil(self.plan.clock_sample_s / op_seconds))
        samples: list[float] = []
        try:
            torch.cuda.clock_rate()  # fails fast without pynvml, before queueing any work
        except Exception:  # noqa: BLE001 - optional: no clock reading means keep the built-in clock
            return samples
        for _ in range(count):
            op()
        started = time.perf_counter()
        while time.perf_counter() - started < 0.6 * self.plan.clock_sample_s and len(samples) < 10:
            try:
                samples.append(float(torch.cuda.clock_rate()) * 1e6)  # MHz
            except Exception:  # noqa: BLE001
                break
            time.sleep(self.plan.clock_sample_s / 20)
        torch.cuda.synchronize()
        return samples

    def launch(self) -> None:
        torch = self.torch
        _check_triton_compiles()
        from jtblas.calibrate.kernels import tiny_kernel

        out = torch.empty(1, device="cuda", dtype=torch.float32)
        seconds, method = self._time(lambda i: tiny_kernel[(1,)](out, num_warps=1))
        self.measured["launch"] = dict(seconds=seconds, method=f"Triton one-store kernel; {method}")

    def _read_buffer(self):
        if not hasattr(self, "_buffer"):
            torch = self.torch
            self._buffer = torch.rand(self.plan.read_buffer_bytes // FP32, device="cuda", dtype=torch.float32)
            self._sink = torch.empty(128 * KIB // FP32, device="cuda", dtype=torch.float32)
            torch.cuda.synchronize()  # the timer runs on its own stream: the data must be there first
        return self._buffer, self._sink

    def _read(self, *, programs: int, inflight_bytes: int, chunk_bytes: int, repeats: int = 1,
              rotate: bool = True) -> dict:
        """Bytes/s of `programs` programs each reading `chunk_bytes` (× repeats) with
        `inflight_bytes` in flight; successive launches read different parts of the buffer
        (rotate) so that nothing is left in L2 from the previous one."""
        _check_triton_compiles()
        from jtblas.calibrate.kernels import stream_read_kernel

        buffer, sink = self._read_buffer()
        block = inflight_bytes // FP32
        warps = max(1, min(16, block // 512))  # ≤ 64 elements (16 x 16-byte loads) per thread
        total = buffer.numel()
        chunk = max(block, min(chunk_bytes // FP32, total // programs) // block * block)
        footprint = programs * chunk
        if footprint > total:
            raise ValueError(f"read of {programs} x {chunk} elements exceeds the {total}-element buffer")
        # Rotate over enough views that a view comes back only after ≥ 256 MB (≫ L2) were read.
        count = min(total // footprint, -(-256 * MIB // (footprint * FP32))) if rotate else 1
        views = [buffer[i * footprint:(i + 1) * footprint] for i in range(max(1, count))]

        def launch(i: int):
            return stream_read_kernel[(programs,)](views[i], sink, chunk, repeats, BLOCK=block,
                                                   num_warps=warps, num_stages=1)

        compiled = launch(0)  # compiles; its register use tells whether the in-flight data spilled
        estimate = self.timer.estimate(launch, len(views))
        # The graph replays ≥ len(views) launches, so replays do not find the last one's data in L2.
        seconds = self.timer.time(launch, len(views), target_s=max(self.plan.target_s, estimate * len(views)),
                                  replays=self.plan.replays, estimate_s=estimate)
        method = self.timer.last_method
        nbytes = footprint * FP32 * repeats
        steps = repeats * chunk // block
        return dict(programs=programs, inflight_bytes_per_program=block * FP32, bytes=nbytes,
                    seconds=seconds, bytes_per_s=nbytes / seconds, seconds_per_step=seconds / steps,
                    registers=getattr(compiled, "n_regs", None), spills=getattr(compiled, "n_spills", None),
                    method=f"Triton read kernel, {warps} warps; {method}")

    def jax_launch(self) -> None:
        """One more chained launch of a one-element kernel through `jtblas.launch` (jax-triton)
        inside a jitted, unrolled `fori_loop`: the slope (t(2R) − t(R)) / R. This is what a
        launch costs `jtblas.matmul` under `jax.jit` (the model's `launch_seconds`); on the H200
        the kernels ran 14.4 µs per launch slower this way than replayed in a CUDA graph."""
        import jax
        import jax.numpy as jnp

        from jtblas import launch as launch_lib
        from jtblas.calibrate.kernels import increment_kernel
        from jtblas.timing import measure_slope

        def one(x):
            return launch_lib.launch(increment_kernel, grid=(1,), args=[x], num_warps=1, num_stages=1,
                                     out_shape=jax.ShapeDtypeStruct((1,), jnp.float32), metaparams={})

        if jax.default_backend() != "gpu":
            raise RuntimeError(f"JAX runs on {jax.default_backend()!r}, not the GPU (install jax with CUDA)")
        repeats = 64 if self.plan.quick else 256
        compiled = {}
        x = jnp.zeros((1,), jnp.float32)
        for r in (repeats, 2 * repeats):
            loop = jax.jit(lambda x, r=r: jax.lax.fori_loop(0, r, lambda _, y: one(y), x, unroll=16))
            compiled[r] = loop
            jax.block_until_ready(loop(x))  # compiles and warms
        result = measure_slope(lambda r: jax.block_until_ready(compiled[r](x)), repeats, trials=5)
        self.measured["jax_launch"] = dict(seconds=result["seconds"], repeats=repeats,
                                           method="slope of a jitted fori_loop of chained jax-triton launches")

    def l2_read(self) -> None:
        result = self._read(programs=self.sm_count, inflight_bytes=128 * KIB, chunk_bytes=self.plan.l2_chunk_bytes,
                            repeats=self.plan.l2_repeats, rotate=False)
        result["working_set_bytes"] = result["bytes"] // self.plan.l2_repeats
        self.measured["l2_read"] = result

    def l2_gemm(self) -> None:
        """Our own kernels on a bf16 2048x2048x4096 product whose A and B (16 MB each) stay in L2,
        with load-heavy tiles (`L2_GEMM_CONFIGS`: 64-row and 64-column tiles, 16-32 FLOPs per
        byte of tile loads, pointer and TMA kernels): each config's tile-load bytes / time is a
        lower bound of what the L2 delivers to the SMs, the quantity the model's l2 term divides
        by (every tile load crosses L2), and the largest is kept. The stream-read kernel of
        `l2_read` measured 7.4-8.0 TB/s on the H200, 64x64x128 tiles 11.4 (BENCHMARKS.md at 705f18b)."""
        from jtblas.torch_launch import LaunchOperands, kernel_launcher
        from jtblas.config import Problem

        torch = self.torch
        m = n = 2048
        k = 4096
        problem = Problem(m=m, n=n, k=k, dtype="bfloat16", out_dtype="bfloat16")
        operands = LaunchOperands(
            a=[torch.randn(m, k, device="cuda", dtype=torch.bfloat16)],
            b=[torch.randn(k, n, device="cuda", dtype=torch.bfloat16)],
            c=[torch.empty(m, n, device="cuda", dtype=torch.bfloat16)],
            torch=torch,
        )
        torch.cuda.synchronize()  # the timer runs on its own stream: the data must be there first
        rows = []
        for config in L2_GEMM_CONFIGS:
            if config.tma and self.capability < (9, 0):
                continue
            launch = kernel_launcher(operands, problem, config)
            launch(0)  # compiles
            seconds, method = self._time(launch)
            tiles = (m // config.block_m) * (n // config.block_n)
            tile_bytes = tiles * (config.block_m + config.block_n) * k * problem.operand_bytes
            rows.append(dict(config=config.short(), bytes=tile_bytes, seconds=seconds,
                             bytes_per_s=tile_bytes / seconds, flops_per_s=problem.flops / seconds))
        best = max(rows, key=lambda row: row["bytes_per_s"])
        self.measured["l2_gemm"] = dict(best, problem=problem.short(), configs=rows,
                                        method=f"matmul kernels, the largest tile-load rate of {len(rows)}; {method}")

    def dram_read_vs_inflight(self) -> None:
        """Every SM one program, 8-128 KB in flight each: DRAM read bandwidth against bytes in
        flight. The loaded latency is the time of one step at the smallest in-flight size that
        reaches 90% of the best bandwidth (Little's law: latency = bytes in flight / bandwidth)."""
        rows = [self._read(programs=self.sm_count, inflight_bytes=b,
                           chunk_bytes=self.plan.read_buffer_bytes // 2 // self.sm_count)
                for b in self.plan.inflight_bytes]
        self.measured["dram_read_vs_inflight"] = rows
        knee = latency_knee(rows)
        self.measured["dram_read_bytes_per_s"] = max(row["bytes_per_s"] for row in rows)
        self.measured["loaded_latency_seconds"] = knee["seconds_per_step"]
        self.measured["loaded_latency_inflight_bytes_per_sm"] = knee["inflight_bytes_per_program"]

    def l2_read_vs_inflight(self) -> None:
        """Every SM one program re-reading its `l2_chunk_bytes` (all of them together well inside
        L2) with 8-128 KB in flight: the loaded latency of a read that hits L2, at the knee as in
        `dram_read_vs_inflight`. A K loop whose panels come from L2 waits this long for a stage,
        not DRAM's loaded latency (on an H100, 2026-12-07, 128x128x64 w4 s4 ran its K steps at the
        tensor cores' 0.36 µs where DRAM's latency over two loads in flight gives 0.5). Recorded
        only."""
        rows = [self._read(programs=self.sm_count, inflight_bytes=b, chunk_bytes=self.plan.l2_chunk_bytes,
                           repeats=self.plan.l2_repeats, rotate=False)
                for b in self.plan.inflight_bytes]
        self.measured["l2_read_vs_inflight"] = rows
        knee = latency_knee(rows)
        self.measured["l2_loaded_latency_seconds"] = knee["seconds_per_step"]
        self.measured["l2_loaded_latency_inflight_bytes_per_sm"] = knee["inflight_bytes_per_program"]

    def single_sm_read(self) -> None:
        """One program: step time = idle latency + bytes / the SM's load rate; two in-flight sizes
        give both (the intercept and the slope)."""
        small, large = min(self.plan.inflight_bytes), max(self.plan.inflight_bytes)
        rows = [self._read(programs=1, inflight_bytes=b, chunk_bytes=(4 if self.plan.quick else 16) * MIB)
                for b in (small, large)]
        self.measured["single_sm_read"] = rows
        t_small, t_large = rows[0]["seconds_per_step"], rows[1]["seconds_per_step"]
        if t_large > t_small:
            rate = (large - small) / (t_large - t_small)
            self.measured["single_sm_load_bytes_per_s_slope"] = rate
            self.measured["idle_latency_seconds"] = t_small - small / rate

    def dram_read_vs_sms(self) -> None:
        """128 KB in flight per program on 1, 2, 4, ... SMs: the per-SM load rate where the DRAM
        is far from saturated (≤ 8 SMs), and how many SMs saturate it."""
        grids = sorted({g for g in self.plan.active_sms if g < self.sm_count} | {self.sm_count})
        inflight = max(self.plan.inflight_bytes)
        rows = []
        for programs in grids:
            row = self._read(programs=programs, inflight_bytes=inflight,
                             chunk_bytes=min(16 * MIB, self.plan.read_buffer_bytes // 2 // programs))
            row["bytes_per_s_per_sm"] = row["bytes_per_s"] / programs
            rows.append(row)
        self.measured["dram_read_vs_sms"] = rows
        few = [row["bytes_per_s_per_sm"] for row in rows if row["programs"] <= 8] or [rows[0]["bytes_per_s_per_sm"]]
        per_sm = statistics.median(few)
        self.measured["per_sm_load_bytes_per_s"] = per_sm
        self.measured["sms_to_saturate_dram_read"] = max(row["bytes_per_s"] for row in rows) / per_sm

    def tensor_rate_vs_busy_sms(self) -> None:
        """One compute-bound tile per busy SM (`BUSY_SM_CONFIGS`; a bf16 product [tiles · block_m,
        block_n, busy_sm_k], one wave) on a fraction of the SMs, up to all of them: the MMA rate per
        busy SM, and the SM clock NVML reads meanwhile. The model's rates were measured with every SM
        busy; a partial wave ran 0.85-0.93x its predicted time on the H200 (2026-12-06), and this
        measures how the rate per SM depends on how many are busy (`Hardware.busy_sm_rates`)."""
        from jtblas.config import Problem
        from jtblas.torch_launch import LaunchOperands, kernel_launcher

        torch = self.torch
        config = BUSY_SM_CONFIGS[self.capability >= (9, 0)]
        k = self.plan.busy_sm_k
        busy_counts = sorted({max(1, round(f * self.sm_count)) for f in self.plan.busy_sm_fractions})
        b = torch.randn(k, config.block_n, device="cuda", dtype=torch.bfloat16)
        a_all = torch.randn(config.block_m * self.sm_count, k, device="cuda", dtype=torch.bfloat16)
        c_all = torch.empty(config.block_m * self.sm_count, config.block_n, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()  # the timer runs on its own stream: the data must be there first
        rows = []
        for busy in busy_counts:
            m = config.block_m * busy
            problem = Problem(m=m, n=config.block_n, k=k, dtype="bfloat16", out_dtype="bfloat16")
            operands = LaunchOperands(a=[a_all[:m]], b=[b], c=[c_all[:m]], torch=torch)
            launch = kernel_launcher(operands, problem, config)
            launch(0)  # compiles (once: M is not specialised)
            seconds, method = self._time(launch)
            clocks = self._sample_clock(functools.partial(launch, 0), seconds)
            rows.append(dict(busy_sms=busy, seconds=seconds, flops_per_s=problem.flops / seconds,
                             flops_per_s_per_sm=problem.flops / seconds / busy,
                             clock_hz=statistics.median(clocks) if clocks else None, method=method))
        full = rows[-1]["flops_per_s_per_sm"]
        for row in rows:
            row["rate_over_all_busy"] = row["flops_per_s_per_sm"] / full
        self.measured["tensor_rate_vs_busy_sms"] = dict(config=config.short(), k=k, rows=rows)

    def split_sum(self) -> None:
        """The split-K (and K-phase) sum kernel alone, as `jtblas.matmul` launches it
        (`launch_specs.sum_splits_spec`): fp32 partials [s, M, N] summed and cast to bf16, for s in
        SPLIT_SUM_SPLITS, against the model's `cost.reduction_seconds` on the built-in description.
        K-phase and split-K plans ran 1.1-1.6x their prediction (H200 record of 2026-12-06); this
        says how much of that is the sum's. Recorded only; the model is unchanged by it."""
        from jtblas.config import Problem
        from jtblas.kernels.reduce import sum_splits_kernel
        from jtblas.launch_specs import sum_splits_spec
        from jtblas.model import cost

        torch = self.torch
        m = n = SPLIT_SUM_SIZE
        rows = []
        for splits in SPLIT_SUM_SPLITS:
            problem = Problem(m=m, n=n, k=64 * splits, dtype="bfloat16", out_dtype="bfloat16")
            config = Config(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3, split_k=splits)
            spec = sum_splits_spec(problem, config, hw=self.base)
            # Two workspaces in turn: a launch never finds the previous one's partials in L2.
            partials = [torch.rand(splits, m, n, device="cuda", dtype=torch.float32) for _ in range(2)]
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            torch.cuda.synchronize()  # the timer runs on its own stream: the data must be there first
            kernel = sum_splits_kernel[spec.grid]

            def launch(i: int, kernel=kernel, spec=spec, partials=partials, out=out):
                return kernel(partials[i], *spec.scalars, out, num_warps=spec.num_warps,
                              num_stages=spec.num_stages, **spec.metaparams)

            seconds, method = self._time(launch, 2)
            predicted = cost.reduction_seconds(problem, splits, self.base)
            moved = m * n * (splits * FP32 + BF16)
            rows.append(dict(splits=splits, m=m, n=n, bytes=moved, seconds=seconds, bytes_per_s=moved / seconds,
                             predicted_seconds=predicted, measured_over_predicted=seconds / predicted,
                             method=f"sum_splits_kernel, BLOCK {spec.metaparams['BLOCK']}, "
                                    f"{spec.num_warps} warps; {method}"))
            del partials, out
        self.measured["split_sum"] = rows

    def _time_product(self, problem, config: Config) -> tuple[float, str]:
        """(seconds, method) of our kernel on fresh random operands of `problem` (A [M, K] or
        [K, M], B [K, N] or [N, K], as its transposes say, in its dtype) with `config`, launched
        as `jtblas.matmul` launches it."""
        from jtblas.torch_launch import LaunchOperands, kernel_launcher

        torch = self.torch
        dtype = getattr(torch, problem.dtype)
        m, n, k = problem.m, problem.n, problem.k
        a_shape = (k, m) if problem.transpose_a else (m, k)
        b_shape = (n, k) if problem.transpose_b else (k, n)
        operands = LaunchOperands(a=[torch.randn(*a_shape, device="cuda", dtype=dtype)],
                                  b=[torch.randn(*b_shape, device="cuda", dtype=dtype)],
                                  c=[torch.empty(m, n, device="cuda", dtype=dtype)], torch=torch)
        launch = kernel_launcher(operands, problem, config)
        launch(0)  # compiles
        torch.cuda.synchronize()  # the timer runs on its own stream: the data must be there first
        return self._time(launch)

    def narrow_copies(self) -> None:
        """`NARROW_COPY_CONFIG` with each of `NARROW_COPY_STAGES` on fp32 products [64, K] x [K, N]
        for each N of `NARROW_COPY_COLUMNS` (B's rows 4-, 8- and 16-byte aligned; K 4096, 1024
        quick), then `NARROW_COPY_CONTRASTS`, each against the model's prediction on the built-in
        description. The model prices a 4- or 8-byte copy as its share of the load port, pipelined
        like a 16-byte one; on an H100 through JAX (2026-12-07) fp32 lm heads of 1-16 tokens over
        32001 words ran 2.4x their prediction on tiles of 64 four-byte copies per thread
        (`benchmarks/results/2026-12-07-h100-program-start/`), and this step's rows 1.3-2.8x, the
        16-byte-aligned ones 2.1x (`benchmarks/results/2026-12-07-h100-whole-corpus/`). Recorded
        only."""
        from jtblas.config import Problem

        m, k = 64, 1024 if self.plan.quick else 4096
        runs = [(dataclasses.replace(NARROW_COPY_CONFIG, num_stages=stages), n, False)
                for stages in NARROW_COPY_STAGES for n in NARROW_COPY_COLUMNS]
        runs += [(config, NARROW_COPY_COLUMNS[-1], transpose_b) for transpose_b, config in NARROW_COPY_CONTRASTS]
        rows = []
        for config, n, transpose_b in runs:
            problem = Problem(m=m, n=n, k=k, dtype="float32", out_dtype="float32", transpose_b=transpose_b)
            rows.append(self._narrow_copy_row(problem, config))
        self.measured["narrow_copies"] = dict(m=m, rows=rows)

    def _narrow_copy_row(self, problem, config: Config) -> dict:
        """One `narrow_copies` row: `problem` with `config`, timed, against the model."""
        from jtblas.model import cost, resources

        seconds, method = self._time_product(problem, config)
        predicted = cost.estimate(config, problem, self.base).predicted_seconds
        return dict(config=config.short(), n=problem.n, k=problem.k,
                    b_layout="[N, K]" if problem.transpose_b else "[K, N]",
                    mma="wgmma" if resources.uses_wgmma(config, problem, self.base) else "mma.sync",
                    b_vector_bytes=int(resources.plain_load_bytes(problem, "b", config.block_k)), seconds=seconds,
                    predicted_seconds=predicted, measured_over_predicted=seconds / predicted,
                    b_bytes_per_s=problem.k * problem.n * problem.b_bytes / seconds, method=method)

    def tile_cost(self) -> None:
        """What each further tile on an SM costs: `TILE_COST_CONFIG` (and its TMA twin on Hopper) on
        bf16 products of `TILE_COST_TILES` tiles per SM (a `tile_grid` of tiles · SMs), K in
        `TILE_COST_K`; the slope of the time over tiles per SM against the slope of the model's
        prediction on the built-in description. On an H100 through JAX (2026-12-07) the pointer
        kernel ran 0.33-0.40 µs a tile above the model at K ≤ 256 (each tile a program that starts
        cold) and below it at K ≥ 768 (its four stages beat the latency bound). Recorded only."""
        from jtblas.config import Problem
        from jtblas.model import cost

        configs = [TILE_COST_CONFIG] + ([dataclasses.replace(TILE_COST_CONFIG, tma=True)] if self.base.tma else [])
        rows = []
        for config in configs:
            for k in TILE_COST_K:
                timed = []
                for tiles in TILE_COST_TILES:
                    grid_rows, grid_columns = tile_grid(tiles * self.sm_count)
                    m, n = config.block_m * grid_rows, config.block_n * grid_columns
                    problem = Problem(m=m, n=n, k=k, dtype="bfloat16", out_dtype="bfloat16")
                    seconds, method = self._time_product(problem, config)
                    estimate = cost.estimate(config, problem, self.base)
                    timed.append(dict(tiles_per_sm=tiles, m=m, n=n, seconds=seconds,
                                      predicted_seconds=estimate.predicted_seconds, bound=estimate.bound,
                                      method=method))
                first, last = timed[0], timed[-1]
                spread = last["tiles_per_sm"] - first["tiles_per_sm"]
                per_tile = (last["seconds"] - first["seconds"]) / spread
                predicted = (last["predicted_seconds"] - first["predicted_seconds"]) / spread
                rows.append(dict(config=config.short(), k=k, seconds_per_tile=per_tile,
                                 predicted_seconds_per_tile=predicted, rows=timed))
        self.measured["tile_cost"] = rows

    # --- the run ----------------------------------------------------------------------------

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        return [
            ("DRAM copy", self.dram_copy),
            ("bf16 GEMM", lambda: self.gemm("bfloat16")),
            ("fp16 GEMM", lambda: self.gemm("float16")),
            ("tf32 GEMM", lambda: self.gemm("tf32")),
            ("fp32 GEMM", lambda: self.gemm("fp32")),
            ("launch overhead", self.launch),
            ("launch through jax.jit", self.jax_launch),
            ("L2 read", self.l2_read),
            ("L2 through our GEMM", self.l2_gemm),
            ("DRAM read vs bytes in flight", self.dram_read_vs_inflight),
            ("L2 read vs bytes in flight", self.l2_read_vs_inflight),
            ("one-SM read", self.single_sm_read),
            ("DRAM read vs active SMs", self.dram_read_vs_sms),
            ("tensor cores vs busy SMs", self.tensor_rate_vs_busy_sms),
            ("split-K sum", self.split_sum),
            ("time per further tile", self.tile_cost),
            ("4- and 8-byte copies", self.narrow_copies),
        ]

    def run(self) -> dict[str, Any]:
        """Runs every step (a failing step is recorded under `errors` and its fields keep their
        built-in values) and returns the profile dict (validated)."""
        started = time.perf_counter()
        steps = self.steps()
        progress = _Progress(len(steps), self.progress, self.stream)
        try:
            for name, step in steps:
                progress.start(name)
                try:
                    step()
                except Exception as error:  # noqa: BLE001 - one broken step must not lose the others
                    self.errors[name] = f"{type(error).__name__}: {error}"
                    print(f"jtblas calibrate: {name} failed ({self.errors[name]}); keeping the built-in value",
                          file=self.stream, flush=True)
                progress.finish()
        finally:
            progress.close()
            self.torch.cuda.synchronize()
        self.measured["seconds"] = time.perf_counter() - started
        import triton

        return derive.profile(
            self.measured, device=self.device, driver=profiles.driver_version(), base=self.base,
            sm_count=self.sm_count, described=self.described(), fit_constants=self.fit_constants,
            quick=self.plan.quick, errors=self.errors,
            software=dict(torch=self.torch.__version__, cuda=str(self.torch.version.cuda),
                          triton=triton.__version__),
        )

    def described(self) -> dict[str, Any]:
        """The Hardware fields the driver gives for a GPU without a built-in description (its
        structure: name, compute capability, L2 size, shared memory, registers, threads); none
        for a known GPU, whose structure is its built-in's."""
        if self.known_device:
            return {}
        props = self.props
        fields: dict[str, Any] = dict(name=profiles.slug(self.device), full_name=self.device,
                                      compute_capability=list(self.capability), wgmma=self.capability[0] == 9)
        for field, attribute in (("l2_bytes", "L2_cache_size"),
                                 ("smem_per_sm", "shared_memory_per_multiprocessor"),
                                 ("smem_per_block", "shared_memory_per_block_optin"),
                                 ("regs_per_sm", "regs_per_multiprocessor"),
                                 ("max_threads_per_sm", "max_threads_per_multi_processor")):
            value = getattr(props, attribute, None)
            if isinstance(value, int) and value > 0:
                fields[field] = value
        return fields


def _check_triton_compiles() -> None:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("TRITON_INTERPRET is set: Triton kernels would run in the CPU interpreter")


__all__ = ["BUSY_SM_CONFIGS", "Calibration", "L2_GEMM_CONFIGS", "MeasurementPlan", "NARROW_COPY_COLUMNS",
           "NARROW_COPY_CONFIG", "NARROW_COPY_CONTRASTS", "NARROW_COPY_STAGES", "NO_GPU", "SPLIT_SUM_SIZE",
           "SPLIT_SUM_SPLITS", "find_gpu", "latency_knee"]
