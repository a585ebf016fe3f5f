"""Repacking: copy misaligned operands into padded buffers when the faster kernel pays for the copy.

A row-major operand whose rows do not start on 16-byte boundaries, or whose contiguous axis is
a K that the masked K tail cuts at a misaligned offset, is read with narrow loads
(`cost.vector_bytes`): on the H200 odd sizes ran the plain kernel at 82-122 TFLOP/s, and the same
kernel on zero-padded copies at 580-700 (H200, 2026-11-30). `plan_for_problem` weighs the two:

    plain    = best predicted time over candidates(problem)
    repacked = best predicted time over candidates(padded problem) + Σ copies
    copy     = (stored bytes read + padded bytes written) / DRAM bandwidth + one launch

and repacks only when repacked < (1 − REPACK_MIN_GAIN) · plain. On a wgmma GPU, a B stored
[N, K] (transpose_b) may also be copied transposed, into [K, N]: the kernel then runs the NN (TN)
layout, whose tensor cores are not slowed as NT's are (`Constants.k_major_b_efficiency`), for the
price of one copy of B (TT is not slowed, so the model copies it only to pad). In tf32 it is the
other way round: a wgmma tile copies an fp32 operand stored M- or N-major (A [K, M], B [K, N])
into shared memory transposed, a bank word per clock (`resources.transposed_operands`,
`Constants.transposed_copy_bytes_per_clock`), so such an operand may be copied transposed first,
into [M, K] ([N, K]), for the NT kernel.

A copied operand is zero-padded with its padded axes rounded up to PAD_MULTIPLE elements: K (so
the product is unchanged; K is shared, so padding K copies both operands) and the contiguous axis.
When that contiguous axis is M (A transposed) or N (B not transposed), two padded problems are
ranked: the caller's M (N) kept, the kernel wrapping that operand's tile offsets at its padded row
stride (`resources.padded_rows`; loads full width, C stored at the caller's shape), or M (N)
grown with the padding, C then computed padded (16-byte aligned rows, open to the TMA kernel) and
sliced to the caller's shape, one more copy in the cost:

    copy(C) = (padded C bytes read + C bytes written) / DRAM bandwidth + one launch

Aligned problems (every operand loaded at full width by the best plain config) without a K-major
B on a wgmma GPU, or in tf32 without an M- or N-major operand, are planned without ranking
anything else: their `ProductPlan` is the plain selection.
`candidates()` is always the caller's problem's space (what the exhaustive search times).

Pure Python: no JAX, no Triton.
"""

from __future__ import annotations

import dataclasses
import functools

from jtblas.config import Config, Problem
from jtblas.gpus import Hardware
from jtblas.model import cost, resources
from jtblas.model.select import CACHE_SIZE, select_for_problem, winner
from jtblas.model.select import microseconds as _us

# Padded axes (K and the leading dimensions of copied operands) are rounded up to 64 elements:
# the recipe measured on the H200 (2026-11-30: 580-700 TFLOP/s), rows starting on 128-byte L2 lines
# for 16-bit dtypes (256 bytes for fp32), and K a multiple of every block_k up to 64, so the
# kernel's K loop has no tail mask (EVEN_K) for the block_k the model picks on Hopper. The memory
# cost is at most 63 elements per padded axis.
PAD_MULTIPLE = 64
# Repack only for a predicted gain of at least 5%: the copies allocate memory, and the copy cost
# is a bandwidth estimate not yet calibrated against measurement; a smaller predicted gain is
# within the model's ranking error (docs/model.md, "How well it ranks").
REPACK_MIN_GAIN = 0.05
# How a repack decision can be overridden (tests and experiments only, never the default):
# "auto" lets the model decide, "always" pads every axis it can (K and both leading dimensions,
# M or N with them: C computed padded), "strides" the same but keeping the caller's M and N,
# "transpose" copies a B stored [N, K] transposed, and in tf32 an operand stored M- or N-major
# (padding K if it must), "never" keeps the plain kernel.
REPACK_MODES = ("auto", "always", "strides", "transpose", "never")


def round_up(value: int, multiple: int = PAD_MULTIPLE) -> int:
    return -(-value // multiple) * multiple


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ProductPlan:
    """How one product runs: the kernel problem and config, and which operands are copied first.

    Attributes:
      problem: the caller's problem (dense operands).
      kernel_problem: the problem the kernel runs: `problem`, or with K padded (`k`), padded
        leading dimensions (`lda`, `ldb`) and M (N) padded when it is a copied operand's
        contiguous axis and C is computed padded: C is then [kernel M, kernel N], sliced to the
        caller's shape.
      config: the kernel's config for `kernel_problem` (what `jtblas.select` returns).
      pad_a, pad_b: A (B) is copied into a zero-padded [rows, lda] buffer before the launch.
      transpose_a, transpose_b: A (B) is copied transposed (with pad_a, pad_b): A [K, M] into
        [M, K]; B [N, K] into [K, N], or in tf32 [K, N] into [N, K]. The kernel problem's
        transpose_a (transpose_b) is the caller's flipped.
      convert_a, convert_b: A (B), stored in another dtype than the compute dtype, is converted
        to it first (a copy); the kernel problem has no `a_dtype` (`b_dtype`).
      predicted_seconds: the kernel's predicted time plus `copy_seconds`.
      plain_config, plain_seconds: the best config and predicted time without repacking.
      copy_seconds: the predicted time of the copies, C's slice included (0 without repacking).
      reason: one sentence on why it repacks or not.
    """

    problem: Problem
    kernel_problem: Problem
    config: Config
    pad_a: bool = False
    pad_b: bool = False
    transpose_a: bool = False
    transpose_b: bool = False
    convert_a: bool = False
    convert_b: bool = False
    predicted_seconds: float
    plain_config: Config
    plain_seconds: float
    copy_seconds: float = 0.0
    reason: str = ""

    @property
    def repacks(self) -> bool:
        return self.pad_a or self.pad_b

    @property
    def copies(self) -> str:
        """The copied operands in short: "A", "B", "AB", each with "ᵀ" where copied transposed
        ("" without repacking)."""
        return "".join(name + "ᵀ" * flipped for name, padded, flipped in
                       (("A", self.pad_a, self.transpose_a), ("B", self.pad_b, self.transpose_b)) if padded)

    @property
    def c_padded(self) -> bool:
        """The kernel computes C padded (a copy grew its M or N), then it is sliced."""
        return (self.kernel_problem.m, self.kernel_problem.n) != (self.problem.m, self.problem.n)

    def stored_shape(self, operand: str, *, padded: bool) -> tuple[int, int]:
        """(rows, row stride) of A or B as stored: the caller's, or the padded copy's."""
        return stored_shape(self.kernel_problem if padded else self.problem, operand)


def stored_shape(problem: Problem, operand: str) -> tuple[int, int]:
    """(rows, elements per row including padding) of operand "a" or "b" as stored row-major."""
    if operand == "a":
        return (problem.k if problem.transpose_a else problem.m), problem.a_row_stride
    return (problem.n if problem.transpose_b else problem.k), problem.b_row_stride


def misaligned(problem: Problem, config: Config, hardware: Hardware) -> tuple[bool, bool]:
    """Whether `config` loads A (B) with vectors narrower than full width (`cost.vector_bytes`), or
    has K phases shift it to load it at full width (its rows are misaligned as stored: a padded
    copy runs without the phases' partials)."""
    constants = hardware.model_constants()
    full = constants.full_vector_bytes
    shifted = resources.shifted_operands(problem, config)
    return tuple(cost.vector_bytes(problem, config, operand, constants) < full or shift
                 for operand, shift in zip(("a", "b"), shifted))


def padded_problem(problem: Problem, *, pad_a: bool, pad_b: bool, pad_k: bool, transpose_a: bool = False,
                   transpose_b: bool = False, pad_c: bool = True) -> Problem:
    """The kernel problem after copying A and/or B with their padded axes rounded up to
    PAD_MULTIPLE (K, zero-filled, only if `pad_k`, which needs both operands copied; a copied
    operand's contiguous axis). `pad_c`: where that axis is M or N, M (N) grows with it and C is
    computed padded (sliced to the caller's shape); otherwise M and N stay the caller's and only
    the row stride is padded (the kernel wraps its offsets there: `resources.padded_rows`).
    `transpose_a` (`transpose_b`): A (B) is copied transposed, its layout flipped ([K, M] into
    [M, K] or back; needs `pad_a`, `pad_b`)."""
    if pad_k and not (pad_a and pad_b):
        raise ValueError("padding K copies both operands")
    if (transpose_a and not pad_a) or (transpose_b and not pad_b):
        raise ValueError("transposing an operand copies it (pad_a with transpose_a, pad_b with transpose_b)")
    if transpose_a or transpose_b:
        problem = dataclasses.replace(problem, transpose_a=problem.transpose_a != transpose_a,
                                      transpose_b=problem.transpose_b != transpose_b,
                                      lda=0 if transpose_a else problem.lda, ldb=0 if transpose_b else problem.ldb)
    k = round_up(problem.k) if pad_k else problem.k
    lda = round_up(problem.m if problem.transpose_a else k) if pad_a else 0
    ldb = round_up(k if problem.transpose_b else problem.n) if pad_b else 0
    m = lda if pad_c and pad_a and problem.transpose_a else problem.m
    n = ldb if pad_c and pad_b and not problem.transpose_b else problem.n
    kernel = dataclasses.replace(problem, m=m, n=n, k=k, lda=0, ldb=0)
    # A leading dimension equal to the dense row length is stored as 0 (dense), so one padded
    # problem has one representation.
    return dataclasses.replace(
        kernel, lda=0 if lda == kernel.a_row_stride else lda, ldb=0 if ldb == kernel.b_row_stride else ldb
    )


def copy_seconds(problem: Problem, kernel_problem: Problem, operand: str, hardware: Hardware) -> float:
    """Predicted time of one operand's copy: a streaming kernel that reads the caller's operand
    and writes the padded buffer at DRAM bandwidth, plus its launch."""
    rows, cols = stored_shape(problem, operand)
    rows_p, cols_p = stored_shape(kernel_problem, operand)
    element = problem.a_bytes if operand == "a" else problem.b_bytes
    moved = (rows * cols + rows_p * cols_p) * element * problem.batch
    return moved / hardware.dram_bytes_per_s + hardware.launch_seconds


def slice_seconds(problem: Problem, kernel_problem: Problem, hardware: Hardware) -> float:
    """Predicted time of slicing a padded C [kernel M, kernel N] to the caller's [M, N] (0 when
    the kernel runs the caller's M and N): read the padded C, write C, plus a launch (and the
    padded copy of a residual)."""
    padded = kernel_problem.m * kernel_problem.n
    if padded == problem.m * problem.n:
        return 0.0
    # An epilogue's residual is padded the same way first (read, written padded).
    moved = (padded + problem.m * problem.n) * (problem.out_bytes + problem.residual_bytes) * problem.batch
    return moved / hardware.dram_bytes_per_s + hardware.launch_seconds


def _options(problem: Problem, narrow: tuple[bool, bool], mode: str,
             hardware: Hardware) -> list[tuple[bool, bool, bool, bool, bool, bool]]:
    """(pad_a, pad_b, pad_k, transpose_a, transpose_b, pad_c) repack options worth ranking. K
    whose bytes are not a multiple of 16 is padded (both operands copied); otherwise each narrow
    operand may be copied alone, or both. On a wgmma GPU the operands its tiles read slower as
    stored than transposed (`slow_layouts`) may be copied transposed as well.
    Where a copy pads M or N, C is computed at the caller's shape (its rows as misaligned as the
    caller's N makes them) or padded and sliced: both are ranked."""
    if mode in ("always", "strides"):
        return [(True, True, problem.k % PAD_MULTIPLE != 0, False, False, mode == "always")]
    if mode == "never":
        return []
    pad_k = any(problem.k * element % 16 != 0 for element in (problem.a_bytes, problem.b_bytes))
    transposed_a, transposed_b = resources.transposed_operands(problem)
    if mode == "transpose":
        flip_a, flip_b = transposed_a, transposed_b or problem.transpose_b
        return [(flip_a or pad_k, flip_b or pad_k, pad_k, flip_a, flip_b, True)] if flip_a or flip_b else []
    options = []
    if any(narrow):
        if pad_k:
            options = [(True, True, True)]
        else:
            singles = [(a, b, False) for a, b in ((True, False), (False, True)) if narrow[0 if a else 1]]
            options = singles + ([(True, True, False)] if len(singles) == 2 else [])
    options = [(*option, False, False) for option in options]
    flip_a, flip_b = slow_layouts(problem)
    if (flip_a or flip_b) and hardware.wgmma:
        options.append((flip_a or pad_k or narrow[0], flip_b or pad_k or narrow[1], pad_k, flip_a, flip_b))
    return [(*option, pad_c) for option in options for pad_c in (False, True)
            if not pad_c or _grows(problem, *option)]


def slow_layouts(problem: Problem) -> tuple[bool, bool]:
    """Whether a wgmma tile reads A (B) slower as stored than transposed: in tf32 an operand stored
    M- or N-major, which it copies into shared memory transposed (`resources.transposed_operands`);
    in 16-bit dtypes a B stored [N, K] (`Constants.k_major_b_efficiency`: NT; TT is not slowed,
    but its copy may pad); neither on FMA tiles."""
    if resources.uses_fma(problem):
        return False, False
    if problem.dtype == "float32":
        return resources.transposed_operands(problem)
    return False, problem.transpose_b


def _grows(problem: Problem, pad_a: bool, pad_b: bool, pad_k: bool, transpose_a: bool, transpose_b: bool) -> bool:
    """Whether the copies pad M or N (a copied operand's contiguous axis, as the kernel reads it,
    not a multiple of PAD_MULTIPLE)."""
    return ((pad_a and problem.transpose_a != transpose_a and problem.m % PAD_MULTIPLE != 0)
            or (pad_b and problem.transpose_b == transpose_b and problem.n % PAD_MULTIPLE != 0))


@functools.lru_cache(maxsize=CACHE_SIZE)
def plan_for_problem(problem: Problem, hardware: Hardware, mode: str = "auto") -> ProductPlan:
    """The model's plan for `problem` on `hardware`: the plain selection, or a repacked one when
    its predicted time with the copies beats the plain one by REPACK_MIN_GAIN (see module doc).
    An operand stored in another dtype than the compute dtype (`Problem.a_dtype`, `b_dtype`) is
    read as stored and converted in the kernel, or, where that is predicted REPACK_MIN_GAIN
    slower than converting it first (a copy in the compute dtype: read once, where the kernel
    reads it once per tile row or column, from L2 at its stored width), converted first (with
    "auto" only).

    `mode` ("auto", "always", "strides", "transpose", "never") overrides the decision; anything but "auto" is for tests.
    Cached per (problem, hardware, mode).
    """
    if mode not in REPACK_MODES:
        raise ValueError(f"jtblas: repack mode must be one of {REPACK_MODES}, got {mode!r}")
    plan = _plan_as_stored(problem, hardware, mode)
    if not problem.casts or mode != "auto":
        return plan
    inner = _plan_as_stored(dataclasses.replace(problem, a_dtype="", b_dtype=""), hardware, mode)
    which = [operand for operand, stored in (("a", problem.a_dtype), ("b", problem.b_dtype)) if stored]
    copies = sum(convert_seconds(problem, operand, hardware) for operand in which)
    converted = inner.predicted_seconds + copies
    names = " and ".join(operand.upper() for operand in which)
    words = (f"converting {names} to {problem.dtype} first predicts {_us(converted)} ({_us(inner.predicted_seconds)} "
             f"+ {_us(copies)} conversion) against {_us(plan.predicted_seconds)} converting in the kernel")
    if converted < (1 - REPACK_MIN_GAIN) * plan.predicted_seconds:
        return dataclasses.replace(inner, problem=problem, convert_a="a" in which, convert_b="b" in which,
                                   predicted_seconds=converted, copy_seconds=inner.copy_seconds + copies,
                                   reason=f"{inner.reason}; {words}: it converts first")
    return dataclasses.replace(plan, reason=f"{plan.reason}; {words}: it converts in the kernel")


def convert_seconds(problem: Problem, operand: str, hardware: Hardware) -> float:
    """Predicted time of converting one operand to the compute dtype: read it as stored, write the
    copy, at DRAM bandwidth, plus a launch."""
    rows, cols = stored_shape(problem, operand)
    stored = problem.a_bytes if operand == "a" else problem.b_bytes
    moved = rows * cols * (stored + problem.operand_bytes) * problem.batch
    return moved / hardware.dram_bytes_per_s + hardware.launch_seconds


def _plan_as_stored(problem: Problem, hardware: Hardware, mode: str) -> ProductPlan:
    """`plan_for_problem` with the operands' dtypes as they are: the plain selection, or a
    repacked one."""
    plain = winner(problem, hardware)
    narrow = misaligned(problem, plain.config, hardware)
    best = ProductPlan(problem=problem, kernel_problem=problem, config=plain.config,
                predicted_seconds=plain.predicted_seconds, plain_config=plain.config,
                plain_seconds=plain.predicted_seconds)
    # A gated product's tiles pair columns N/2 apart: a padded B would move them.
    options = [] if problem.gated else _options(problem, narrow, mode, hardware)
    if not options:
        reason = ("a gated product is not repacked" if problem.gated
                  else "operands load at full vector width: nothing to repack" if not any(narrow)
                  else "repacking turned off")
        return dataclasses.replace(best, reason=reason)
    candidates = []
    for pad_a, pad_b, pad_k, transpose_a, transpose_b, pad_c in options:
        kernel = padded_problem(problem, pad_a=pad_a, pad_b=pad_b, pad_k=pad_k, transpose_a=transpose_a,
                                transpose_b=transpose_b, pad_c=pad_c)
        # The copies live beside the caller's operands until the product is done.
        if resources.footprint_bytes(problem) + resources.footprint_bytes(kernel) > hardware.memory_bytes:
            continue
        win = winner(kernel, hardware)
        copies = sum(copy_seconds(problem, kernel, operand, hardware)
                     for operand, padded in (("a", pad_a), ("b", pad_b)) if padded)
        copies += slice_seconds(problem, kernel, hardware)
        candidates.append(dataclasses.replace(
            best, kernel_problem=kernel, config=win.config, pad_a=pad_a, pad_b=pad_b, transpose_a=transpose_a,
            transpose_b=transpose_b,
            predicted_seconds=win.predicted_seconds + copies, copy_seconds=copies,
        ))
    if not candidates:
        return dataclasses.replace(best, reason="the padded copies would not fit beside the operands in device memory")
    repacked = min(candidates, key=lambda p: (p.predicted_seconds, p.transpose_a + p.transpose_b))
    which = " and ".join(name for name, padded in (("A", repacked.pad_a), ("B", repacked.pad_b)) if padded)
    flipped = [f"{name} to {shape}" for name, flag, shape in
               (("A", repacked.transpose_a, "[M, K]" if problem.transpose_a else "[K, M]"),
                ("B", repacked.transpose_b, "[N, K]" if not problem.transpose_b else "[K, N]")) if flag]
    if flipped:
        which += f" ({' and '.join(flipped)}, transposed)"
    transposed = [f"{name} stored {shape}" for name, flag, shape in
                  zip("AB", resources.transposed_operands(problem), ("[K, M]", "[K, N]")) if flag]
    why = (_narrow_words(narrow) if any(narrow)
           else f"tf32 wgmma tiles copy {' and '.join(transposed)} transposed, a bank word per clock" if transposed
           else "B is K-major (stored [N, K]), slower on the tensor cores")
    words = (f"{why}; copying {which} to run {repacked.kernel_problem.short()} predicts "
             f"{_us(repacked.predicted_seconds)} ({_us(repacked.predicted_seconds - repacked.copy_seconds)} "
             f"kernel + {_us(repacked.copy_seconds)} copies) against {_us(plain.predicted_seconds)} plain "
             f"({plain.config.short()})")
    # The same copies with C the other way (kept at the caller's shape, or padded and sliced).
    twins = [p for p in candidates
             if (p.pad_a, p.pad_b, p.transpose_a, p.transpose_b) == (repacked.pad_a, repacked.pad_b,
                                                                     repacked.transpose_a, repacked.transpose_b)
             and p.c_padded != repacked.c_padded]
    if twins:
        twin = min(twins, key=lambda p: p.predicted_seconds)
        words += (f"; computing C padded ({_c_shape(twin)}) and slicing it would predict "
                  if twin.c_padded else f"; keeping C at the caller's {_c_shape(twin)} would predict ")
        words += f"{_us(twin.predicted_seconds)} ({twin.config.short()})"
    if mode != "auto":
        return dataclasses.replace(repacked, reason=f"{words}: repacking forced ({mode})")
    if repacked.predicted_seconds < (1 - REPACK_MIN_GAIN) * plain.predicted_seconds:
        return dataclasses.replace(repacked, reason=f"{words}: it repacks")
    return dataclasses.replace(
        best, reason=f"{words}: no repacking (it needs a {100 * REPACK_MIN_GAIN:.0f}% predicted gain)"
    )


def _c_shape(plan: ProductPlan) -> str:
    return f"[{plan.kernel_problem.m}, {plan.kernel_problem.out_n}]"


def _narrow_words(narrow: tuple[bool, bool]) -> str:
    which = " and ".join(name for name, flag in (("A", narrow[0]), ("B", narrow[1])) if flag)
    return f"{which} load{'s' if which in ('A', 'B') else ''} with narrow vectors (misaligned rows or K tail)"


def clear_cache() -> None:
    """Forgets every cached selection and repacking plan."""
    select_for_problem.cache_clear()
    plan_for_problem.cache_clear()
