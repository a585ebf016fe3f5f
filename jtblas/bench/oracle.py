"""The exhaustive-search oracle: every config of `selection.candidates_as_stored()` timed on the GPU.

Compilation dominates a sweep, so it runs ahead in a pool of worker processes (spawn context,
one per CPU core) that call `matmul_kernel.warmup(...)`: that compiles without launching and
leaves the binary in Triton's on-disk cache (~/.triton/cache), which the parent then loads in
milliseconds. Triton specialises integer arguments on divisibility by 16 and on == 1 (and on
fitting in 32 bits), and our constexprs (EVEN_K, INDEX_64, ALIGN_*) depend on the shape too, so
compile jobs are deduplicated by (config, dtypes, launch constexprs, integer-argument pattern):
shapes that differ only in sizes with the same pattern share every binary.

Timing is serial in the parent (`search`): a cheap first pass over all candidates, then the best
few re-timed carefully, the same way the model's pick is timed. Results are cached in a JSON
file keyed by shape, dtype, layout, GPU name and a hash of the candidate list.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from jtblas.config import Config, Problem

FIRST_PASS_TARGET_S = 0.3e-3  # each first-pass measurement spans >= 0.3 ms of launches
CAREFUL_TARGET_S = 2e-3  # careful measurements span >= 2 ms, median of CAREFUL_REPLAYS
CAREFUL_REPLAYS = 7
CAREFUL_TOP = 5  # how many of the first pass's best are re-timed carefully
# Above this per-launch estimate a plain event-timed loop already measures kernel time (launch
# overhead hides behind the previous kernel), so the first pass skips graph capture.
NO_GRAPH_ABOVE_S = 0.2e-3


# --------------------------------------------------------------------------------------------
# Compile jobs
# --------------------------------------------------------------------------------------------


def _int_class(value: int) -> str:
    """How Triton specialises an integer argument: '1', 'd16' (divisible by 16), or plain;
    'i64' marks values that do not fit in int32."""
    if value == 1:
        return "1"
    tag = "d16" if value % 16 == 0 else "-"
    return tag + ("/i64" if not -(2**31) <= value < 2**31 else "")


def compile_key(problem: Problem, config: Config) -> tuple:
    """Identity of one compiled binary: shapes with the same key share it."""
    from jtblas.launch_specs import launch_spec

    spec = launch_spec(problem, config)
    return (
        problem.dtype, problem.out_dtype, config.tma, spec.num_warps, spec.num_stages,
        tuple(sorted(spec.metaparams.items())),
        tuple(_int_class(int(s)) for s in spec.scalars),
    )


def _compile_job(problem_kw: dict, config_kw: dict) -> dict:
    """Worker: compile (not launch) `matmul_kernel` (`matmul_tma_kernel` for a TMA config) for
    this problem and config."""
    start = time.perf_counter()
    try:
        import torch

        from jtblas.kernels.matmul import matmul_kernel
        from jtblas.kernels.matmul_tma import matmul_tma_kernel
        from jtblas.launch_specs import launch_spec

        problem, config = Problem(**problem_kw), Config(**config_kw)
        spec = launch_spec(problem, config)
        a_dtype = getattr(torch, problem.dtype)
        c_dtype = getattr(torch, problem.out_dtype)
        # A split-K product writes fp32 partials, then sum_splits_kernel casts them to C.
        partial_dtype = torch.float32 if config.split_k > 1 else c_dtype
        (matmul_tma_kernel if config.tma else matmul_kernel).warmup(
            a_dtype, a_dtype, *spec.scalars, partial_dtype, grid=spec.grid,
            num_warps=spec.num_warps, num_stages=spec.num_stages, **spec.metaparams,
        )
        if config.split_k > 1:
            from jtblas.kernels.reduce import sum_splits_kernel
            from jtblas.launch_specs import sum_splits_spec

            reduce = sum_splits_spec(problem, config)
            sum_splits_kernel.warmup(
                torch.float32, *reduce.scalars, c_dtype, grid=reduce.grid,
                num_warps=reduce.num_warps, num_stages=reduce.num_stages, **reduce.metaparams,
            )
        return dict(ok=True, seconds=time.perf_counter() - start, pid=os.getpid())
    except Exception as error:  # noqa: BLE001 - report it; the parent records the config as failed
        return dict(ok=False, seconds=time.perf_counter() - start, error=f"{type(error).__name__}: {error}"[:500])


def _worker_init() -> None:
    # Workers only compile: keep JAX (imported with jtblas) off the GPU.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


class Compiler:
    """Deduplicated compile jobs in a process pool; `wait` returns each job's result."""

    def __init__(self, workers: int | None = None):
        self.workers = workers or os.cpu_count() or 1
        self.pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_init,
        )
        self.futures: dict[tuple, concurrent.futures.Future] = {}
        self.submitted = 0

    def submit(self, problem: Problem, config: Config, key: tuple | None = None) -> tuple:
        """Queues a compile unless an identical binary is already queued; returns the job's key
        (`(compile_key(problem, config), config)`, computed here when not given)."""
        key = key or (compile_key(problem, config), config)
        if key not in self.futures:
            self.futures[key] = self.pool.submit(
                _compile_job, dataclasses.asdict(problem), dataclasses.asdict(config)
            )
            self.submitted += 1
        return key

    def result(self, key: tuple, deadline: float | None = None) -> dict:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return self.futures[key].result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            return dict(ok=False, seconds=0.0, error="compile not finished before the time budget", timeout=True)
        except Exception as error:  # noqa: BLE001 - a dead worker, for instance
            return dict(ok=False, seconds=0.0, error=f"{type(error).__name__}: {error}"[:500])

    def done_count(self) -> int:
        return sum(f.done() for f in self.futures.values())

    def shutdown(self) -> None:
        """Cancels queued jobs and ends the workers this pool started (by process id)."""
        processes = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            with contextlib.suppress(Exception):  # already gone
                process.terminate()


# --------------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------------


def order_by_new_work(items: list, keys_of, *, first: int = 0) -> list:
    """Greedy order: the first `first` items as given, then repeatedly the item needing the fewest
    compile jobs not already needed by the items before it (ties keep the given order). A run cut
    short by its time budget then covers as many shapes as the compile pool allows."""
    ordered = list(items[:first])
    seen = set()
    for item in ordered:
        seen |= keys_of(item)
    rest = list(items[first:])
    while rest:
        best = min(range(len(rest)), key=lambda i: (len(keys_of(rest[i]) - seen), i))
        item = rest.pop(best)
        seen |= keys_of(item)
        ordered.append(item)
    return ordered


def candidates_hash(candidates: Iterable[Config]) -> str:
    text = "\n".join(sorted(repr(c) for c in candidates))
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def cache_key(shape_key: str, gpu_name: str, cand_hash: str) -> str:
    return f"{shape_key}|{gpu_name}|{cand_hash}"


class OracleCache:
    """A JSON file {key: entry}; written atomically after every change."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path else None
        self.entries: dict[str, dict] = {}
        if self.path and self.path.exists():
            try:
                self.entries = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self.entries = {}

    def get(self, key: str) -> dict | None:
        return self.entries.get(key)

    def earlier(self, shape_key: str, gpu_name: str, candidates: list[Config]) -> dict | None:
        """An earlier search of this shape on this GPU over another candidate list (the space
        changed since), the one covering most of `candidates`, with its first pass cut to
        them; None if none covers any. Those first-pass times stand; only the candidates it
        lacks need timing."""
        wanted = {c.short() for c in candidates}
        best, best_rows = None, []
        for key, entry in self.entries.items():
            if not key.startswith(f"{shape_key}|{gpu_name}|"):
                continue
            rows = [row for row in entry.get("first", []) if row[0] in wanted]
            if len(rows) > len(best_rows):
                best, best_rows = entry, rows
        return None if best is None else {**best, "first": best_rows}

    def put(self, key: str, entry: dict) -> None:
        self.entries[key] = entry
        self.save()

    def save(self) -> None:
        if not self.path:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.entries, indent=1, sort_keys=True))
        os.replace(tmp, self.path)


def merge_caches(paths: list[Path], out: Path) -> None:
    """One cache holding every entry of `paths` (and of `out` if it exists); later files win."""
    merged = OracleCache(out)
    for path in paths:
        merged.entries.update(OracleCache(path).entries)
    merged.save()


# --------------------------------------------------------------------------------------------
# Search
# --------------------------------------------------------------------------------------------


def first_pass_time(timer, launch: Callable[[int], object], nbuf: int, best_so_far: float | None = None) -> float:
    """Cheap measurement. One warm launch, then one event-timed launch; a kernel that long
    (>= NO_GRAPH_ABOVE_S, where launch overhead is negligible) and over twice the best so far on
    two such launches is out of the race and keeps the smaller number; other long kernels get
    two more timed launches; short ones a CUDA graph of launches spanning FIRST_PASS_TARGET_S
    (one timed replay).

    The second look before ruling a config out: one event-timed launch now and then reads ten
    times its kernel (on the H200, 0.2 ms for a 19 µs decode product), and a config ruled out on
    such a reading never reaches the careful re-timing (the oracle would miss its best)."""
    single = timer.estimate(launch, nbuf, warmup=1, count=1)
    if single >= NO_GRAPH_ABOVE_S and best_so_far is not None and single > 2 * best_so_far:
        single = min(single, timer.estimate(launch, nbuf, warmup=0, count=1))
        if single > 2 * best_so_far:
            return single
    if single >= NO_GRAPH_ABOVE_S:
        return timer.estimate(launch, nbuf, warmup=0, count=2)
    return timer.time(launch, nbuf, target_s=FIRST_PASS_TARGET_S, replays=1, estimate_s=single)


def careful_time(timer, launch: Callable[[int], object], nbuf: int) -> float:
    """The measurement every reported number of our kernel uses (pick, oracle, peers)."""
    return timer.time(launch, nbuf, target_s=CAREFUL_TARGET_S, replays=CAREFUL_REPLAYS)


def search(
    candidates: list[Config],
    *,
    launcher: Callable[[Config], Callable[[int], object]],
    compiled: Callable[[Config], dict],
    timer,
    nbuf: int,
    deadline: float | None = None,
    top: int = CAREFUL_TOP,
    known: list[tuple[Config, float | None, str | None]] = (),
) -> dict:
    """Times every candidate once (first pass), re-times the best `top` carefully.

    Args:
      launcher: config → launch(i) on the shape's operands.
      compiled: config → its compile result (waits for the pool); failed compiles are skipped.
      deadline: `time.monotonic()` value after which the search stops (result marked incomplete).
      known: first-pass results of an earlier search of the same shape on the same GPU, taken
        as they are (the leaders among them are re-timed carefully like the rest).

    Returns a dict with `best` (config), `best_s`, `careful` {config: seconds}, `first` [(config,
    seconds or None, error or None)], `complete`, `errors`.
    """
    first: list[tuple[Config, float | None, str | None]] = list(known)
    complete = True
    for config in candidates:
        if deadline is not None and time.monotonic() > deadline:
            complete = False
            break
        result = compiled(config)
        if not result.get("ok"):
            first.append((config, None, result.get("error", "compile failed")))
            if result.get("timeout"):
                complete = False
                break
            continue
        try:
            best_so_far = min((t for _, t, _ in first if t is not None), default=None)
            first.append((config, first_pass_time(timer, launcher(config), nbuf, best_so_far), None))
        except Exception as error:  # noqa: BLE001 - e.g. out of shared memory at launch
            first.append((config, None, f"{type(error).__name__}: {error}"[:300]))
    timed = sorted((t, i) for i, (_, t, _) in enumerate(first) if t is not None)
    careful = {}
    for _, i in timed[:top]:
        config = first[i][0]
        try:
            careful[config] = careful_time(timer, launcher(config), nbuf)
        except Exception as error:  # noqa: BLE001
            first[i] = (config, None, f"{type(error).__name__}: {error}"[:300])
    best = min(careful, key=careful.get) if careful else None
    return dict(
        best=best, best_s=careful.get(best) if best else None, careful=careful, first=first,
        complete=complete, errors=sum(1 for _, t, _ in first if t is None),
    )


def rank_of(config: Config, first: list[tuple[Config, float | None, str | None]]) -> int | None:
    """1-based rank of `config` in the first pass (None if it was not timed)."""
    times = sorted(t for _, t, _ in first if t is not None)
    for c, t, _ in first:
        if c == config and t is not None:
            return 1 + times.index(t)
    return None


def finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)
