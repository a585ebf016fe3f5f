"""One product timed as a JAX user runs it: device time per call of a jitted `dot(a, b)`.

The method (checked against CUPTI kernel durations by `benchmarks/kernel_time_check.py`; the
check is in BENCHMARKS.md): one jitted function runs
the product `trips · unroll` times in a `lax.fori_loop` whose trip count is an argument, so one
compiled program serves two loop lengths R and 2R, and the slope (t(2R) − t(R)) / R cancels every
fixed cost of a call (dispatch, ~30–280 µs; argument handling; the final synchronisation). Each
iteration runs the product once on each of several operand sets, rotated so that the sets
cover 2.5× the L2: every call reads its operands from DRAM, as in a model, not from a hot L2.
jtblas and XLA run in the same loop body, compiled the same way, timed in the same rounds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from jtblas.timing import measure_slope

# Operand sets rotate so that the bytes touched per cycle exceed the L2 this many times over.
L2_ROTATION_FACTOR = 2.5
MAX_OPERAND_SETS = 16
# Products per loop body (unrolled iterations × operand sets), at most. On the H200 one iteration
# of XLA's while loop costs 16-25 µs of its own (a device-to-host check of the loop condition,
# measured 2026-11-30), which the slope charges to every product; with 16 products per body it is
# paid once per 16. A body of 16 iterations × 16 operand sets took XLA up to 11.6 s to compile; the
# unroll shrinks as the sets grow instead.
LOOP_UNROLL = 16
# A body this long (seconds) already makes that per-iteration cost ≤ 1% of it (25 µs / 2.5 ms):
# products of milliseconds need no unrolling, and a short loop keeps their timing short (on
# 2026-12-02 the 90 products over 1 ms took 70% of the corpus's timing at 16 per body).
BODY_TARGET_S = 2.5e-3


def operand_sets(set_bytes: int, l2_bytes: int, *, limit: int = MAX_OPERAND_SETS) -> int:
    """How many operand sets to rotate through: enough that they cover L2_ROTATION_FACTOR × L2."""
    if set_bytes <= 0:
        return 1
    return int(max(1, min(limit, math.ceil(L2_ROTATION_FACTOR * l2_bytes / set_bytes))))


def loop_unroll(sets: int, estimate_s: float = 0.0) -> int:
    """Iterations unrolled into one loop body: enough for LOOP_UNROLL products, or fewer where
    `sets` products of `estimate_s` seconds each already last BODY_TARGET_S."""
    most = max(1, -(-LOOP_UNROLL // sets))
    if estimate_s <= 0:
        return most
    return int(min(most, max(1, math.ceil(BODY_TARGET_S / (sets * estimate_s)))))


def dimension_numbers(shape) -> tuple:
    """`dot_general` dimension numbers contracting the stored layouts directly (no explicit
    transpose); a batched shape's operands are [batch, ., .] with batch dimension 0."""
    batched = shape.batch > 1
    ca = (0 if shape.transpose_a else 1) + batched
    cb = (1 if shape.transpose_b else 0) + batched
    return ((ca,), (cb,)), (((0,), (0,)) if batched else ((), ()))


def xla_dot(shape) -> Callable:
    """`lax.dot_general` on the stored layouts (`dimension_numbers`)."""
    import jax
    import jax.numpy as jnp

    dims = dimension_numbers(shape)
    out = jnp.dtype(shape.dtype)
    precision = _precision(shape)

    def dot(a, b):
        return jax.lax.dot_general(a, b, dims, precision=precision, preferred_element_type=out)

    return dot


def _precision(shape):
    """The JAX `precision` of the shape's input precision: None (the default) or HIGHEST ("ieee")."""
    import jax

    return jax.lax.Precision.HIGHEST if shape.precision == "ieee" else None


def jtblas_dot(shape, config=None) -> Callable:
    """`jtblas.matmul` on the stored layouts; `config=None` runs the model's whole plan (what a
    user's call runs, repacking included). A batched shape runs `jtblas.dot_general` with
    XLA's dimension numbers, or with a `config` `jtblas.matmul` under `jax.vmap` (either is one
    launch over the batch)."""
    import jax

    import jtblas

    precision = _precision(shape)
    if shape.batch > 1 and config is None:
        dims = dimension_numbers(shape)
        return lambda a, b: jtblas.dot_general(a, b, dims, precision=precision)

    def dot(a, b):
        return jtblas.matmul(a, b, transpose_a=shape.transpose_a, transpose_b=shape.transpose_b, precision=precision,
                             config=config)

    return jax.vmap(dot) if shape.batch > 1 else dot


def loop_function(dot: Callable, unroll: int) -> Callable:
    """f(as_, bs, trips) → outputs: `trips · unroll` iterations, each running `dot` once on every
    operand set. XLA can neither hoist nor merge the dots: each iteration writes tanh(C[0, 0])
    into A[0, 0] and B[0, 0] (in-place one-element updates of the loop-carried A and B), so the
    next iteration's product depends on this one's, and neither operand is loop-invariant: what a
    product does to an operand before its kernel (jtblas's padded or transposed copy of B, a
    layout change of XLA's) runs in every iteration, as in a training step whose weights change,
    instead of being hoisted out of the loop once. Every C of every iteration in the body is a loop
    output: were only the last one's carried, XLA would compute just C[0, 0] of the others' split-K
    reductions (it pushes the slice into the reduce fusion)."""
    import jax
    import jax.numpy as jnp

    def chained(x, value):
        return x.at[(0,) * x.ndim].set(value.astype(x.dtype))

    def f(as_, bs, trips):
        def iteration(as_, bs):
            new_as, new_bs, cs = [], [], []
            for a, b in zip(as_, bs):
                c = dot(a, b)
                first_c = jnp.tanh(c[(0,) * c.ndim].astype(jnp.float32))
                new_as.append(chained(a, first_c))
                new_bs.append(chained(b, first_c))
                cs.append(c)
            return new_as, new_bs, cs

        def body(_, carry):
            as_, bs, _ = carry
            outputs = []
            for _ in range(unroll):
                as_, bs, cs = iteration(as_, bs)
                outputs.append(cs)
            return as_, bs, outputs

        shapes = [jax.eval_shape(dot, a, b) for a, b in zip(as_, bs)]
        outputs = [[jnp.zeros(c.shape, c.dtype) for c in shapes] for _ in range(unroll)]
        _, _, outputs = jax.lax.fori_loop(0, trips, body, (list(as_), list(bs), outputs))
        return outputs

    return f


def operands(shape, sets: int, seed: int = 0) -> tuple[list, list]:
    """`sets` seeded random (A, B) pairs in the shape's stored layouts and dtype (each with a
    leading batch axis for a batched shape), on the device."""
    import jax
    import jax.numpy as jnp

    dtype = jnp.dtype(shape.dtype)
    a_shape = (shape.k, shape.m) if shape.transpose_a else (shape.m, shape.k)
    b_shape = (shape.n, shape.k) if shape.transpose_b else (shape.k, shape.n)
    if shape.batch > 1:
        a_shape, b_shape = (shape.batch, *a_shape), (shape.batch, *b_shape)
    keys = jax.random.split(jax.random.key(seed), 2 * sets)
    as_ = [jax.random.normal(keys[2 * i], a_shape, dtype) for i in range(sets)]
    bs = [jax.random.normal(keys[2 * i + 1], b_shape, dtype) for i in range(sets)]
    jax.block_until_ready((as_, bs))
    return as_, bs


class SlopeTimer:
    """The slope loop of one `dot`, compiled once: `measure(trials)` → seconds per product.

    R (products per call = trips · unroll · sets) is sized from `estimate_s` so that R products
    last about `target_s`; the call with 2R products runs the same compiled program.
    """

    def __init__(self, dot: Callable, as_: list, bs: list, *, estimate_s: float, target_s: float = 4e-3):
        import jax
        import jax.numpy as jnp

        self.sets = len(as_)
        self.unroll = loop_unroll(self.sets, estimate_s)
        per_trip = max(estimate_s, 1e-7) * self.sets * self.unroll
        self.trips = int(min(256, max(1, math.ceil(target_s / per_trip))))
        self.products = self.trips * self.unroll * self.sets
        self._args = (as_, bs)
        start = time.perf_counter()
        self._compiled = jax.jit(loop_function(dot, self.unroll)).lower(as_, bs, jnp.int32(1)).compile()
        self.compile_s = time.perf_counter() - start
        self._trip_counts = {n: jnp.int32(n) for n in (self.trips, 2 * self.trips)}
        start = time.perf_counter()
        jax.block_until_ready(self._compiled(as_, bs, self._trip_counts[self.trips]))  # loads kernels
        self.first_run_s = time.perf_counter() - start

    def _run(self, products: int) -> None:
        import jax

        trips = products // (self.unroll * self.sets)
        jax.block_until_ready(self._compiled(*self._args, self._trip_counts[trips]))

    def measure(self, trials: int = 5) -> dict:
        result = measure_slope(self._run, self.products, trials=trials)
        return dict(
            seconds=result["seconds"], t_short_s=result["t_short_s"], t_long_s=result["t_long_s"],
            fixed_s=result["fixed_s"], products=self.products,
        )

    def outputs(self) -> list:
        """The products of one trip on every operand set (the last unrolled iteration's)."""
        import jax.numpy as jnp

        return self._compiled(*self._args, jnp.int32(1))[-1]

    def method(self, trials: int) -> str:
        return (f"slope (t(2R)-t(R))/R of one jitted fori_loop with a traced trip count, R={self.products} "
                f"products ({self.sets} operand set(s), {self.unroll} unrolled per trip), median of {trials}")


def empty_iteration_seconds(trials: int = 5) -> float:
    """Device time of one loop iteration with the chaining update but no dot (1000 iterations
    against 2000): what the slope loop adds per product around the product itself."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((16, 16), jnp.bfloat16)

    def f(a, trips):
        def body(_, a):
            return a.at[0, 0].set(jnp.tanh(a[0, 1].astype(jnp.float32)).astype(a.dtype))

        return jax.lax.fori_loop(0, trips * LOOP_UNROLL, body, a)

    compiled = jax.jit(f).lower(a, jnp.int32(1)).compile()
    counts = {1000: jnp.int32(1000 // LOOP_UNROLL), 2000: jnp.int32(2000 // LOOP_UNROLL)}
    jax.block_until_ready(compiled(a, counts[1000]))
    run = lambda r: jax.block_until_ready(compiled(a, counts[r]))
    return measure_slope(run, 1000, trials=trials)["seconds"] * 1000 / (1000 // LOOP_UNROLL * LOOP_UNROLL)
