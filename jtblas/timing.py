"""Device time per call, measured without Python dispatch in the number.

Two methods, each used where it is exact:

- `GraphTimer` (kernels launched on torch tensors: our Triton kernel, the oracle's candidates,
  cuBLAS through `torch.matmul`, copies): `n` launches are captured into one CUDA graph, the graph
  is replayed between two CUDA events, and the time is divided by `n`. The host issues one replay,
  so launch overhead (~5–20 µs per Triton launch from Python) cannot hide a 5 µs kernel; what
  remains is the GPU's own back-to-back launch gap (~1–2 µs), as in any real program.
- `slope_seconds` (anything run through JAX): a jitted function runs the op R times in a
  `fori_loop`; one call is timed with R and one with 2R iterations (wall clock, block_until_ready),
  and (t(2R) − t(R)) / R cancels every fixed cost of a call (dispatch ~30–280 µs, argument
  handling, the loop's set-up, the output allocation, the final synchronisation).

Both take the median of several trials. Every function here that touches a GPU imports torch or
JAX lazily, so the arithmetic is testable anywhere.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence


def slope_seconds(t_short: float, t_long: float, repeats: int) -> float:
    """Per-iteration time from t(R) = t_short and t(2R) = t_long: (t(2R) − t(R)) / R."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    return (t_long - t_short) / repeats


def measure_slope(
    run: Callable[[int], object],
    repeats: int,
    *,
    trials: int = 5,
    clock: Callable[[], float] = time.perf_counter,
) -> dict:
    """Times `run(repeats)` and `run(2 * repeats)` (each must block until the device is done),
    alternating, `trials` times each; returns the slope of the medians and the raw samples.

    `run(r)` executes the op `r` times in one call; the slope is the time of one execution.
    """
    short, long = [], []
    for _ in range(trials):
        for r, samples in ((repeats, short), (2 * repeats, long)):
            start = clock()
            run(r)
            samples.append(clock() - start)
    t_short, t_long = statistics.median(short), statistics.median(long)
    return dict(
        seconds=slope_seconds(t_short, t_long, repeats),
        repeats=repeats,
        t_short_s=t_short,
        t_long_s=t_long,
        fixed_s=2 * t_short - t_long,  # intercept: the per-call cost the slope removed
        samples_short_s=short,
        samples_long_s=long,
    )


def repeats_for(target_seconds: float, estimate_seconds: float, *, lo: int = 2, hi: int = 4096) -> int:
    """Loop count so that R iterations of an op estimated at `estimate_seconds` last about
    `target_seconds` (clamped to [lo, hi])."""
    if not estimate_seconds or estimate_seconds <= 0 or not math.isfinite(estimate_seconds):
        return hi
    return int(min(hi, max(lo, math.ceil(target_seconds / estimate_seconds))))


class GraphTimer:
    """Times `launch(i)` (one kernel launch using operand set i) with CUDA graphs and events.

    `time(launch, ...)` returns seconds per launch: warm-up launches, an event-timed estimate that
    sizes the graph (n launches ≈ `target_s`), capture, one warm replay, then the median over
    `replays` event-timed replays divided by n. If capture fails (a library that cannot be
    captured) it falls back to an event-timed loop of n launches, and says so in `last_method`.
    """

    def __init__(self, *, max_launches: int = 2000):
        import torch  # only on the GPU machine

        self.torch = torch
        self.max_launches = max_launches
        self.stream = torch.cuda.Stream()
        self.last_method = ""
        self.last_launches = 0

    def _events(self):
        torch = self.torch
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def _timed_loop(self, launch: Callable[[int], object], nbuf: int, count: int) -> float:
        """Seconds per launch of `count` launches between two events on the timer's stream."""
        with self.torch.cuda.stream(self.stream):
            start, end = self._events()
            start.record()
            for i in range(count):
                launch(i % nbuf)
            end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3 / count

    def estimate(self, launch: Callable[[int], object], nbuf: int, *, warmup: int = 2, count: int = 3) -> float:
        """Seconds per launch from an event-timed plain loop (an upper bound: includes launch gaps)."""
        with self.torch.cuda.stream(self.stream):
            for i in range(warmup):
                launch(i % nbuf)
        return self._timed_loop(launch, nbuf, count)

    def time(
        self,
        launch: Callable[[int], object],
        nbuf: int = 1,
        *,
        target_s: float = 1e-3,
        replays: int = 5,
        estimate_s: float | None = None,
    ) -> float:
        torch = self.torch
        if estimate_s is None:
            estimate_s = self.estimate(launch, nbuf)
        n = repeats_for(target_s, estimate_s, lo=1, hi=self.max_launches)
        self.last_launches = n
        try:
            graph = torch.cuda.CUDAGraph()
            # thread_local: only this thread's CUDA calls are restricted while capturing (JAX's
            # runtime threads live in the same process).
            with torch.cuda.graph(graph, stream=self.stream, capture_error_mode="thread_local"):
                for i in range(n):
                    launch(i % nbuf)
        except Exception:  # noqa: BLE001 - some launches cannot be captured; time them plainly
            torch.cuda.synchronize()
            return self._loop_time(launch, nbuf, n, replays)
        with torch.cuda.stream(self.stream):
            graph.replay()  # warm: first replay uploads the graph
            times = []
            for _ in range(replays):
                start, end = self._events()
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e-3 / n)
        del graph
        self.last_method = f"cuda-graph of {n} launches, median of {replays} replays"
        return statistics.median(times)

    def _loop_time(self, launch, nbuf, n, replays):
        times = [self._timed_loop(launch, nbuf, n) for _ in range(replays)]
        self.last_method = f"event-timed loop of {n} launches (graph capture failed), median of {replays}"
        return statistics.median(times)


def copy_bandwidth(timer: GraphTimer, *, nbytes: int = 256 << 20, nbuf: int = 1, warm_s: float = 0.0) -> dict:
    """Device-to-device copy bandwidth: `dst.copy_(src)` of `nbytes`, counted as read + write
    (2·nbytes per copy), the ceiling for a memory-bound GEMM. `nbuf` rotating buffer pairs keep
    a small copy from running out of L2 (as the GEMMs' operand sets do); `warm_s` seconds of
    copies first bring an idle GPU's clocks up. (256 MiB by default: on the H200 a 1 GiB copy
    read 2.77 TB/s, warm or cold, where 256 MiB and the GEMMs' own streaming reached 4.2.)"""
    torch = timer.torch
    src = [torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda") for _ in range(nbuf)]
    dst = [torch.empty_like(x) for x in src]
    launch = lambda i: dst[i].copy_(src[i])
    start = time.perf_counter()
    while time.perf_counter() - start < warm_s:
        for i in range(nbuf):
            launch(i)
        torch.cuda.synchronize()
    seconds = timer.time(launch, nbuf, target_s=20e-3, replays=10)
    return dict(bytes=nbytes, seconds=seconds, bytes_per_s=2 * nbytes / seconds, method=timer.last_method)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)
