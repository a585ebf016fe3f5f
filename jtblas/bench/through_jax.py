"""The benchmark of record: `jtblas.matmul` under `jax.jit` beside XLA's dot, on one GPU.

Each distinct product (M, N, K, layout, dtype) of the chosen shape rows is timed once, however
many model families share it: both contenders in the same slope loop (`jax_loop`), on the same
operand sets, compiled once each, then timed in `rounds` rounds in turn (the order reversed every
other round; one slope moves by a few % between runs), the median of the rounds kept. The record
also holds the model's plan, the first-call time (selection + compile + first run) and the
relative difference of the two results. Needs JAX with a GPU only (no torch).
"""

from __future__ import annotations

import concurrent.futures
import datetime
import hashlib
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from jtblas.bench import jax_loop
from jtblas.bench.shapes import Shape
from jtblas.config import Problem

# Rough rates that size the slope loop before anything is timed (bf16 on an H200: ~700 TFLOP/s
# dense, ~3.5 TB/s streamed); the loop's length only needs to be within a factor of a few.
ESTIMATE_FLOPS = 700e12
ESTIMATE_BYTES_PER_S = 3.5e12
# A result further than this from XLA's (relative Frobenius norm, both bf16-rounded) is an error.
MAX_REL_DIFF = 3e-2
CONTENDERS = ("jtblas", "xla")


def estimate_seconds(shape: Shape) -> float:
    return max(shape.flops / ESTIMATE_FLOPS, shape.bytes_moved / ESTIMATE_BYTES_PER_S, 2e-6)


def unique_products(rows: Sequence[Shape]) -> list[list[Shape]]:
    """Rows grouped by `Shape.key()` (one timing each), quick rows' products first, then the rest
    in turn across families, so a run cut short by its budget still covers every family."""
    groups: dict[str, list[Shape]] = {}
    for row in rows:
        groups.setdefault(row.key(), []).append(row)
    first = [g for g in groups.values() if any(r.quick for r in g)]
    by_family: dict[str, list[list[Shape]]] = {}
    for g in groups.values():
        if not any(r.quick for r in g):
            by_family.setdefault(g[0].family, []).append(g)
    rest = [g for batch in itertools.zip_longest(*by_family.values()) for g in batch if g is not None]
    return first + rest


def plan_of(shape: Shape, hardware, problem: Problem | None = None) -> dict:
    """The model's plan as `jtblas.matmul` runs it: config, repacking, predicted time; of
    `problem` where given (the shape's product with an epilogue, say), else of the shape's."""
    from jtblas import model

    start = time.perf_counter()
    plan = model.plan_for_problem(problem or shape.problem(), hardware)
    select_s = time.perf_counter() - start
    copies = plan.copies
    return dict(config=plan.config.short(), repack=copies or None, predicted_s=plan.predicted_seconds,
                select_s=select_s, reason=plan.reason)


def time_product(rows: list[Shape], *, l2_bytes: int, hardware, rounds: int = 3, trials: int = 5,
                 target_s: float = 4e-3, dots: dict[str, Callable] | None = None,
                 problem: Problem | None = None) -> dict:
    """One product's record: both contenders through JAX, in the same loop and rounds.

    `dots` maps contender names to `dot(a, b)` functions (default: jtblas.matmul and XLA's dot);
    `target_s` is the loop's length at R products (seconds); `problem` the one the jtblas
    contender runs, for the recorded plan, where it is not the shape's own (an epilogue).
    """

    shape = rows[0]
    record = dict(
        key=shape.key(), names=[r.name for r in rows],
        rows=[dict(name=r.name, family=r.family, regime=r.regime) for r in rows],
        families=sorted({r.family for r in rows}),
        regimes=sorted({r.regime for r in rows}), sets=sorted({r.set for r in rows}),
        M=shape.m, N=shape.n, K=shape.k, batch=shape.batch, layout=shape.layout, dtype=shape.dtype, flops=shape.flops,
        bytes=shape.bytes_moved, contenders={},
    )
    try:
        record["plan"] = plan_of(shape, hardware, problem)
    except Exception as error:  # noqa: BLE001 - the JAX call below then reports the same error
        record["plan"] = dict(error=_short_error(error))
    dots = dots or dict(jtblas=jax_loop.jtblas_dot(shape), xla=jax_loop.xla_dot(shape))
    sets = jax_loop.operand_sets(shape.bytes_moved, l2_bytes)
    record["operand_sets"] = sets
    try:
        as_, bs = jax_loop.operands(shape, sets)
    except Exception as error:  # noqa: BLE001 - e.g. out of memory: nothing can run
        record["error"] = _short_error(error)
        return record
    timers = {}
    try:
        # Both loops compile at once (no timing runs meanwhile; XLA autotunes on the GPU while
        # Triton compiles on the CPU): about a third less wall time per product.
        with concurrent.futures.ThreadPoolExecutor(len(dots)) as pool:
            futures = {name: pool.submit(_timer, dot, as_, bs, estimate_seconds(shape), target_s)
                       for name, dot in dots.items()}
        for name, future in futures.items():
            try:
                timers[name], first_call_s = future.result()
            except Exception as error:  # noqa: BLE001 - one contender failing must not end the run
                record["contenders"][name] = dict(error=_short_error(error))
                continue
            record["contenders"][name] = dict(compile_s=timers[name].compile_s, first_run_s=timers[name].first_run_s,
                                              first_call_s=first_call_s)
        if "jtblas" in timers and "select_s" in record.get("plan", {}):
            record["contenders"]["jtblas"]["first_call_s"] += record["plan"]["select_s"]
        if len(timers) == 2:
            record["rel_diff"] = _rel_diff(*(t.outputs()[0] for t in timers.values()))
        samples = {name: [] for name in timers}
        for index in range(max(1, rounds)):
            order = list(timers) if index % 2 == 0 else list(reversed(timers))
            for name in order:
                if name not in samples:
                    continue
                try:
                    samples[name].append(timers[name].measure(trials))
                except Exception as error:  # noqa: BLE001
                    record["contenders"][name] = dict(error=_short_error(error))
                    del samples[name]
        for name, taken in samples.items():
            seconds = [t["seconds"] for t in taken]
            record["contenders"][name].update(
                seconds=statistics.median(seconds), round_seconds=seconds, fixed_s=taken[-1]["fixed_s"],
                products=taken[-1]["products"],
                method=timers[name].method(trials) + f"; median of {len(seconds)} rounds in turn with "
                f"{sorted(samples)}")
    finally:
        del as_, bs, timers
    ours, xla = (record["contenders"].get(n, {}).get("seconds") for n in CONTENDERS)
    if ours and xla and ours > 0 and xla > 0:
        record["speedup"] = xla / ours  # jtblas ÷ XLA in speed: > 1 when jtblas is faster
    if record.get("rel_diff") is not None and not record["rel_diff"] <= MAX_REL_DIFF:
        record["error"] = f"jtblas and XLA results differ by {record['rel_diff']:.3g} (relative norm)"
    return record


def _timer(dot, as_, bs, estimate_s: float, target_s: float) -> tuple[jax_loop.SlopeTimer, float]:
    """(the compiled slope loop, seconds to compile and first run it)."""
    start = time.perf_counter()
    timer = jax_loop.SlopeTimer(dot, as_, bs, estimate_s=estimate_s, target_s=target_s)
    return timer, time.perf_counter() - start


def _rel_diff(x, y, rows: int = 256) -> float:
    """Relative Frobenius norm of x − y over the first `rows` rows (on the host, in float64)."""
    import numpy as np

    x, y = (np.asarray(v[:rows]).astype(np.float64) for v in (x, y))
    return float(np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-300))


def _short_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:400]


def versions() -> dict:
    """Installed versions of what the numbers depend on (None where absent)."""
    from importlib import metadata

    out = {}
    for name in ("jax", "jaxlib", "triton", "jax-triton", "flax", "optax", "numpy", "torch", "jtblas"):
        try:
            out[name] = metadata.version(name)
        except Exception:  # noqa: BLE001
            out[name] = None
    return out


def source_commit() -> str | None:
    """The git commit of the jtblas source that runs (with "+dirty" for uncommitted changes), or
    None outside a git checkout: an installed wheel's version does not name the code measured."""
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
                                "jtblas"], capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


def source_digest(package: Path | None = None) -> str:
    """The first 16 hex digits of a SHA-256 over the Python files of `package` (default: the
    running jtblas package; each path relative to it, then its bytes, in path order). It names the
    code measured where the commit cannot: an installed wheel, or a copied tree whose .git is not
    the tree's own (on 2026-12-05 a GPU machine's copy reported a commit three days older than the
    code it ran). Compare: `python -c "from jtblas.bench.through_jax import source_digest;
    print(source_digest())"`."""
    package = Path(package) if package is not None else Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def meta(rounds: int, trials: int) -> dict:
    """Where and how: date, device, versions, the method in words."""
    import jax

    device = jax.devices()[0]
    return dict(
        date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), device=device.device_kind,
        platform=device.platform, host=platform.node(), python=platform.python_version(), versions=versions(),
        source_commit=source_commit(), source_sha256=source_digest(), argv=sys.argv, rounds=rounds, trials=trials,
        method=("jtblas.matmul (config=None: the model's whole plan, through jax-triton) and "
                "lax.dot_general (XLA, autotuned as it compiles) in the same jitted fori_loop: slope "
                "(t(2R)-t(R))/R with a traced trip count (one compile each, the two compiled at once), "
                "operand sets rotated past 2.5x L2, every product a loop output; "
                f"median of {trials} per R, {rounds} rounds in turn, median of the rounds"),
    )


def run(rows: Sequence[Shape], out: str | os.PathLike, *, rounds: int = 3, trials: int = 5,
        time_budget: float | None = None, resume: str | None = None, target_s: float = 4e-3,
        l2_bytes: int | None = None, log=print) -> dict:
    """Times every distinct product of `rows` and writes `out/results.json` after each one (a
    killed run keeps what it finished); returns the results. `time_budget` (seconds) stops
    starting new products once spent; `resume` keeps the products of an earlier results file;
    `l2_bytes` (default: the detected GPU's) sizes the operand rotation."""
    from jtblas import hardware

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    hw = hardware.detect()
    l2_bytes = hw.l2_bytes if l2_bytes is None else l2_bytes
    info = meta(rounds, trials)
    info.update(hardware_model=hw.name, l2_bytes=l2_bytes)
    records = []
    if resume:
        previous = json.loads(Path(resume).read_text())
        records = [r for r in previous.get("products", []) if not r.get("error")]
    done = {r["key"] for r in records}
    todo = [g for g in unique_products(rows) if g[0].key() not in done]
    info["rows"] = len(rows)
    info["products"] = len(todo) + len(done)
    log(f"jtblas bench: {len(todo)} products through JAX on {info['device']} ({len(rows)} shape rows)")
    start = time.monotonic()
    durations = []
    try:
        info["empty_iteration_s"] = jax_loop.empty_iteration_seconds()
    except Exception as error:  # noqa: BLE001
        info["empty_iteration_s"] = None
        log(f"jtblas bench: empty loop iteration not measured ({_short_error(error)})")
    for index, group in enumerate(todo):
        elapsed = time.monotonic() - start
        typical = statistics.median(durations) if durations else 0.0
        if time_budget is not None and elapsed + typical > time_budget:
            info["stopped"] = f"time budget {time_budget:.0f} s: {len(todo) - index} products not run"
            log(f"jtblas bench: stopped by the {info['stopped']}")
            break
        t = time.monotonic()
        record = time_product(group, l2_bytes=l2_bytes, hardware=hw, rounds=rounds, trials=trials,
                              target_s=target_s)
        durations.append(time.monotonic() - t)
        record["wall_s"] = durations[-1]
        records.append(record)
        _write(path, info, records)
        log(f"[{index + 1}/{len(todo)}] {elapsed:.0f}s {_line(record)}")
    info["elapsed_s"] = time.monotonic() - start
    return _write(path, info, records)


def _write(path: Path, info: dict, records: list[dict]) -> dict:
    payload = dict(meta=info, products=records)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    os.replace(tmp, path)
    return payload


def _line(record: dict) -> str:
    names = record["names"]
    parts = [record["key"], f"({names[0]}" + (f" +{len(names) - 1})" if len(names) > 1 else ")")]
    for name in CONTENDERS:
        entry = record["contenders"].get(name, {})
        if entry.get("seconds"):
            parts.append(f"{name} {entry['seconds'] * 1e6:.1f}us")
        elif entry.get("error"):
            parts.append(f"{name} ERROR {entry['error'][:120]}")
    if record.get("speedup"):
        parts.append(f"jtblas/XLA {record['speedup']:.2f}")
    if record.get("error"):
        parts.append(f"ERROR {record['error']}")
    plan = record.get("plan", {})
    parts.append(str(plan.get("config", "")) + (f" repack {plan['repack']}" if plan.get("repack") else ""))
    return " ".join(parts)
