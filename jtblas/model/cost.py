"""The performance model's equations, in one place: predicted seconds of one config on one problem.

The kernel runs one program per block_m x block_n tile of C (a 2-D grid walked in grouped
order); each program loops over K in block_k steps through a num_stages-deep software pipeline
and stores its tile once. `estimate` predicts its time as

    predicted = launch + max(sm_seconds, memory_seconds)

    sm_seconds     = max(tiles_per_sm · tile_throughput,            # the busiest SM's resources
                         ceil(tiles_per_sm / programs_per_sm) · tile_latency)   # its latency chain
    memory_seconds = max(dram_bytes / DRAM bandwidth, l2_bytes / L2 bandwidth) + first-load latency

    tile_throughput = k_steps · step_seconds + epilogue_seconds
    tile_latency    = fill_seconds + max(k_steps · step_chain, (k_steps − 1) · latency / loads_in_flight)
                      + epilogue_seconds
    step_seconds    = max(mma, shared-memory traffic, load port) + loop overhead     (one K step)
    step_chain      = step_seconds, or max(mma + shared-memory traffic, load port) + loop overhead
                      where an mma.sync program's 16-row warps are alone on their schedulers
    fill_seconds    = program start + latency + the first stage's bytes / load port

`tiles_per_sm = ceil(tiles / SMs)` is the wave quantization (the busiest SM does that many tiles;
with several programs per SM they share its tensor cores, shared memory and load port, so the
throughput term charges them in full and the latency term lets `programs_per_sm` of them overlap).
All work is on padded tile sizes (tails cost a whole tile), except A's loads where all of A is
shorter than a tile: the kernel masks its rows past M (`resources.masks_short_a`), which load
nothing. Every term is non-decreasing in M, N and K for a fixed config at fixed operand alignment
and K-tail class (see docs/model.md).

Split-K (config.split_k = s > 1): the grid has tiles·s programs, each reducing ⌈k_blocks / s⌉ K
steps and storing an fp32 partial tile; the operands' DRAM bytes are those of the plain tile (the
splits read disjoint K slices of the same panels); the s·M·N·4 bytes of partials are written by
the first kernel and read back by the reduction kernel, which adds a second launch:

    predicted = launch + max(sm_seconds, memory_seconds) + reduction
    reduction = launch + latency + max(reduce_bytes / DRAM bandwidth,
                                       busiest SM's padded blocks' bytes / load port)
    reduce_bytes = s·M·N·4 + M·N·out_bytes

A batch (problem.batch = B > 1 independent products, the launch's batch grid axis) multiplies the
grid, hence the waves, by B: tiles counts every batch entry's tiles, and every byte term (operands,
C, partials, the reduction's elements) is B times one product's. Split-K is searched only where
the batch's tiles together leave SMs idle (`candidates.split_k_searched`), and never past
`candidates.max_workspace_bytes` of partials (1/32 of device memory).

K phases (config.k_phases = p > 1, where an operand stored with its rows along K has a row stride
that is not 16-byte aligned) run the split-K equations with p slices of ⌈K / p⌉ rows each, the
shifted operand at the width p rows' stride allows (`resources.phase_vector_bytes`: 4, 8 or 16
bytes), on a grid of tiles over C widened by up to one such vector's worth of shifted rows
(columns). A K-contiguous A is first copied phase-major (`resources.phase_major_a`), so the
kernel loads it at full width; the copy adds

    phase_copy = (M·K + M·p·phase_columns) · bytes / DRAM bandwidth + launch

Loads narrower than 4 bytes (a misaligned operand without phases) are not pipelined: each thread
holds its K step's loads in registers, `narrow_loads_in_flight` at a time, so a K step waits
(loads per thread / narrow_loads_in_flight) memory latencies.

An epilogue (`Problem.bias_dtype`, `activation`, `residual_dtype`) adds to the launch that writes
C: without a split, to each tile's epilogue its residual tile's and bias's bytes through the load
port and its activation's fp32 work (ACTIVATION_FLOPS, at the rate the SM's resident warps issue
it: `Constants.epilogue_warps_per_scheduler`), and to the memory terms the bytes the
epilogue reads (N·bias bytes + M·N·residual bytes, per batch entry; the bias once per tile in
L2); with a split, the same bytes and work to the reduction kernel, which applies it. A gated
product (`Problem.gated`: N columns, a gate's then an up projection's) is the N-column product
whose tiles store half their columns: C, its residual and the activation count M·N/2 elements
(plus GATE_FLOPS per element for the multiply); no split, swap, TMA or repacking is offered.

The TMA kernel (config.tma) runs the same equations with a shorter K step
(`tma_k_step_overhead_clocks`), a launch that costs `tma_setup_seconds` more, and, being
persistent (one flattened loop over its tiles), a latency chain that pays the fill and the
epilogue's store once per program, a fused epilogue's reads and activation (its own work) once per
tile (docs/model.md):

    sm_latency (TMA) = cold_starts · (fill + epilogue − work) + rounds · (loop latency + work)
    rounds = ceil(tiles_per_sm / programs_per_sm), cold_starts = ceil(rounds / tiles a program walks)

`estimate_arrays` evaluates these equations on every candidate at once (NumPy arrays, one per
`Config` field: `candidates.Candidates`), operation for operation as written here, so that each
element is what one config's evaluation gives, bit for bit; `estimate` is that function on one
config, with every term in an `Estimate` (what `explain` prints).

Python and NumPy: no JAX, no Triton. The constants are in `jtblas.constants.Constants` with their
sources; a calibrated profile (a later `jtblas calibrate`) replaces them without touching the
equations.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from jtblas.config import Config, Problem
from jtblas.constants import DEFAULT_CONSTANTS, Constants
from jtblas.gpus import Hardware
from jtblas.model import candidates, resources

PARTIAL_BYTES = resources.PARTIAL_BYTES  # split-K and K-phase partials are fp32
# fp32 FLOPs per output element of each epilogue activation (`jtblas.kernels.matmul.activated`):
# its PTX for sm_90 (Triton 3.6), counting an FMA-pipe instruction (add, mul, fma, min, max) as 2,
# a multi-function-unit one (ex2: a quarter of the FMA rate per SM) as 8 and a division as a
# reciprocal and two FMAs, 12. relu 1 max; silu 4 FMA-pipe, an ex2, a division; gelu_tanh 8, an
# ex2, a division; gelu (the branch-free erf) 18 and a division. A test recounts them.
ACTIVATION_FLOPS = {"": 0, "relu": 2, "silu": 28, "gelu_tanh": 36, "gelu": 48}
# fp32 FLOPs per output element of a gated product's pairing beyond its activation: the multiply
# (an estimate; the register shuffle that pairs the two halves is not counted).
GATE_FLOPS = 2
MIN_ASYNC_COPY_BYTES = resources.MIN_ASYNC_COPY_BYTES


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Estimate:
    """The predicted time of one config on one problem, with every term (seconds unless named).

    Schedule: tiles (over the whole batch), tiles_per_sm (on the busiest SM: the wave quantization), programs_per_sm
    (occupancy), waves (= ceil(tiles / (SMs · programs_per_sm))), active_sms, k_steps,
    padding_waste (fraction of the padded MMA work outside the problem), uses_wgmma.
    One K step of one program: step_mma, step_smem, step_load, step_overhead, step (= max of the
    first three + overhead: what it takes of its SM's resources), step_chain (the program's own
    time per step: step, or MMA + shared memory in place of their max where its warps take turns
    between the two, `mma_and_smem_take_turns`), step_latency (= latency / loads_in_flight: the
    least time per step that the pipeline's loads in flight allow).
    One tile: fill (the program's start cost, the first stage's latency and bytes), epilogue (store
    of the C tile, with epilogue_work), epilogue_work (a fused epilogue's own work: its bias and
    residual reads and its activation; 0 without one, or where a reduction kernel applies it),
    activation_issue_rate (the fraction of the SM's fp32 rate its resident warps issue the
    activation at), tile_throughput, tile_latency.
    Kernel: sm_throughput, sm_latency, sm (their max); dram_bytes, l2_bytes, l2_hit_rate,
    dram, l2, memory_latency, memory (= max(dram, l2) + memory_latency); launch (the TMA kernel's
    set-up included); predicted_seconds.
    Split-K: programs (= tiles · split_k: the grid; tiles_per_sm and waves count programs, k_steps
    is per program), partial_bytes (the fp32 partials, 0 without a split), reduction (the second
    kernel, launch included; 0 without a split). K phases: phase_copy (the phase-major copy of A,
    launch included; 0 without one).
    """

    config: Config
    tiles: int
    programs: int
    tiles_per_sm: int
    programs_per_sm: int
    waves: int
    active_sms: int
    k_steps: int
    padding_waste: float
    uses_wgmma: bool
    step_mma: float
    step_smem: float
    step_load: float
    step_overhead: float
    step: float
    step_chain: float
    step_latency: float
    fill: float
    epilogue: float
    epilogue_work: float
    activation_issue_rate: float
    tile_throughput: float
    tile_latency: float
    sm_throughput: float
    sm_latency: float
    sm: float
    dram_bytes: float
    l2_bytes: float
    l2_hit_rate: float
    dram: float
    l2: float
    memory_latency: float
    memory: float
    launch: float
    partial_bytes: float
    reduction: float
    phase_copy: float
    predicted_seconds: float

    def compose(self) -> float:
        """The total recomputed from the kernel-level terms (equals predicted_seconds)."""
        return self.launch + max(
            max(self.sm_throughput, self.sm_latency),
            max(self.dram, self.l2) + self.memory_latency,
        ) + self.reduction + self.phase_copy

    @property
    def bound(self) -> str:
        """What limits this config, in a word: launch, dram, l2 (memory system); latency (too
        few loads in flight per K step), fill (per-tile pipeline fill and epilogue, longer than
        the K loop, that no other program overlaps); mma+smem (one program's warps take turns between
        MMAs and shared-memory reads, `mma_and_smem_take_turns`); compute, smem, load-port (the busiest
        SM's per-step resources)."""
        return str(bounds_arrays({name: getattr(self, name) for name in _BOUND_TERMS}))


# The terms `bounds_arrays` reads.
_BOUND_TERMS = ("launch", "sm", "memory", "dram", "l2", "sm_latency", "sm_throughput", "step_latency",
                "step_chain", "step", "fill", "epilogue", "k_steps", "step_mma", "step_smem", "step_load")


def bounds_arrays(terms: dict) -> np.ndarray:
    """`Estimate.bound` of each candidate, from the terms of `estimate_arrays` (or one estimate's
    scalars): the first that holds of launch, dram / l2, latency, fill, mma+smem (those three only
    where the per-tile latency exceeds the throughput), then the largest per-step resource, compute,
    smem or load-port, in that order on ties."""
    t = {name: np.asarray(terms[name]) for name in _BOUND_TERMS}
    latency_side = t["sm_latency"] > t["sm_throughput"]
    memory_side = t["memory"] >= t["sm"]
    conditions = [
        t["launch"] >= np.maximum(t["sm"], t["memory"]),
        memory_side & (t["dram"] >= t["l2"]),
        memory_side,
        latency_side & (t["step_latency"] > t["step_chain"]),
        latency_side & (t["fill"] + t["epilogue"] > t["k_steps"] * t["step_chain"]),
        latency_side & (t["step_chain"] > t["step"]),
        (t["step_mma"] >= t["step_smem"]) & (t["step_mma"] >= t["step_load"]),
        t["step_smem"] >= t["step_load"],
    ]
    choices = ["launch", "dram", "l2", "latency", "fill", "mma+smem", "compute", "smem"]
    return np.select(conditions, choices, default="load-port")


def compute_bound_arrays(terms: dict[str, np.ndarray]) -> np.ndarray:
    """Whether each candidate's `Estimate.bound` is "compute" (the tensor cores), from the terms of
    `estimate_arrays` (`bounds_arrays`)."""
    return bounds_arrays(terms) == "compute"


def mma_seconds_per_flop(config: Config, problem: Problem, hardware: Hardware,
                         constants: Constants = DEFAULT_CONSTANTS) -> float:
    """Seconds per FLOP on one SM's tensor cores (or FMA units) for this tile's instructions.

    fp32 with input_precision "ieee" runs on FMA units (hardware.fp32_flops); otherwise the
    tensor-core rate of the dtype (fp32 meaning tf32), times the mma.sync fraction where a
    wgmma GPU runs a tile too short for wgmma (block_m < 64), or times `k_major_b_efficiency`
    where the pointer kernel's wgmma tile reads both operands K-major (NT; the TMA kernel's
    operand tiles arrive in shared memory in the same form whatever the layout).
    """
    if resources.uses_fma(problem):
        rate = hardware.fp32_flops
    else:
        rate = hardware.tensor_flops[problem.dtype]
        if hardware.wgmma and not resources.uses_wgmma(config, problem, hardware):
            rate *= constants.mma_sync_fraction_on_wgmma_gpu
        elif hardware.wgmma and problem.transpose_b and not problem.transpose_a and not config.tma:
            rate *= constants.k_major_b_efficiency
    return hardware.sm_count / rate


def loads_in_flight(config: Config, problem: Problem, hardware: Hardware,
                    constants: Constants = DEFAULT_CONSTANTS) -> int:
    """K steps whose loads are in flight while one step computes: num_stages − 2, at least 1; and
    1 where an operand is loaded narrower than 4 bytes at a time (`vector_bytes`): cp.async copies
    4, 8 or 16 bytes (PTX ISA, cp.async cp-size), so such loads are not pipelined, and each K step
    waits for its own. (On the H200, 2026-12-01: 1x50257x1600 and 4x50257x1600 bf16, whose B rows
    are 2-byte aligned, took 2537 and 2341 µs on 25 K steps per program against XLA's 66 µs.)

    Triton 3.6's software pipeliner waits for a stage's copies with those of num_stages − 2 later
    stages still pending, for wgmma, mma.sync and FMA tiles alike: our kernel compiled for sm_90
    and sm_80 has `ttg.async_wait {num = 2·(num_stages − 2)}` in its K loop (two async copies, A
    and B, per stage; checked 2026-11-30 for 16-, 64- and 128-row tiles, bf16 and fp32). Until
    on 2026-11-30 mma.sync tiles were given num_stages − 1.
    """
    if min(vector_bytes(problem, config, operand, constants) for operand in ("a", "b")) < MIN_ASYNC_COPY_BYTES:
        return 1  # the K step's narrow loads: `narrow_loads_in_flight` per thread
    return max(1, config.num_stages - 2)


def mma_and_smem_take_turns(config: Config, problem: Problem, hardware: Hardware,
                            constants: Constants = DEFAULT_CONSTANTS) -> bool:
    """True when one program's warps run their MMAs and shared-memory reads one after the other:
    an mma.sync tile (wgmma reads its operands from shared memory inside the tensor core) whose
    warps are one MMA tall (16 rows each) and alone on their schedulers (at most one per scheduler).

    mma.sync warps load each HMMA's fragments from shared memory themselves (ldmatrix) and the
    HMMA waits for them. A warp 16 rows tall issues about one ldmatrix per HMMA and has only
    block_n / 8 / warps_n independent HMMAs (2-4 in the decode tiles) to cover a load; with no
    other warp of its program on its scheduler, nothing fills the wait. (Co-resident programs
    still overlap each other: the latency term runs them side by side and the throughput term
    shares the SM's pipes; taller warp tiles, e.g. 64x64 per warp on the A100, have 32 HMMAs per
    k16 step to hide their loads behind.) Measured on the H200 (2026-12-01, BENCHMARKS.md at 705f18b;
    decode products, one program per SM, not DRAM-bound), ns per K step against the model with
    the pipes overlapped / taking turns: 16x64x256 w2 495-500 against 419 / 554, 16x64x256 w4
    642 against 492 / 627, 16x128x256 w4 1017-1048 against 784 / 1054.
    """
    if resources.uses_wgmma(config, problem, hardware) or config.num_warps > constants.warp_schedulers_per_sm:
        return False
    warps_m, _ = resources.warp_grid(config, problem, hardware)
    rows, _ = resources.mma_tile(config)
    return rows // warps_m <= resources.MMA_ROWS


def vector_bytes(problem: Problem, config: Config, operand: str,
                 constants: Constants = DEFAULT_CONSTANTS) -> int:
    """Width (bytes) of one load of `operand` ("a" or "b"), at most `full_vector_bytes`.

    A row-major operand is contiguous along its last axis; its rows start at multiples of the row
    stride (`Problem.lda`/`ldb`, dense by default), so loads are as wide as the largest power of
    two dividing stride·bytes. When the contiguous axis is K and K is not a multiple of block_k,
    the masked K loop (EVEN_K false) loads no wider than the largest power of two dividing K·bytes.
    When it is M (N), the tile's offsets wrap at M (N) and are contiguous only in runs of M's (N's)
    largest power-of-two divisor, so loads are no wider than that many elements either; a copy
    whose rows are padded past M (N) wraps at its row stride instead (`resources.padded_rows`).
    The TMA kernel's bulk copies are full width (its rows are 16-byte aligned, tails zero-filled).
    With K phases (`Config.k_phases`), an operand the phases shift is loaded at the width
    k_phases rows' stride allows (`resources.phase_vector_bytes`: its tiles start on such
    boundaries and wrap at multiples of it), a K-contiguous A at full width (its phase-major copy,
    `resources.phase_major_a`, zero-padded to whole K blocks), and a K-contiguous B one element at
    a time (a phase's K indices are k_phases apart).
    The ranking's own equation (`_vector_bytes_arrays`) on this one config.
    """
    one = candidates.Candidates.of([config])
    shifted = resources.shifted_operands(problem, config)[0 if operand == "a" else 1]
    phase_width = resources.phase_vector_bytes(problem, config.k_phases)
    return int(_vector_bytes_arrays(one, problem, operand, np.array([config.tma]), np.array([shifted]),
                                    np.array([phase_width]), constants)[0])


def swizzle_efficiency(problem: Problem, config: Config, operand: str,
                       constants: Constants = DEFAULT_CONSTANTS) -> float:
    """Fraction of shared-memory bandwidth that `operand`'s ("a" or "b") stage buffer gets.

    The buffer holds rows of the tile's extent along the operand's contiguous axis (block_k for a
    K-major operand, block_m or block_n otherwise). Rows of 128 bytes or more take the 128-byte
    swizzle, which spreads a row's 16-byte accesses over all 32 banks; shorter rows get the 64- or
    32-byte swizzle (PTX ISA, wgmma "Shared Memory Matrix Layout"), whose accesses share banks:
    the bandwidth falls with the row length, row bytes / 128.
    """
    element = problem.a_bytes if operand == "a" else problem.b_bytes
    if operand == "a":
        row = (config.block_m if problem.transpose_a else config.block_k) * element
    else:
        row = (config.block_k if problem.transpose_b else config.block_n) * element
    return min(1.0, row / constants.swizzle_bytes)


def line_efficiency(problem: Problem, config: Config, operand: str,
                    constants: Constants = DEFAULT_CONSTANTS) -> float:
    """Fraction of each DRAM line fetched for `operand` ("a" or "b") that the tile uses: a tile
    reads runs of (tile extent along the operand's contiguous axis) x bytes, and a run shorter
    than a 128-byte line wastes the rest (e.g. block_n 32 of a row-major bf16 B: 64-byte runs; a
    gated tile's block_n 64: two 32-column runs, the gate's and the up projection's). On the H100
    (2026-12-06), 1x57344x8192 gated bf16 with 16x64x64 tiles took 421 µs, the plain product with
    the same tiles 321 µs (XLA 311).
    The ranking's own equation (`_line_efficiency_arrays`) on this one config."""
    one = candidates.Candidates.of([config])
    return float(_line_efficiency_arrays(one, problem, operand, constants)[0])


def dram_operand_bytes(config: Config, problem: Problem, hardware: Hardware, programs_per_sm: int,
                       constants: Constants = DEFAULT_CONSTANTS) -> float:
    """Bytes of A and B read from DRAM, with L2 reuse under the grouped program order.

    The `resident = min(tiles, SMs · programs_per_sm)` programs running at once form a window of
    `rows` tile rows x `cols` tile columns (group_m rows at a time; row-major for group_m=1), and
    read each of its A row panels (block_m x K) and B column panels (K x block_n) from DRAM once.
    Across windows, an A panel stays in L2 while its group's other windows run if the group's A
    panels plus one window's B panels fit in the usable L2; B stays if all of B plus a group's A
    panels fit. Otherwise each window re-reads what it needs: A is read tiles_n/cols times and B
    tiles_m/rows times.
    """
    tiles_m = -(-problem.m // config.block_m)
    tiles_n = -(-problem.n // config.block_n)
    resident = min(tiles_m * tiles_n, hardware.sm_count * programs_per_sm)
    if config.group_m > 1:
        group_rows = min(config.group_m, tiles_m)
        rows = min(group_rows, resident)
        cols = min(tiles_n, -(-resident // group_rows))
    else:
        cols = min(tiles_n, resident)
        rows = min(tiles_m, -(-resident // tiles_n))
        group_rows = rows
    a_bytes = problem.m * problem.k * problem.a_bytes / line_efficiency(problem, config, "a", constants)
    b_bytes = problem.k * problem.n * problem.b_bytes / line_efficiency(problem, config, "b", constants)
    a_panel = min(config.block_m, problem.m) * problem.k * problem.a_bytes
    b_panel = min(config.block_n, problem.n) * problem.k * problem.b_bytes
    capacity = hardware.l2_bytes * constants.l2_usable_fraction
    a_reads = 1.0 if group_rows * a_panel + cols * b_panel <= capacity else tiles_n / cols
    b_reads = 1.0 if b_bytes + group_rows * a_panel <= capacity else tiles_m / rows
    return a_reads * a_bytes + b_reads * b_bytes


def estimate(config: Config, problem: Problem, hardware: Hardware,
             constants: Constants = DEFAULT_CONSTANTS) -> Estimate:
    """Predicted time of `config` on `problem` on `hardware`, with each term (see module doc):
    `estimate_arrays` on this one config, so that one candidate and all of them at once are the
    same equations."""
    one = candidates.Candidates.of([config])
    return estimates_of(one, estimate_arrays(one, problem, hardware, constants), configs=[config])[0]


def reduction_seconds(problem: Problem, split_k: int, hardware: Hardware,
                      constants: Constants = DEFAULT_CONSTANTS) -> float:
    """The split-K reduction kernel: a second launch, one memory latency, then its bytes (the
    split_k fp32 partials read, the output written) at DRAM bandwidth, or at the load ports of the
    SMs its programs (`resources.reduction_block` elements each, as
    `jtblas.launch_specs.sum_splits_spec` launches them) occupy if there are few: the busiest SM
    streams ceil(programs / SMs) whole blocks (padded, like every tile here)."""
    elements = problem.m * problem.n * problem.batch  # one launch sums every batch entry's partials
    bytes_per_element = split_k * PARTIAL_BYTES + problem.out_bytes
    moved = elements * bytes_per_element
    block = resources.reduction_block(elements, hardware)
    programs = -(-elements // block)
    busiest_sm_bytes = -(-programs // hardware.sm_count) * block * bytes_per_element
    load_port = constants.load_bytes_per_clock * hardware.clock_hz
    if problem.has_epilogue:
        # Its epilogue: the residual read beside the partials (and the bias, each element's
        # column), the activation on the busiest SM's fp32 units.
        epilogue_bytes = problem.residual_bytes + problem.bias_bytes
        moved += elements * problem.residual_bytes + problem.n * problem.bias_bytes * problem.batch
        busiest_sm_bytes += -(-programs // hardware.sm_count) * block * epilogue_bytes
        activation = (-(-programs // hardware.sm_count) * block * ACTIVATION_FLOPS[problem.activation]
                      * hardware.sm_count / hardware.fp32_flops)
        busiest_sm_bytes = max(busiest_sm_bytes, activation * load_port)
    streaming = max(moved / hardware.dram_bytes_per_s, busiest_sm_bytes / load_port)
    return hardware.launch_seconds + constants.memory_latency_seconds + streaming


def _warp_grid_arrays(rows: np.ndarray, columns: np.ndarray, warps: np.ndarray,
                      wgmma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`resources.warp_grid` of every candidate (its loops, run on all of them at once)."""
    warps_m = np.where(wgmma, 4, 1)
    warps_n = np.ones_like(warps_m)
    while True:
        more = warps_m * warps_n < warps
        if not more.any():
            return warps_m, warps_n
        # wgmma: double the rows' warps while rows exceed 16 per warp; mma.sync: while the rows
        # have as many 16-row fragments per warp as the columns have 16-column pairs (and room).
        sync_rows = (rows // 16 // warps_m >= columns // 16 // warps_n) & (warps_m < rows // 16)
        grow_m = more & np.where(wgmma, rows > 16 * warps_m, sync_rows)
        warps_m = np.where(grow_m, warps_m * 2, warps_m)
        warps_n = np.where(more & ~grow_m, warps_n * 2, warps_n)


# log2 of the powers of two a tile edge or warp count can be (`Config`: edges ≤ 512, ≤ 16 warps).
_LOG2 = np.zeros(513, dtype=np.int64)
_LOG2[[1 << i for i in range(10)]] = np.arange(10)


@functools.cache
def _warp_grids() -> tuple[np.ndarray, np.ndarray]:
    """`_warp_grid_arrays` of every (rows, columns, warps, wgmma) a `Config` can have, indexed by
    `_warp_grid_index`."""
    rows, columns, warps, wgmma = (np.array(axis).ravel() for axis in np.meshgrid(
        [1 << i for i in range(10)], [1 << i for i in range(10)], [1 << i for i in range(5)], [0, 1],
        indexing="ij"))
    return _warp_grid_arrays(rows, columns, warps, wgmma.astype(bool))


def _warp_grid_index(rows: np.ndarray, columns: np.ndarray, warps: np.ndarray, wgmma: np.ndarray) -> np.ndarray:
    return ((_LOG2[rows] * 10 + _LOG2[columns]) * 5 + _LOG2[warps]) * 2 + wgmma


def _vector_bytes_arrays(c: candidates.Candidates, problem: Problem, operand: str, tma: np.ndarray,
                         shifted: np.ndarray, phase_width: np.ndarray, constants: Constants) -> np.ndarray:
    """`vector_bytes` of every candidate (`shifted` by K phases, to loads `phase_width` bytes wide)."""
    element = problem.a_bytes if operand == "a" else problem.b_bytes
    full = constants.full_vector_bytes
    widths = resources.plain_load_bytes(problem, operand, c.block_k, full)
    if (not problem.transpose_a) if operand == "a" else problem.transpose_b:  # K-contiguous
        widths = np.where(c.k_phases > 1, full if operand == "a" else element, widths)
    return np.where(tma, full, np.where(shifted, np.minimum(full, phase_width), widths))


def _line_efficiency_arrays(c: candidates.Candidates, problem: Problem, operand: str,
                            constants: Constants) -> np.ndarray:
    """`line_efficiency` of every candidate."""
    element = problem.a_bytes if operand == "a" else problem.b_bytes
    if operand == "a":
        run = (c.block_m if problem.transpose_a else c.block_k) * element
        extent = problem.m if problem.transpose_a else problem.k
    else:
        # A gated tile's B columns are two runs of block_n / 2: the gate's and the up projection's.
        columns = c.block_n // 2 if problem.gated else c.block_n
        run = (c.block_k if problem.transpose_b else columns) * element
        extent = problem.k if problem.transpose_b else problem.n
    if extent * element < constants.line_bytes:
        return np.ones(len(c))
    # A whole short row is one run.
    return np.minimum(1.0, np.minimum(run, extent * element) / constants.line_bytes)


def estimate_arrays(c: candidates.Candidates, problem: Problem, hardware: Hardware,
                    constants: Constants = DEFAULT_CONSTANTS) -> dict[str, np.ndarray]:
    """Every term of `Estimate` (but `config`) for every candidate of `c` at once: one array per
    term, the equations of the module doc, operation for operation (the same IEEE operations in the
    same order, so each element equals what a scalar evaluation would give, bit for bit)."""
    bm, bn, bk = c.block_m, c.block_n, c.block_k
    warps, stages = c.num_warps, c.num_stages
    swap, tma = c.swap_ab, c.tma
    split = c.split_k * c.k_phases  # programs per tile: K splits or K phases, each with an fp32 partial
    element = problem.operand_bytes
    clock = hardware.clock_hz
    sms = hardware.sm_count
    # A shifted operand's tiles (K phases) start up to one phase vector's worth of elements before
    # C's (`resources.shifted_operands`, `resources.phase_vector_bytes`).
    phased = c.k_phases > 1
    shift_a, shift_b = (phased & shifted for shifted in resources.misaligned_rows_along_k(problem))
    phase_width = np.full(len(c), resources.VECTOR_BYTES, dtype=np.int64)
    for count in resources.k_phase_counts(problem):
        phase_width[c.k_phases == count] = resources.phase_vector_bytes(problem, count)
    reach = np.minimum(constants.full_vector_bytes, phase_width) // element - 1
    tiles_m = -(-(problem.m + reach * shift_a) // bm)
    tiles_n = -(-(problem.n + reach * shift_b) // bn)
    tiles = tiles_m * tiles_n * problem.batch
    grid = tiles * split
    k_steps = candidates.program_k_steps_arrays(c, problem)
    if c.derived:
        programs = np.maximum(1, c.table[candidates.ROWS.index("programs_per_sm")])
        wgmma = c.table[candidates.ROWS.index("uses_wgmma")] != 0
    else:
        programs = np.maximum(1, candidates.programs_per_sm_arrays(c, resources.operand_sizes(problem),
                                                                   problem.out_bytes, hardware,
                                                                   resources.epilogue_operands(problem)))
        wgmma = candidates.uses_wgmma_arrays(c, problem, hardware)
    tiles_per_sm = -(-grid // sms)
    waves = -(-grid // (sms * programs))
    active_sms = np.minimum(grid, sms)
    if hardware.busy_sm_rates:
        # A grid smaller than the GPU runs its SMs faster (`Hardware.busy_sm_rates`, measured by
        # `jtblas calibrate`): every clocked rate of the SM side scales by the busy fraction's rate.
        fractions, rates = zip(*hardware.busy_sm_rates)
        speed = np.interp(active_sms / sms, fractions, rates)
        clock = clock * speed
    else:
        speed = 1.0
    padded_flops = 2.0 * grid * bm * bn * k_steps * bk
    padding_waste = 1.0 - problem.flops / padded_flops

    # One K step of one program, on its SM.
    load_port = constants.load_bytes_per_clock * clock
    full = constants.full_vector_bytes
    a_element, b_element = problem.a_bytes, problem.b_bytes  # as stored (`element`: the compute dtype's)
    a_step = bm * bk * a_element
    b_step = bk * bn * b_element
    a_rows = bm if problem.transpose_a else np.minimum(bm, problem.m)  # M where A's rows are masked
    a_loaded = a_rows * bk * a_element
    # mma_seconds_per_flop
    if resources.uses_fma(problem):
        rate = hardware.fp32_flops
    else:
        rate = hardware.tensor_flops[problem.dtype]
        if hardware.wgmma:
            rate = np.where(wgmma, rate, rate * constants.mma_sync_fraction_on_wgmma_gpu)
            if problem.transpose_b and not problem.transpose_a:
                rate = np.where(wgmma & ~tma, rate * constants.k_major_b_efficiency, rate)
    step_mma = 2.0 * bm * bn * bk * (sms / (rate * speed))
    # Shared memory: the MMA operand reads plus the async copies writing the next stage.
    swapped = swap.any()
    rows, columns = (np.where(swap, bn, bm), np.where(swap, bm, bn)) if swapped else (bm, bn)
    grid_index = _warp_grid_index(rows, columns, warps, wgmma)
    warps_m, warps_n = (grid[grid_index] for grid in _warp_grids())
    column_readers = np.where(wgmma, rows // resources.WGMMA_ROWS, warps_m)
    row_bytes = bk * rows * warps_n * element
    column_bytes = bk * columns * column_readers * element
    a_reads, b_reads = ((np.where(swap, column_bytes, row_bytes), np.where(swap, row_bytes, column_bytes))
                        if swapped else (row_bytes, column_bytes))
    swizzle_a = np.minimum(1.0, (bm if problem.transpose_a else bk) * a_element / constants.swizzle_bytes)
    swizzle_b = np.minimum(1.0, (bk if problem.transpose_b else bn) * b_element / constants.swizzle_bytes)
    # A tf32 wgmma tile of the pointer kernel writes an operand stored M- (N-) major into its stage
    # buffer transposed, a bank word per clock (`Constants.transposed_copy_bytes_per_clock`).
    transposing = wgmma & ~tma
    transposed_a, transposed_b = (transposing & flag for flag in resources.transposed_operands(problem))
    smem_traffic = ((a_reads + np.where(transposed_a, 0, a_step)) / swizzle_a
                    + (b_reads + np.where(transposed_b, 0, b_step)) / swizzle_b)
    transposed_writes = np.where(transposed_a, a_step, 0) + np.where(transposed_b, b_step, 0)
    step_smem = (smem_traffic / (constants.smem_bytes_per_clock * clock)
                 + transposed_writes / (constants.transposed_copy_bytes_per_clock * clock))
    vector_a = _vector_bytes_arrays(c, problem, "a", tma, shift_a, phase_width, constants)
    vector_b = _vector_bytes_arrays(c, problem, "b", tma, shift_b, phase_width, constants)
    step_load = (a_loaded * full / vector_a + b_step * full / vector_b) / load_port
    step_overhead = np.where(tma, constants.tma_k_step_overhead_clocks / clock,
                             constants.k_step_overhead_clocks / clock)
    step = np.maximum(np.maximum(step_mma, step_smem), step_load) + step_overhead
    take_turns = ~wgmma & (warps <= constants.warp_schedulers_per_sm) & (rows // warps_m <= resources.MMA_ROWS)
    step_chain = np.where(take_turns, np.maximum(step_mma + step_smem, step_load) + step_overhead, step)
    latency = constants.memory_latency_seconds
    narrow = np.minimum(vector_a, vector_b) < MIN_ASYNC_COPY_BYTES
    narrow_loads = (np.where(vector_a < MIN_ASYNC_COPY_BYTES, a_loaded / vector_a, 0)
                    + np.where(vector_b < MIN_ASYNC_COPY_BYTES, b_step / vector_b, 0)) / (32 * warps)
    in_flight = np.where(narrow, 1, np.maximum(1, stages - 2))
    step_latency = np.where(narrow, latency * np.maximum(1.0, narrow_loads / constants.narrow_loads_in_flight),
                            latency / in_flight)

    # One tile: fill, the K loop, the epilogue.
    fill = constants.program_start_seconds + latency + (a_loaded + b_step) / load_port
    stored_bytes = resources.stored_bytes(split, problem.out_bytes)
    # A gated tile stores (and adds a residual to) half its columns: gate · up pairs.
    out_columns = bn // 2 if problem.gated else bn
    c_tile = bm * out_columns * stored_bytes
    store_width = np.where(shift_b, stored_bytes, full)
    epilogue = 2 * c_tile / (constants.smem_bytes_per_clock * clock) + c_tile * full / store_width / load_port
    # The epilogue's own work: its bias and residual reads and its activation, done by the warps
    # that run the next tile's MMAs.
    epilogue_work = np.zeros(len(c))
    issue_rate = np.ones(len(c))
    if problem.has_epilogue:
        fused = split == 1  # else the reduction kernel applies it (`reduction_seconds`)
        epilogue_reads = (bm * out_columns * problem.residual_bytes + bn * problem.bias_bytes) / load_port
        flops = ACTIVATION_FLOPS[problem.activation] + (GATE_FLOPS if problem.gated else 0)
        # With fewer resident warps per scheduler than `epilogue_warps_per_scheduler` the FMA
        # pipe idles between a warp's dependent instructions.
        resident_warps = warps * np.minimum(programs, tiles_per_sm)
        issue_rate = np.minimum(1.0, resident_warps / (constants.warp_schedulers_per_sm
                                                       * constants.epilogue_warps_per_scheduler))
        activation = bm * out_columns * flops * sms / hardware.fp32_flops / issue_rate
        epilogue_work = np.where(fused, epilogue_reads + activation, 0.0)
    epilogue = epilogue + epilogue_work
    tile_throughput = k_steps * step + epilogue
    loop_latency = np.maximum(k_steps * step_chain, (k_steps - 1) * step_latency)
    tile_latency = fill + loop_latency + epilogue

    sm_throughput = tiles_per_sm * tile_throughput
    # The TMA kernel is persistent and walks its tiles in one flattened loop: the next tile's loads
    # are in flight during this one's last K steps and its asynchronous store, so a program pays
    # the fill and the epilogue on its latency chain once, not per tile (the pointer kernel's next
    # program starts cold). Measured 2026-12-06 on the H100 through JAX, 128x128x64 w4 s4 with one
    # tile and three per SM: each further tile cost 12 K steps' time on the TMA kernel and 1.5 µs
    # more on the pointer kernel. The epilogue's own work (`epilogue_work`) stays on the chain of
    # every tile: the warps that compute it issue the next tile's MMAs (2026-12-06, H100 through
    # JAX, 8192x3072x768 with a bias, 128x256x64 w8 s4, 6 tiles per SM: exact GELU cost the TMA
    # kernel 36 µs more than relu, 6 µs a tile, none of it hidden behind the next tile).
    # Its grid is min(tiles, resident programs) over the whole batch (`launch_specs.tma_launch_spec`):
    # a batch of small products is walked as one list of tiles, entry after entry.
    rounds = -(-tiles_per_sm // programs)
    tiles_per_program = -(-tiles // np.minimum(tiles, sms * programs))
    cold_starts = -(-rounds // tiles_per_program)
    tma_chain = cold_starts * (fill + epilogue - epilogue_work) + rounds * (loop_latency + epilogue_work)
    sm_latency = np.where(tma, tma_chain, rounds * tile_latency)
    sm = np.maximum(sm_throughput, sm_latency)

    # dram_operand_bytes
    plain_m = -(-problem.m // bm)
    plain_n = -(-problem.n // bn)
    resident = np.minimum(plain_m * plain_n, sms * programs)
    grouped = c.group_m > 1
    group_rows = np.minimum(c.group_m, plain_m)
    window_rows = np.where(grouped, np.minimum(group_rows, resident), np.minimum(plain_m, -(-resident // plain_n)))
    window_cols = np.where(grouped, np.minimum(plain_n, -(-resident // group_rows)), np.minimum(plain_n, resident))
    group_rows = np.where(grouped, group_rows, window_rows)
    a_bytes = problem.m * problem.k * a_element / _line_efficiency_arrays(c, problem, "a", constants)
    b_bytes = problem.k * problem.n * b_element / _line_efficiency_arrays(c, problem, "b", constants)
    a_panel = np.minimum(bm, problem.m) * problem.k * a_element
    b_panel = np.minimum(bn, problem.n) * problem.k * b_element
    capacity = hardware.l2_bytes * constants.l2_usable_fraction
    a_rereads = np.where(group_rows * a_panel + window_cols * b_panel <= capacity, 1.0, plain_n / window_cols)
    b_rereads = np.where(b_bytes + group_rows * a_panel <= capacity, 1.0, plain_m / window_rows)
    operand_dram = (a_rereads * a_bytes + b_rereads * b_bytes) * problem.batch
    c_bytes = problem.m * problem.out_n * stored_bytes * split * problem.batch
    # Rows of C that do not start on 16-byte boundaries: each tile row's run of block_n columns
    # starts and ends inside a 32-byte sector the neighbouring tile also writes, and DRAM reads those
    # two sectors back to merge them (H100 through JAX, 2026-12-06: 1280x50257x16 and 4096x32001x1
    # TN, C rows 2-byte aligned, ran 88 and 155 µs with 256-column tiles against 115 and 266 with
    # 64-column ones; XLA 89 and 162).
    misaligned_c = (split == 1) & (resources.c_vector_bytes(problem) < full)
    c_run = np.minimum(out_columns, problem.out_n) * stored_bytes
    c_dram = c_bytes * np.where(misaligned_c, 1.0 + 2 * constants.sector_bytes / c_run, 1.0)
    dram_bytes = operand_dram + c_dram
    operand_l2 = grid * (a_rows * a_element + bn * b_element) * k_steps * bk
    l2_bytes = operand_l2 + c_bytes
    if problem.has_epilogue:
        residual_bytes = problem.m * problem.out_n * problem.residual_bytes * problem.batch
        dram_bytes = dram_bytes + np.where(fused, residual_bytes + problem.n * problem.bias_bytes * problem.batch, 0.0)
        l2_bytes = l2_bytes + np.where(fused, residual_bytes + tiles * bn * problem.bias_bytes, 0.0)
    l2_hit_rate = np.maximum(0.0, 1.0 - operand_dram / operand_l2)
    dram = dram_bytes / hardware.dram_bytes_per_s
    l2 = l2_bytes / hardware.l2_bytes_per_s
    memory = np.maximum(dram, l2) + latency

    launch = np.where(tma, hardware.launch_seconds + constants.tma_setup_seconds, hardware.launch_seconds + 0.0)
    partial_bytes = np.where(split > 1, c_bytes, 0.0)
    # The reduction kernel's time per split (a table indexed by split; 0 without one).
    splits = np.flatnonzero(np.bincount(split))
    if splits[-1] > 1:
        per_split = np.zeros(splits[-1] + 1)
        for s in splits[splits > 1].tolist():
            per_split[s] = reduction_seconds(problem, s, hardware, constants)
        reduction = per_split[split]
    else:
        reduction = np.zeros(len(c))
    # The phase-major copy of a K-contiguous A (`resources.phase_major_a`): read A, write the copy.
    phase_copy = np.zeros(len(c))
    if phased.any() and not problem.transpose_a:
        columns = resources.phase_columns(problem, c.k_phases, bk)
        moved = (problem.m * problem.k + problem.m * c.k_phases * columns) * element * problem.batch
        phase_copy = np.where(phased, moved / hardware.dram_bytes_per_s + hardware.launch_seconds, 0.0)
    predicted = launch + np.maximum(sm, memory) + reduction + phase_copy
    return dict(
        tiles=tiles, programs=grid, tiles_per_sm=tiles_per_sm, programs_per_sm=programs,
        waves=waves, active_sms=active_sms, k_steps=k_steps, padding_waste=padding_waste, uses_wgmma=wgmma,
        step_mma=step_mma, step_smem=step_smem, step_load=step_load, step_overhead=step_overhead,
        step=step, step_chain=step_chain, step_latency=step_latency, fill=fill, epilogue=epilogue,
        epilogue_work=epilogue_work, activation_issue_rate=issue_rate,
        tile_throughput=tile_throughput, tile_latency=tile_latency,
        sm_throughput=sm_throughput, sm_latency=sm_latency, sm=sm,
        dram_bytes=dram_bytes, l2_bytes=l2_bytes, l2_hit_rate=l2_hit_rate,
        dram=dram, l2=l2, memory_latency=np.full(len(c), latency), memory=memory,
        launch=launch, partial_bytes=partial_bytes, reduction=reduction, phase_copy=phase_copy,
        predicted_seconds=predicted,
    )


def estimates_of(c: candidates.Candidates, terms: dict[str, np.ndarray], index=None,
                 configs: list[Config] | None = None) -> list[Estimate]:
    """`Estimate`s of the candidates at `index` (default: all, in order), from `estimate_arrays`'
    terms; `configs`, if given, are those candidates' `Config`s (else built from the arrays)."""
    index = np.arange(len(c)) if index is None else np.asarray(index)
    if configs is None:
        configs = c.take(index).configs()
    columns = {name: values[index].tolist() for name, values in terms.items()}
    return [Estimate(config=config, **{name: column[i] for name, column in columns.items()})
            for i, config in enumerate(configs)]


def predicted_seconds(config: Config, problem: Problem, hardware: Hardware,
                      constants: Constants = DEFAULT_CONSTANTS) -> float:
    """Just the predicted time of `config` (seconds)."""
    return estimate(config, problem, hardware, constants).predicted_seconds


__all__ = ["Constants", "DEFAULT_CONSTANTS", "Estimate", "estimate", "estimate_arrays", "estimates_of",
           "predicted_seconds",
           "mma_seconds_per_flop", "loads_in_flight", "mma_and_smem_take_turns", "vector_bytes",
           "swizzle_efficiency", "dram_operand_bytes", "reduction_seconds", "bounds_arrays", "compute_bound_arrays"]
