"""Launch planning for the GEMM kernels: the grid, the scalar arguments and the meta-parameters
of one launch of `matmul_kernel`, `matmul_tma_kernel` or `sum_splits_kernel` for a `Problem` and a
`Config`, checked against CUDA's grid limits. Shared by `jtblas.ops` (launches through JAX) and
`jtblas.torch_launch` (the same kernels on torch tensors); it launches nothing itself. Where `hw`
is not given, the GPU is detected (`hardware.detect`, through JAX).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from jtblas import hardware
from jtblas.config import Config, Problem
from jtblas.model import resources

_INDEX_32_LIMIT = 2**31
# CUDA's grid limits (CUDA C++ Programming Guide, "Technical Specifications per Compute
# Capability"): 2^31 - 1 programs along x, 65535 along y and z. The batch is grid axis 1, so a
# larger batch is launched in chunks of at most MAX_GRID_YZ entries (`ops._launch_gemm`); a
# module attribute so that a test can lower it.
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535


class LaunchSpec(NamedTuple):
    """Everything but the operands that one launch of `matmul_kernel` (or, from
    `sum_splits_spec`, of `sum_splits_kernel`) needs."""

    grid: tuple[int, ...]
    # matmul_kernel: M, N, K, the six matrix strides, the three batch strides, each divided by its
    # *_UNIT. sum_splits_kernel: the size of one partial, divided by SIZE_UNIT.
    scalars: tuple[int, ...]
    num_warps: int
    num_stages: int
    metaparams: dict[str, Any]


def launch_spec(
    problem: Problem,
    config: Config,
    *,
    batch: int = 1,
    batch_strides: tuple[int, int, int] = (0, 0, 0),
    atomic: bool = False,
    hw: hardware.Hardware | None = None,
) -> LaunchSpec:
    """Grid, scalar arguments and meta-parameters of `matmul_kernel` for row-major operands
    (A [M, K] or [K, M] when transposed, B [K, N] or [N, K], each row `problem.lda`/`ldb` elements
    apart, dense by default; C [M, N] dense); shared by `matmul` and the benchmark, which launches
    the same kernel on torch tensors.

    With `config.split_k` > 1 (or `config.k_phases` > 1) the grid gains a third axis (the split,
    or the phase) and the kernel's output is not C but an fp32 workspace [split_k·k_phases, batch,
    M, N] of partial sums (its batch stride is M·N
    whatever `batch_strides` says); `sum_splits_spec` launches the reduction into C. With `atomic`
    (and a split) the output is instead a zeroed fp32 [batch, M, N] buffer (batch stride M·N)
    into which every split adds its partial with atomics (ATOMIC_SPLIT); the result is C when C
    is fp32, else `sum_splits_spec(..., atomic=True)` casts it.

    A `config.tma` launch is `matmul_tma_kernel`'s instead (`tma_launch_spec`, on `hw`, by
    default the detected GPU).
    """
    if problem.gated and (config.k_slices > 1 or config.swap_ab or config.tma):
        raise ValueError(f"jtblas: a gated product runs unsplit and unswapped in the pointer kernel, not "
                         f"{config.short()} ({problem.short()})")
    if config.tma:
        return tma_launch_spec(problem, config, batch=batch, batch_strides=batch_strides, hw=hw)
    m, n, k = problem.m, problem.n, problem.k
    split = config.k_slices
    lda, ldb = problem.a_row_stride, problem.b_row_stride
    stride_am, stride_ak = (1, lda) if problem.transpose_a else (lda, 1)
    stride_bk, stride_bn = (1, ldb) if problem.transpose_b else (ldb, 1)
    phase_major = resources.phase_major_a(problem, config)
    if phase_major:  # A is its phase-major copy (`ops.phase_major_copy`)
        stride_am = config.k_phases * resources.phase_columns(problem, config.k_phases, config.block_k)
    shift_a, shift_b = resources.shifted_operands(problem, config)
    padded_m, padded_n = resources.padded_rows(problem)
    vector = resources.phase_vector_bytes(problem, config.k_phases) // problem.operand_bytes
    # A shifted operand's tiles start up to vector - 1 rows (columns) before C's.
    tiles = (math.ceil((m + (vector - 1) * shift_a) / config.block_m)
             * math.ceil((n + (vector - 1) * shift_b) / config.block_n))
    _check_grid(tiles, batch, split, problem, config)
    atomic = atomic and split > 1
    biggest = max(*_stored_elements(problem), m * stride_am * phase_major, m * n * (1 if atomic else split)) * batch
    stride_cb = m * n if split > 1 else batch_strides[2]
    # A gated product's kernel takes C's columns as N (B holds twice as many: `Problem.gated`).
    sizes_and_strides = dict(
        M=m, N=problem.out_n, K=k, STRIDE_AM=stride_am, STRIDE_AK=stride_ak, STRIDE_BK=stride_bk,
        STRIDE_BN=stride_bn, STRIDE_CM=problem.out_n, STRIDE_CN=1, STRIDE_AB=batch_strides[0],
        STRIDE_BB=batch_strides[1], STRIDE_CB=stride_cb,
    )
    # 16 bytes' worth of elements is all a vector load or store can use.
    out_bytes = 4 if split > 1 else problem.out_bytes  # the split-K workspace is fp32
    limit = 16 // min(problem.a_bytes, problem.b_bytes, out_bytes)
    units = {name: divisibility_unit(value, limit) for name, value in sizes_and_strides.items()}
    units["STRIDE_CN"] = 1  # always 1: the compiler specialises it to the constant
    return LaunchSpec(
        grid=(tiles, batch, split) if split > 1 else (tiles, batch),
        scalars=tuple(value // units[name] for name, value in sizes_and_strides.items()),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        metaparams=dict(
            **_tile_metaparams(problem, config),
            EVEN_K=k % (config.block_k * config.k_phases) == 0,
            INDEX_64=biggest >= _INDEX_32_LIMIT,
            **{f"{name}_UNIT": unit for name, unit in units.items() if name != "STRIDE_CN"},
            SPLIT_K=config.split_k,
            ATOMIC_SPLIT=atomic,
            K_FROM_INDICES=resources.k_from_indices(problem),
            SHORT_A_ROWS=m if resources.masks_short_a(problem, config) else 0,
            SWAP_AB=config.swap_ab,
            K_PHASES=config.k_phases,
            SHIFT_A=shift_a,
            SHIFT_B=shift_b,
            VECTOR=vector,
            PHASE_MAJOR_A=phase_major,
            TILE_M_UNIT=vector if shift_a else units["M"],
            TILE_N_UNIT=vector if shift_b else units["N"],
            CAST_A=problem.dtype if problem.a_dtype else "",
            CAST_B=problem.dtype if problem.b_dtype else "",
            ROUND_ONLY=False,
            PADDED_M=padded_m,
            PADDED_N=padded_n,
        ),
    )


def tma_launch_spec(
    problem: Problem,
    config: Config,
    *,
    batch: int = 1,
    batch_strides: tuple[int, int, int] = (0, 0, 0),
    hw: hardware.Hardware | None = None,
) -> LaunchSpec:
    """Grid, scalars and meta-parameters of `matmul_tma_kernel` (a `config.tma` launch), for the
    operands `launch_spec` describes: a persistent grid of min(tiles, SMs x resident programs)
    programs, tiles counted over the whole batch, each program walking its tiles entry after entry,
    each entry's in grouped order."""
    hw = hw or hardware.detect()
    tiles = math.ceil(problem.m / config.block_m) * math.ceil(problem.n / config.block_n) * batch
    programs = min(tiles, _resident_programs(config, problem, hw))
    _check_grid(programs, 1, 1, problem, config)
    biggest = max(*_stored_elements(problem), problem.m * problem.n) * batch
    batched = batch > 1
    return LaunchSpec(
        grid=(programs,),
        scalars=(problem.m, problem.n, problem.k, problem.a_row_stride, problem.b_row_stride, *batch_strides, batch),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        metaparams=dict(
            **_tile_metaparams(problem, config),
            TRANSPOSE_A=problem.transpose_a,
            TRANSPOSE_B=problem.transpose_b,
            STORE_HALVES=resources.store_halves(config),
            INDEX_64=biggest >= _INDEX_32_LIMIT,
            # A batch stride of 0 broadcasts the operand: one matrix, a descriptor over [rows, columns].
            A_BATCHED=batched and batch_strides[0] != 0,
            B_BATCHED=batched and batch_strides[1] != 0,
            C_BATCHED=batched,
        ),
    )


def _check_grid(programs: int, batch: int, split: int, problem: Problem, config: Config) -> None:
    """Raises ValueError where a grid (programs, batch, split) passes CUDA's limits
    (`ops._launch_gemm` chunks the batch before it gets here)."""
    if programs > MAX_GRID_X or batch > MAX_GRID_YZ or split > MAX_GRID_YZ:
        raise ValueError(
            f"jtblas: the grid ({programs}, {batch}, {split}) of {config.short()} on {problem.short()} passes "
            f"CUDA's limits ({MAX_GRID_X} programs along x, {MAX_GRID_YZ} along y and z)")


def _resident_programs(config: Config, problem: Problem, hw: hardware.Hardware) -> int:
    """Programs of `config` the GPU holds at once (SMs x programs per SM): a persistent grid."""
    return hw.sm_count * max(1, resources.programs_per_sm(config, problem, hw))


def _tile_metaparams(problem: Problem, config: Config) -> dict[str, Any]:
    """The meta-parameters both GEMM kernels take: the tile, the group and the dot's precision."""
    return dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                GROUP_M=config.group_m, INPUT_PRECISION=problem.input_precision)


def _stored_elements(problem: Problem) -> tuple[int, int]:
    """Elements A and B span as stored: rows x row stride (`lda`, `ldb`)."""
    a_rows = problem.k if problem.transpose_a else problem.m
    b_rows = problem.n if problem.transpose_b else problem.k
    return a_rows * problem.a_row_stride, b_rows * problem.b_row_stride


def sum_splits_spec(problem: Problem, config: Config, *, batch: int = 1, atomic: bool = False,
                    hw: hardware.Hardware | None = None) -> LaunchSpec:
    """Grid, scalars and meta-parameters of `sum_splits_kernel`, the second launch of a split-K
    product: it reads the fp32 workspace [split_k, batch, M, N] that `matmul_kernel` wrote and
    writes C [batch, M, N] in the output dtype, in programs of `resources.reduction_block`
    elements spread over `hw`'s SMs (by default the detected GPU's). With `atomic` the workspace
    is the single fp32 sum [batch, M, N] that the atomic launch wrote, and this launch only casts
    it (SPLIT_K=1)."""
    if config.k_slices == 1:
        raise ValueError(f"sum_splits_spec: {config.short()} does not split K")
    splits = 1 if atomic else config.k_slices
    size = batch * problem.m * problem.n
    unit = divisibility_unit(size, 16 // 4)  # fp32 partials: 4 elements fill a 16-byte load
    block = resources.reduction_block(size, hw or hardware.detect())
    return LaunchSpec(
        grid=(math.ceil(size / block),),
        scalars=(size // unit,),
        num_warps=resources.reduction_warps(block),
        num_stages=1,
        metaparams=dict(
            SPLIT_K=splits, BLOCK=block, SIZE_UNIT=unit,
            INDEX_64=size * splits >= _INDEX_32_LIMIT,
        ),
    )


def divisibility_unit(value: int, limit: int) -> int:
    """Largest power of two up to `limit` dividing `value` (`limit` for 0): the divisibility that
    Triton's own launcher specialises integer arguments on (by 16), passed to the kernel
    explicitly (see the kernel's *_UNIT parameters)."""
    unit = 1
    while unit < limit and value % (2 * unit) == 0:
        unit *= 2
    return unit

