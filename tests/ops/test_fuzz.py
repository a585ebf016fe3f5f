"""Random products through the interpreter against float64: shapes, dtypes, layouts, configs,
batching and transformations drawn together, so that combinations nobody listed get run.

Each case comes from its own generator, seeded by (seed, case index): the seed is
`JTBLAS_FUZZ_SEED` (default `DEFAULT_SEED`), and a failure prints both, so

    JTBLAS_FUZZ_SEED=<seed> JTBLAS_FUZZ_ONLY=<index> pytest tests/ops/test_fuzz.py

replays one case. `JTBLAS_FUZZ_CASES` changes how many cases run (default `DEFAULT_CASES`).

The error measure is the GEMM error bound's: ‖result − reference‖ / ‖|A|·|B|‖ (Frobenius), under
the per-dtype tolerances of tests/reference.py. Divided by ‖A·B‖ instead, a case with one output
element and cancelling products (m = n = 1) fails by chance under tf32 rounding of the inputs.

Cost: Triton's interpreter runs each program in Python (about 25 ms per program on a 2-core
machine, 2026-12-04, whatever the block size), so a case costs about its number of programs; the
shapes stay small (1–40 per dimension, log-uniform) and forced configs are the candidates with
blocks of at most 64 (one tile covers most of these problems). 1,000 cases: 216 s of CPU time.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jtblas
from jtblas import operands, selection
from tests.reference import DTYPES, tolerance

DEFAULT_SEED = 20261204
DEFAULT_CASES = 1000
SEED = int(os.environ.get("JTBLAS_FUZZ_SEED", DEFAULT_SEED))
CASES = int(os.environ.get("JTBLAS_FUZZ_CASES", DEFAULT_CASES))
ONLY = os.environ.get("JTBLAS_FUZZ_ONLY")
CHUNK = 100  # cases per test item: progress in pytest's output, one report per chunk

MAX_SIZE = 40
MAX_FORCED_BLOCK = 64
BATCH_KINDS = ("none", "leading", "vmap_a", "vmap_both")
TRANSFORMS = ("jit", "grad")


@dataclasses.dataclass(frozen=True)
class Case:
    index: int
    m: int
    n: int
    k: int
    dtype: str
    transpose_a: bool
    transpose_b: bool
    config: jtblas.Config | None  # None: the model's pick
    batch_kind: str  # none; leading (a's leading dims fold into M); vmap_a; vmap_both
    batch: int
    transform: str  # jit, or grad (jit of the gradients of a weighted sum: the backward GEMMs)

    def describe(self) -> str:
        layout = "T" * self.transpose_a + "N" * (not self.transpose_a) + "T" * self.transpose_b + "N" * (
            not self.transpose_b)
        config = "model" if self.config is None else repr(self.config)
        batch = self.batch_kind if self.batch_kind == "none" else f"{self.batch_kind}x{self.batch}"
        return (f"case {self.index} (JTBLAS_FUZZ_SEED={SEED} JTBLAS_FUZZ_ONLY={self.index}): "
                f"{self.m}x{self.n}x{self.k} {layout} {self.dtype} {batch} {self.transform} config={config}")


@functools.cache
def _forced_configs(m: int, n: int, k: int, dtype: str, transpose_a: bool, transpose_b: bool) -> tuple:
    configs = selection.candidates_as_stored(m, n, k, dtype=DTYPES[dtype], transpose_a=transpose_a,
                                             transpose_b=transpose_b)
    return tuple(c for c in configs
                 if max(c.block_m, c.block_n, c.block_k) <= MAX_FORCED_BLOCK and not c.tma)


def draw(index: int, seed: int = SEED) -> Case:
    """Case `index` of the run seeded `seed`: a function of the two alone."""
    rng = np.random.default_rng([seed, index])
    # Log-uniform in [1, MAX_SIZE]: half the sizes at most 6, a quarter over 16 (several tiles
    # and K steps); every size from 1 to 40 is drawn. Uniform sizes cost 1.7x the CPU time.
    m, n, k = (int(x) for x in np.exp(rng.uniform(0, np.log(MAX_SIZE + 1), size=3)))
    dtype = str(rng.choice(sorted(DTYPES)))
    transpose_a, transpose_b = (bool(x) for x in rng.integers(0, 2, size=2))
    batch_kind = str(rng.choice(BATCH_KINDS))
    if batch_kind == "leading" and transpose_a:  # matmul folds leading dims only of an untransposed a
        batch_kind = "vmap_a"
    batch = int(rng.integers(2, 4)) if batch_kind != "none" else 1
    transform = str(rng.choice(TRANSFORMS))
    config = None
    if rng.random() < 0.5:
        # The kernel's problem: a leading batch folds into M (a config is checked against it).
        rows = m * batch if batch_kind == "leading" else m
        forced = _forced_configs(rows, n, k, dtype, transpose_a, transpose_b)
        if forced:
            config = forced[int(rng.integers(len(forced)))]
        if config is not None and rng.random() < 0.25:
            # The model splits K only for deep K; forced here onto these short loops (a split
            # with no K step left is run too: its partial is zeros).
            config = dataclasses.replace(config, split_k=int(rng.choice([2, 3, 4])), k_phases=1)
            problem = jtblas.Problem(m=rows, n=n, k=k, dtype=dtype, out_dtype=dtype,
                                     transpose_a=transpose_a, transpose_b=transpose_b)
            try:
                operands.check_config(config, problem)
            except ValueError:
                config = dataclasses.replace(config, split_k=1)
    return Case(index=index, m=m, n=n, k=k, dtype=dtype, transpose_a=transpose_a, transpose_b=transpose_b,
                config=config, batch_kind=batch_kind, batch=batch, transform=transform)


def _stored(x: np.ndarray, transposed: bool) -> np.ndarray:
    return np.ascontiguousarray(np.swapaxes(x, -1, -2)) if transposed else x


def run_case(case: Case) -> list[tuple[str, float, float]]:
    """(name, error, tolerance) of each output of the case (the product, or both gradients)."""
    rng = np.random.default_rng([SEED, case.index, 1])
    dtype = DTYPES[case.dtype]
    a_batch = (case.batch,) if case.batch_kind != "none" else ()
    b_batch = (case.batch,) if case.batch_kind == "vmap_both" else ()
    # Values as used (op(a) [.., m, k], op(b) [.., k, n]), rounded to the dtype, then stored.
    a_used = np.asarray(jnp.asarray(rng.standard_normal((*a_batch, case.m, case.k)), dtype), np.float64)
    b_used = np.asarray(jnp.asarray(rng.standard_normal((*b_batch, case.k, case.n)), dtype), np.float64)
    a = jnp.asarray(_stored(a_used, case.transpose_a), dtype)
    b = jnp.asarray(_stored(b_used, case.transpose_b), dtype)

    def product(x, y):
        return jtblas.matmul(x, y, transpose_a=case.transpose_a, transpose_b=case.transpose_b, config=case.config)

    if case.batch_kind == "vmap_a":
        product = jax.vmap(product, in_axes=(0, None))
    elif case.batch_kind == "vmap_both":
        product = jax.vmap(product)
    limit = tolerance(case.dtype, case.dtype)
    reference = a_used @ b_used
    if case.transform == "jit":
        out = jax.jit(product)(a, b)
        return [("product", _bound_error(out, reference, np.abs(a_used) @ np.abs(b_used)), limit)]

    w_used = np.asarray(jnp.asarray(rng.standard_normal(reference.shape), dtype), np.float64)
    w = jnp.asarray(w_used, jnp.float32)  # the cotangent reaches the product as w in its dtype: exact

    def loss(x, y):
        return jnp.sum(product(x, y).astype(jnp.float32) * w)

    da, db = jax.jit(jax.grad(loss, argnums=(0, 1)))(a, b)
    da_used = w_used @ np.swapaxes(b_used, -1, -2)  # dL/dop(a) = w·op(b)ᵀ
    db_used = np.swapaxes(a_used, -1, -2) @ w_used  # dL/dop(b) = op(a)ᵀ·w
    da_scale = np.abs(w_used) @ np.abs(np.swapaxes(b_used, -1, -2))
    db_scale = np.abs(np.swapaxes(a_used, -1, -2)) @ np.abs(w_used)
    if not b_batch and a_batch:  # b is shared by the batch: its gradient sums over it
        db_used, db_scale = db_used.sum(0), db_scale.sum(0)
    return [
        ("da", _bound_error(da, _stored(da_used, case.transpose_a), _stored(da_scale, case.transpose_a)), limit),
        ("db", _bound_error(db, _stored(db_used, case.transpose_b), _stored(db_scale, case.transpose_b)), limit),
    ]


def _bound_error(result: jax.Array, reference: np.ndarray, scale: np.ndarray) -> float:
    """‖result − reference‖ / ‖scale‖ (scale = |A|·|B|); inf for a wrong shape or a non-finite
    element (an unwritten one: the interpreter's outputs start as NaN)."""
    result = np.asarray(result, np.float64)
    if result.shape != reference.shape or not np.all(np.isfinite(result)):
        return float("inf")
    return float(np.linalg.norm(result - reference) / max(np.linalg.norm(scale), np.finfo(np.float64).tiny))


def _indices() -> list[range]:
    if ONLY is not None:
        return [range(int(ONLY), int(ONLY) + 1)]
    return [range(start, min(start + CHUNK, CASES)) for start in range(0, CASES, CHUNK)]


def test_draws_are_reproducible_and_varied():
    assert draw(7) == draw(7) and draw(7, seed=1) == draw(7, seed=1)
    cases = [draw(i, seed=DEFAULT_SEED) for i in range(DEFAULT_CASES)]
    assert {c.dtype for c in cases} == set(DTYPES)
    assert {(c.transpose_a, c.transpose_b) for c in cases} == {(False, False), (False, True), (True, False),
                                                              (True, True)}
    assert {c.batch_kind for c in cases} == set(BATCH_KINDS) and {c.transform for c in cases} == set(TRANSFORMS)
    forced = [c.config for c in cases if c.config is not None]
    assert len(forced) > DEFAULT_CASES // 3
    assert any(c.split_k > 1 for c in forced) and any(c.swap_ab for c in forced)
    assert any(c.m % 2 and c.n % 2 and c.k % 2 for c in cases) and any(c.k == 1 for c in cases)


def test_bound_error_catches_a_wrong_result():
    """The measure can fail: a result off by one element's rounding-scale error passes, a wrong
    element, a NaN or a wrong shape does not."""
    a = np.ones((3, 4))
    reference, scale = a @ a.T, np.abs(a) @ np.abs(a.T)
    assert _bound_error(jnp.asarray(reference), reference, scale) == 0
    wrong = reference.copy()
    wrong[1, 2] += 1.0
    assert _bound_error(jnp.asarray(wrong), reference, scale) > tolerance("bfloat16", "bfloat16")
    wrong[1, 2] = np.nan
    assert _bound_error(jnp.asarray(wrong), reference, scale) == float("inf")
    assert _bound_error(jnp.asarray(reference[:2]), reference, scale) == float("inf")


@pytest.mark.parametrize("indices", _indices(), ids=lambda r: f"cases{r.start}-{r.stop - 1}")
def test_fuzz(indices):
    start = time.perf_counter()
    failures = []
    for index in indices:
        case = draw(index)
        try:
            results = run_case(case)
        except Exception as error:  # noqa: BLE001 - a case that raises is a mismatch, reported with its seed
            failures.append(f"{case.describe()}: raised {type(error).__name__}: {error}")
            continue
        for name, error, limit in results:
            if not error <= limit:
                failures.append(f"{case.describe()}: {name} error {error:.3g} > tolerance {limit:.1g}")
    seconds = time.perf_counter() - start
    print(f"fuzz seed {SEED}: cases {indices.start}-{indices.stop - 1} in {seconds:.1f} s "
          f"({seconds / len(indices):.3f} s per case)")
    assert not failures, f"{len(failures)} of {len(indices)} cases failed:\n" + "\n".join(failures)
