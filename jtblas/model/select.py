"""The argmin: rank every candidate by predicted time, pick the first; cache.

Ties (equal predicted seconds, common when one bound such as DRAM bandwidth dominates) go, in
order, to the unswapped tile (a swapped twin, `Config.swap_ab`, is picked only where it predicts
faster: on the H200, 15 decode products whose swapped candidate tied the unswapped pick ran it
0.90-1.06x as fast, 1.00 in geometric mean, 2026-12-01, BENCHMARKS.md at 705f18b), to the
smaller shared-memory time per K step of a candidate the tensor cores bind
(`cost.compute_bound_arrays`; any other candidate counts 0 here, so the key orders the
compute-bound ones among themselves, after the others: of the twins 256x128x64 and 128x256x64 on
8 warps, the first reads B once per 64-row MMA block, 20% more shared-memory traffic, and ran
1.14x its prediction over 30 H200 products where the second ran 1.04-1.06x; on an H100 5-15%
slower than it, 2026-12-06), to the config with the most slack
(the smaller sum of its SM-side and memory-side times, so the bound that was not binding is
furthest away), the larger tile (higher arithmetic intensity), the larger block_k,
the fewer stages (less shared memory for the same time), the fewer warps, the larger group, the
smaller split_k (less partial traffic), the pointer kernel over the TMA kernel (which the model
predicts apart: the TMA twin's set-up per launch and shorter K step, `jtblas.constants.Constants`), and
finally the candidate order; so the answer is deterministic.

Python and NumPy: no JAX, no Triton.
"""

from __future__ import annotations

import functools

import numpy as np

from jtblas.config import Config, Problem
from jtblas.gpus import Hardware
from jtblas.model import cost, resources
from jtblas.model.candidates import Candidates, candidate_arrays

CACHE_SIZE = 4096


def _estimated(problem: Problem, hardware: Hardware) -> tuple[Candidates, dict]:
    """Every candidate (as arrays) and its terms (`cost.estimate_arrays`)."""
    errors = resources.memory_errors(problem, hardware)
    if errors:
        raise ValueError(f"jtblas: {problem.short()} cannot run on {hardware.name}: " + "; ".join(errors))
    found = candidate_arrays(problem, hardware)
    if not len(found):
        raise ValueError(f"jtblas: no kernel configuration fits {problem.short()} on {hardware.name} "
                         f"(hardware description: {hardware.source})")
    constants = hardware.model_constants()  # the defaults, or a calibrated profile's values
    return found, cost.estimate_arrays(found, problem, hardware, constants)


def _order(found: Candidates, terms: dict) -> np.ndarray:
    """The candidates' indices fastest first: the keys of the module doc, by one `np.lexsort`
    (its last key sorts first); the candidate order is `Candidates.order_key`."""
    keys = (terms["predicted_seconds"], found.swap_ab, _compute_bound_smem(terms), terms["sm"] + terms["memory"],
            -found.block_m * found.block_n, -found.block_k, found.num_stages, found.num_warps,
            -found.group_m, found.split_k, found.tma, found.order_key())
    return np.lexsort(keys[::-1])


def _compute_bound_smem(terms: dict) -> np.ndarray:
    """A K step's shared-memory time where the tensor cores bind the prediction
    (`cost.compute_bound_arrays`), else 0."""
    return np.where(cost.compute_bound_arrays(terms), terms["step_smem"], 0.0)


def rank(problem: Problem, hardware: Hardware) -> list[cost.Estimate]:
    """Every candidate's estimate, fastest first (ties broken as the module doc says)."""
    found, terms = _estimated(problem, hardware)
    return cost.estimates_of(found, terms, _order(found, terms))


def winner(problem: Problem, hardware: Hardware) -> cost.Estimate:
    """`rank(problem, hardware)[0]`, building only the winner's `Config` and `Estimate` (the
    tie-break sorts only the candidates that tie for the fastest prediction)."""
    found, terms = _estimated(problem, hardware)
    seconds = terms["predicted_seconds"]
    tied = np.flatnonzero(seconds == seconds.min())
    if len(tied) > 1:
        tied_terms = {name: values[tied] for name, values in terms.items()}
        tied = tied[_order(found.take(tied), tied_terms)]
    return cost.estimates_of(found, terms, tied[:1])[0]


@functools.lru_cache(maxsize=CACHE_SIZE)
def select_for_problem(problem: Problem, hardware: Hardware) -> Config:
    """The model's configuration for `problem` on `hardware`: the fastest predicted candidate on
    the operands as they are (`repack.plan_for_problem` decides whether padded copies run faster).

    Cached per (problem, hardware); `clear_cache()` empties it.
    """
    return winner(problem, hardware).config


def microseconds(seconds: float) -> str:
    """`seconds` as text in µs with two decimals (the explanations' unit)."""
    return f"{seconds * 1e6:.2f} µs"
