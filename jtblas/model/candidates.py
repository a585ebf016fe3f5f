"""The search space: every kernel configuration the model ranks for one problem.

`candidates_for_problem` enumerates tiles, warps, stages and group sizes and keeps those that
pass `rejection_reasons` (each rule below, with its reason). The exhaustive-search oracle times
exactly this list, so it is kept to a few hundred configurations per shape by rules about what
the hardware can run and what the problem can use, never by predicted times.

`candidate_arrays` is the search as `select` runs it: the same rules on arrays of every
candidate at once (`Candidates`), without building a `Config`; `candidates_for_problem` is its
list of `Config`s in order, and `rejection_reasons` the rules one config at a time, in words
(a test checks that the two agree).

Python and NumPy: no JAX, no Triton.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

import numpy as np

from jtblas.config import Config, Problem
from jtblas.gpus import Hardware
from jtblas.model import resources

# Tile sizes, block_k and pipeline depths searched. 16 is tl.dot's smallest dimension; 256 is
# the largest tile edge whose fp32 accumulator fits in registers with 8 warps (256x128).
BLOCK_SIZES = (16, 32, 64, 128, 256)
BLOCK_K_SIZES = (16, 32, 64, 128, 256)
NUM_WARPS = (2, 4, 8)
NUM_STAGES = (2, 3, 4, 5, 6)
# group_m 1 is row-major program order; 8 is tutorial 03's grouped order (L2 reuse of B columns).
# The L2 term (cost.dram_operand_bytes) never predicts row-major order faster than grouped order
# for the same tile (checked over random shapes on all built-in GPUs), so the search keeps one
# group size per tile: 8 where there are several tile rows and columns, else 1 (every group size
# then walks the tiles in the same order). Searching both would double the oracle's work for
# nothing the model can tell apart.
GROUP_SIZES = (1, 8)

# A K step should read at least 64 bytes of each operand row (two 32-byte sectors): narrower
# steps halve the useful bytes per memory transaction and double the loop overhead. So block_k
# ≥ 32 for 2-byte dtypes, ≥ 16 for fp32 (unless K itself is smaller).
MIN_ROW_BYTES_PER_STEP = 64
# Each warp should own at least one m16n8 mma fragment of the accumulator: 16·8 / 32 threads = 4
# fp32 registers per thread; fewer and Triton replicates work across warps. Waived for the
# smallest tile, 16x16 with 4 warps (2 per thread), so that tiny problems always have a candidate.
MIN_ACCUMULATORS_PER_THREAD = 4
# 8 warps only for tiles of at least 64x128: below that, 4 warps already hold the tile and the
# extra warps only duplicate operand fragments (Triton's opt_flags and Inductor both bound
# num_warps by tile area; opt_flags uses bm·bn/4096).
MIN_TILE_ELEMENTS_PER_WARP_FOR_8_WARPS = 1024
# 2 warps only for tiles one mma.sync row tall (16 rows: decode products, M ≤ 16), where each warp
# then holds half the columns and the SM more programs. On the H200 they streamed the 20-50 MB
# decode weights 10% faster (0.654 → 0.720 of a copy, 2026-12-01, BENCHMARKS.md at 705f18b); a 32-row 2-warp
# tile the model preferred at 64x4096x4096 ran 0.63x the 4-warp 64-row one, so taller tiles keep
# 4 or 8 warps.
MAX_BLOCK_M_FOR_2_WARPS = 16
# Triton pipelines wgmma asynchronously (one MMA group left in flight across iterations), which
# holds one stage's buffers; with 2 stages no load could be in flight during the MMA, so wgmma
# tiles get at least 3 (none of tutorial 03's Hopper configs uses 2). On a wgmma GPU the
# mma.sync tiles (block_m < 64) get at least 3 as well: in the H200's exhaustive searches of 117
# benchmark shapes (2026-11-30) no 2-stage config was the best or within 2% of it, and the
# 2-stage decode tiles ran up to 5x slower than their 3-stage twins (a step waits a whole load).
MIN_STAGES_WGMMA = 3
# On wgmma GPUs, mma.sync tiles (block_m < 64) are searched only for M < 128: from 128 rows on,
# 64-row tiles waste at most a third of their rows to padding (M = 129 → 192 rows), and wgmma
# runs ~1.5x faster than mma.sync (Constants.mma_sync_fraction_on_wgmma_gpu, jtblas/constants.py).
MMA_SYNC_MAX_M_ON_WGMMA_GPU = 127

# Split-K (the K loop of each tile shared by split_k programs, fp32 partials summed by a second
# kernel) is searched only where the output has too few tiles to fill the GPU: fewer
# SPLIT_K_REFERENCE_TILE² tiles than SMs. A 128x128 wgmma tile is about the smallest that keeps the
# tensor cores busy (smaller ones are bound by shared memory, cost.step_smem), so below that count
# some SMs idle or run inefficient tiles whatever the plain tile. Everywhere else (4096³: 1024
# tiles) the search space is exactly the plain one. (Not 128x256, the largest tile: 72 of them
# over 3072x768 run one wave on 55% of the SMs, and the model would split them 3 ways, but such
# partial waves ran 0.85-0.93x their predicted time on the H200, 2026-12-06 record, where
# full waves run 1.01-1.06x: the model's rates are full-load ones, and a GPU with idle SMs runs
# the busy ones faster, the lead being the clock the power limit allows, a curve the built-in
# descriptions do not have yet, `Hardware.busy_sm_rates`; docs/decisions.md.)
# Every split from 2 to 8, then powers of two: a split exists to fill a wave, and doubling is too
# coarse for that where a few dozen tiles meet 132 SMs (36 tiles of 128x128 over 768x768: split 2
# fills 72 SMs, 4 needs two waves, 3 fills 108). Above 8 the splits are decode's few tiles
# streaming a long K, where the partials, not the wave, decide.
SPLIT_K_FACTORS = (2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128)
SPLIT_K_REFERENCE_TILE = 128
# Split only tiles at least SPLIT_K_MIN_BLOCK_N (64) wide, or as wide as the search allows: the
# point of splitting is to let an efficient tile fill the SMs, and narrower ones already fill them
# unsplit. Any height: until 2026-12-01 tiles also had to be 64 rows tall, but a decode product's
# best tile is 16 rows (mma.sync streams its weight better than a padded 64-row wgmma tile) and
# its long K leaves it few tiles: 16x64x128 k8 streamed 1x4096x14336's weight 1.24x faster than
# the best plain 16-row tile on the H200 (2026-11-30–2026-12-01, BENCHMARKS.md at 705f18b).
SPLIT_K_MIN_BLOCK_N = 64
# Each split reduces at least 2 K blocks: with one, the pipeline never overlaps a load with an MMA.
SPLIT_K_MIN_K_STEPS = 2
# A split grid of tiles·split programs stays under 2 waves of one program per SM (more only adds
# partial traffic), and of the splits that satisfy every rule only those are kept whose grid,
# multiplied by four, no longer fits (with powers of two: the two largest): a split whose grid could
# be four times larger leaves most SMs idle and loses to the larger splits.
SPLIT_K_MAX_WAVES = 2
# A split (split-K or K phases) writes batch · k_slices · M · N fp32 partials; above 1/32 of the
# device's memory (`Hardware.memory_bytes`: 4.4 GiB on the H200, 2.5 GiB on 80 GiB GPUs) the plan
# does not split, so the workspace never takes more than ~3% of what the model's own operands may
# use. A split-K grid stays under SPLIT_K_MAX_WAVES waves, so on a 132-SM H200 its largest tile
# (256x256, 256 KiB of fp32) writes at most 2 · 132 · 256 KiB = 66 MiB: the cap binds only on K
# phases (an alignment, whose partials grow with M · N and the batch). Not lower: a fixed 256 MiB
# changed 12 of 960 unbatched lm-head-like plans (M 64-384, odd vocabularies, 2026-12-04), e.g.
# 64x151937x4096 from 8 K phases to 2-byte loads (which ran 1x50257x1600 38x slower than XLA on
# the H200, `cost.loads_in_flight`); 1/32 changed none of them, nor any benchmark row (the
# largest unbatched pick writes 24.5 MiB: 16x50257 in 8 phases). A batch is what it bounds:
# before the model knew the batch, 4096 x 64x64x4096 planned a 1 GiB workspace for a 32 MiB result.
MAX_WORKSPACE_FRACTION = 1 / 32


def next_power_of_two(value: int) -> int:
    """Smallest power of two ≥ value (value ≥ 1)."""
    return 1 << (value - 1).bit_length()


def block_limits(problem: Problem, hardware: Hardware) -> tuple[int, int, int, int]:
    """(largest block_m, largest block_n, smallest block_k, largest block_k) for this problem.

    A block larger than the next power of two of its dimension only multiplies padding, except
    that on wgmma GPUs block_m may reach 64 (the smallest wgmma tile) even for M < 64: the model
    weighs 4x padded rows on wgmma against mma.sync's lower rate.
    """
    min_rows = resources.WGMMA_ROWS if hardware.wgmma else BLOCK_SIZES[0]
    max_m = max(min_rows, next_power_of_two(problem.m))
    max_n = max(BLOCK_SIZES[0], next_power_of_two(problem.n))
    max_k = max(BLOCK_K_SIZES[0], next_power_of_two(problem.k))
    min_k = min(max_k, max(BLOCK_K_SIZES[0], MIN_ROW_BYTES_PER_STEP // problem.operand_bytes))
    return max_m, max_n, min_k, max_k


def min_block_m(problem: Problem, hardware: Hardware) -> int:
    """Smallest block_m searched: 64 (wgmma) on wgmma GPUs once M ≥ 128, else 16."""
    if hardware.wgmma and problem.m > MMA_SYNC_MAX_M_ON_WGMMA_GPU:
        return resources.WGMMA_ROWS
    return BLOCK_SIZES[0]


def min_stages(problem: Problem, hardware: Hardware) -> int:
    """Fewest stages searched: 3 for tensor-core tiles on a wgmma GPU (see MIN_STAGES_WGMMA),
    else 2."""
    tensor_cores = hardware.wgmma and not resources.uses_fma(problem)
    return MIN_STAGES_WGMMA if tensor_cores else NUM_STAGES[0]


def rejection_reasons(config: Config, problem: Problem, hardware: Hardware) -> list[str]:
    """Why `config` is not in the search space for `problem` on `hardware`; empty if it is.

    Hard limits (the kernel cannot run, or spills): shared memory, threads, registers. Search
    limits (it runs, but can never be worth timing): blocks beyond the problem, too little work
    per warp, stages beyond the K loop, split-K where the tiles fill the GPU (`split_k_rejections`),
    K phase counts other than those that load the rows along K 4 bytes or more at a time
    (`resources.k_phase_counts`).
    """
    reasons = list(resources.fit_errors(config, problem, hardware))
    registers = resources.registers_per_thread(config)
    if registers > hardware.max_regs_per_thread:
        reasons.append(
            f"{registers} registers per thread ({resources.accumulator_registers_per_thread(config)} "
            f"accumulators + {resources.NON_ACCUMULATOR_REGISTERS}) exceed "
            f"{hardware.max_regs_per_thread}: the kernel would spill"
        )
    elif resources.uses_fma(problem) and resources.fma_tile_spills(config.block_m, config.block_n, config.block_k,
                                                                   config.num_warps):
        reasons.append(
            f"an FMA tile of {resources.accumulator_registers_per_thread(config)} accumulators per thread at "
            f"block_k={config.block_k}: over {resources.MAX_FMA_ACCUMULATORS_PER_THREAD} accumulators or "
            f"{resources.MAX_FMA_PRODUCTS_PER_THREAD} multiply-adds per K step, the kernel would spill"
        )
    elif resources.programs_per_sm(config, problem, hardware) < 1:
        reasons.append("not even one program fits on an SM")
    max_m, max_n, min_k, max_k = block_limits(problem, hardware)
    low_m = min_block_m(problem, hardware)
    if config.block_m not in BLOCK_SIZES or not low_m <= config.block_m <= max_m:
        reasons.append(f"block_m={config.block_m} outside {BLOCK_SIZES} in [{low_m}, {max_m}] for M={problem.m}")
    if config.block_n not in BLOCK_SIZES or config.block_n > max_n:
        reasons.append(f"block_n={config.block_n} outside {BLOCK_SIZES} up to {max_n} for N={problem.n}")
    if config.block_k not in BLOCK_K_SIZES or not min_k <= config.block_k <= max_k:
        reasons.append(f"block_k={config.block_k} outside [{min_k}, {max_k}] for K={problem.k}")
    if config.num_warps not in NUM_WARPS:
        reasons.append(f"num_warps={config.num_warps} not in {NUM_WARPS}")
    if not _enough_accumulators(config.block_m, config.block_n, config.num_warps):
        reasons.append(f"{config.num_warps} warps for a {config.block_m}x{config.block_n} tile leave a warp idle")
    if config.num_warps == 8 and config.block_m * config.block_n < 8 * MIN_TILE_ELEMENTS_PER_WARP_FOR_8_WARPS:
        reasons.append(f"8 warps for a {config.block_m}x{config.block_n} tile (4 warps hold it)")
    if config.num_warps == 2 and config.block_m > MAX_BLOCK_M_FOR_2_WARPS:
        reasons.append(f"2 warps for a {config.block_m}-row tile (only {MAX_BLOCK_M_FOR_2_WARPS}-row tiles take 2)")
    k_steps = program_k_steps(config, problem)
    low_s = min_stages(problem, hardware)
    if config.num_stages not in NUM_STAGES or not low_s <= config.num_stages <= max(low_s, k_steps + 1):
        reasons.append(
            f"num_stages={config.num_stages} outside {NUM_STAGES} in [{low_s}, {max(low_s, k_steps + 1)}] "
            f"for {k_steps} K steps"
        )
    if config.group_m not in _group_sizes(config.block_m, config.block_n, problem):
        reasons.append(f"group_m={config.group_m} not in {_group_sizes(config.block_m, config.block_n, problem)}")
    if config.split_k != 1:
        reasons.extend(split_k_rejections(config, problem, hardware))
    if config.k_phases != 1 and config.k_phases not in resources.k_phase_counts(problem):
        reasons.append(f"k_phases={config.k_phases}: {problem.short()} takes K phases of "
                       f"{list(resources.k_phase_counts(problem)) or 'none'} (its rows along K start "
                       f"{resources.MIN_ASYNC_COPY_BYTES} or more bytes apart only that many rows apart)")
    if config.k_phases != 1 and not workspace_fits(config.k_slices, problem, hardware):
        reasons.append(_workspace_words(config.k_slices, problem, hardware))
    copies = resources.shifted_copies_per_thread(config, problem)
    if copies > resources.MAX_SHIFTED_COPIES_PER_THREAD:
        reasons.append(f"k_phases={config.k_phases}: each thread issues {copies} copies of the shifted operand per "
                       f"stage, over {resources.MAX_SHIFTED_COPIES_PER_THREAD} (their addresses spill)")
    if config.k_phases == 1 and not config.tma:
        copies = int(resources.narrow_copies_per_thread(problem, config.block_m, config.block_n, config.block_k,
                                                        config.num_warps))
        limit = resources.max_narrow_copies_per_thread(problem)
        if copies > limit:
            reasons.append(f"each thread issues {copies} copies narrower than {resources.VECTOR_BYTES} bytes per stage "
                           f"(misaligned rows), over {limit} (their addresses spill)")
    if any(resources.transposed_operands(problem)) and not config.tma and resources.uses_wgmma(config, problem,
                                                                                                  hardware):
        copies = resources.transposed_copies_per_thread(problem, config.block_m, config.block_n, config.block_k,
                                                        config.num_warps)
        if copies > resources.MAX_TRANSPOSED_COPIES_PER_THREAD:
            reasons.append(f"each thread issues {copies} four-byte copies per stage of the fp32 operands tf32 "
                           f"wgmma takes transposed, over {resources.MAX_TRANSPOSED_COPIES_PER_THREAD} "
                           "(their addresses spill)")
        if config.k_phases > 1:
            reasons.append(f"k_phases={config.k_phases} on a tf32 wgmma tile: it copies the rows along K 4 bytes at "
                           "a time (transposed) whatever the phases")
    if config.swap_ab and not _swap_twin(config, problem, hardware):
        reasons.append(f"swap_ab: a {config.block_m}x{config.block_n} tile of {config.num_warps} warps is swapped "
                       "only where the swap turns its mma.sync into wgmma")
    if config.tma and not resources.uses_wgmma(config, problem, hardware):
        reasons.append("tma: the TMA kernel is offered for wgmma tiles only (its terms were measured on them)")
    return reasons


def program_k_steps(config: Config, problem: Problem) -> int:
    """K blocks one program reduces: all of K's, with split-K a slice of ⌈blocks / split_k⌉, with
    K phases those of its ⌈K / k_phases⌉ rows."""
    if config.k_phases > 1:
        phase_rows = -(-problem.k // config.k_phases)
        return -(-phase_rows // config.block_k)
    k_blocks = -(-problem.k // config.block_k)
    return -(-k_blocks // config.split_k)


def split_k_searched(problem: Problem, hardware: Hardware) -> bool:
    """True when split-K candidates are searched: fewer 128x128 output tiles than SMs, over the
    whole batch."""
    edge = SPLIT_K_REFERENCE_TILE
    return -(-problem.m // edge) * -(-problem.n // edge) * problem.batch < hardware.sm_count


def max_workspace_bytes(hardware: Hardware) -> int:
    """The most fp32 partials a split may write on `hardware` (MAX_WORKSPACE_FRACTION of its memory)."""
    return int(hardware.memory_bytes * MAX_WORKSPACE_FRACTION)


def workspace_fits(k_slices: int, problem: Problem, hardware: Hardware) -> bool:
    """A split into `k_slices` keeps its fp32 partials within `max_workspace_bytes(hardware)`."""
    partials = problem.batch * k_slices * problem.m * problem.n * resources.PARTIAL_BYTES
    return partials <= max_workspace_bytes(hardware)


def _split_fits(split_k: int, tiles: int, k_blocks: int, hardware: Hardware, problem: Problem) -> bool:
    return (split_k <= SPLIT_K_FACTORS[-1] and k_blocks >= SPLIT_K_MIN_K_STEPS * split_k
            and tiles * split_k < SPLIT_K_MAX_WAVES * hardware.sm_count and workspace_fits(split_k, problem, hardware))


def _split_tile(block_n: int, problem: Problem, hardware: Hardware) -> bool:
    """The tile is wide enough to be split (see SPLIT_K_MIN_BLOCK_N)."""
    _, max_n, _, _ = block_limits(problem, hardware)
    return block_n >= min(SPLIT_K_MIN_BLOCK_N, max_n)


def split_k_rejections(config: Config, problem: Problem, hardware: Hardware) -> list[str]:
    """Why split_k > 1 is not searched for this config (the SPLIT_K_* rules); empty if it is."""
    split = config.split_k
    if split not in SPLIT_K_FACTORS:
        return [f"split_k={split} not in {SPLIT_K_FACTORS}"]
    edge = SPLIT_K_REFERENCE_TILE
    if not split_k_searched(problem, hardware):
        batch = f" x batch {problem.batch}" if problem.batch > 1 else ""
        return [f"{-(-problem.m // edge) * -(-problem.n // edge)} tiles of {edge}x{edge}{batch} fill the "
                f"{hardware.sm_count} SMs: no split-K"]
    reasons = []
    if not _split_tile(config.block_n, problem, hardware):
        reasons.append(f"a {config.block_m}x{config.block_n} tile is not split (narrow: fills SMs unsplit)")
    if not workspace_fits(split, problem, hardware):
        reasons.append(_workspace_words(split, problem, hardware))
    tiles = -(-problem.m // config.block_m) * -(-problem.n // config.block_n) * problem.batch
    k_blocks = -(-problem.k // config.block_k)
    if k_blocks < SPLIT_K_MIN_K_STEPS * split:
        reasons.append(f"{k_blocks} K blocks leave fewer than {SPLIT_K_MIN_K_STEPS} per split of {split}")
    if tiles * split >= SPLIT_K_MAX_WAVES * hardware.sm_count:
        reasons.append(f"{tiles} tiles x split {split} reach {SPLIT_K_MAX_WAVES} waves of {hardware.sm_count} SMs")
    if not reasons and _split_fits(4 * split, tiles, k_blocks, hardware, problem):
        reasons.append(f"split {4 * split} also fits: split {split} leaves most SMs idle")
    return reasons


def _workspace_words(k_slices: int, problem: Problem, hardware: Hardware) -> str:
    partials = problem.batch * k_slices * problem.m * problem.n * resources.PARTIAL_BYTES
    return (f"{k_slices} K slices write {partials / 2**20:.0f} MiB of fp32 partials, over the "
            f"{max_workspace_bytes(hardware) // 2**20} MiB workspace cap (1/32 of {hardware.name}'s memory)")


def _enough_accumulators(block_m: int, block_n: int, num_warps: int) -> bool:
    """Every warp holds an mma fragment (see MIN_ACCUMULATORS_PER_THREAD), or the tile is the
    smallest one with 4 warps."""
    if (block_m, block_n, num_warps) == (BLOCK_SIZES[0], BLOCK_SIZES[0], NUM_WARPS[0]):
        return True
    return block_m * block_n // (32 * num_warps) >= MIN_ACCUMULATORS_PER_THREAD


def _group_sizes(block_m: int, block_n: int, problem: Problem) -> tuple[int, ...]:
    """The group size searched for this tile (see GROUP_SIZES): grouped order where there are
    several tile rows and columns, else 1."""
    tiles_m = -(-problem.m // block_m)
    tiles_n = -(-problem.n // block_n)
    return (GROUP_SIZES[-1],) if tiles_m > 1 and tiles_n > 1 else (GROUP_SIZES[0],)


def candidates_for_problem(problem: Problem, hardware: Hardware) -> list[Config]:
    """Every configuration the model ranks for `problem`, in a fixed order (block_m, block_n,
    block_k, num_warps, num_stages, group_m, split_k, k_phases, swap_ab, tma ascending). Equal to the
    configs of BLOCK_SIZES x ... x GROUP_SIZES x (1, *SPLIT_K_FACTORS) x (1, *resources.k_phase_counts) x
    (False, True) x (False, True) with no `rejection_reasons`, computed with the same integer
    arithmetic on arrays (`candidate_arrays`, what `select` ranks) without building rejected
    Configs."""
    found = candidate_arrays(problem, hardware)
    return found.take(np.argsort(found.order_key(), kind="stable")).configs()


def _swap_twin(config: Config, problem: Problem, hardware: Hardware) -> bool:
    """The swapped `config` runs wgmma where its unswapped twin runs mma.sync."""
    return (resources.uses_wgmma(config, problem, hardware)
            and not resources.uses_wgmma(dataclasses.replace(config, swap_ab=False), problem, hardware))


def _order(config: Config) -> tuple[int, ...]:
    return (config.block_m, config.block_n, config.block_k, config.num_warps, config.num_stages,
            config.group_m, config.split_k, config.k_phases, config.swap_ab, config.tma)


# --- The same search space as arrays (what `select` ranks) ----------------------------------------

FIELDS = ("block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m", "split_k", "k_phases",
          "swap_ab", "tma")


class Candidates:
    """Configurations as a struct of arrays: one int64 row per `Config` field (`FIELDS`; swap_ab
    and tma as 0/1, read back as bool arrays), column i the i-th configuration. The model's
    equations (`cost.estimate_arrays`) evaluate every candidate at once on these; a `Config` is
    built only for the configurations asked for (`config(i)`).

    Three more rows hold what the search computes anyway and the equations need (`DERIVED`):
    programs per SM, whether the tile runs wgmma, and programs per SM of the tile storing fp32
    partials (its split and K-phase twins' count), valid where `derived` is true (the search's
    candidates; `of` leaves them to the equations)."""

    __slots__ = ("table", "derived")

    def __init__(self, table: np.ndarray, derived: bool = False):
        self.table = table
        self.derived = derived

    def __len__(self) -> int:
        return self.table.shape[1]

    @classmethod
    def of(cls, configs: list[Config]) -> Candidates:
        """The arrays of `configs`, in their order."""
        fields = [[getattr(c, name) for c in configs] for name in FIELDS]
        unknown = [[-1] * len(configs)] * len(DERIVED)
        return cls(np.array(fields + unknown, dtype=np.int64).reshape(len(ROWS), len(configs)))

    block_m = property(lambda self: self.table[0])
    block_n = property(lambda self: self.table[1])
    block_k = property(lambda self: self.table[2])
    num_warps = property(lambda self: self.table[3])
    num_stages = property(lambda self: self.table[4])
    group_m = property(lambda self: self.table[5])
    split_k = property(lambda self: self.table[6])
    k_phases = property(lambda self: self.table[7])
    swap_ab = property(lambda self: self.table[8] != 0)
    tma = property(lambda self: self.table[9] != 0)

    def take(self, index) -> Candidates:
        """The candidates at `index` (a boolean mask or integer indices), in that order."""
        return Candidates(self.table[:, index], self.derived)

    def config(self, i: int) -> Config:
        """The i-th candidate as a `Config`."""
        return self.take([i]).configs()[0]

    def configs(self) -> list[Config]:
        """Every candidate as a `Config`, in order."""
        return [Config(block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=s, group_m=g, split_k=sk,
                       k_phases=p, swap_ab=bool(swap), tma=bool(tma))
                for bm, bn, bk, w, s, g, sk, p, swap, tma in self.table[:len(FIELDS)].T.tolist()]

    def order_key(self) -> np.ndarray:
        """One int64 per candidate that sorts as `_order` does (each field in its own bits)."""
        key = np.zeros(len(self), dtype=np.int64)
        for row, bits in zip(self.table, _ORDER_BITS):
            key = (key << bits) | row
        return key


# The rows after the fields (see `Candidates`).
DERIVED = ("programs_per_sm", "uses_wgmma", "partial_programs_per_sm")
ROWS = FIELDS + DERIVED
# Bits of each field in `Candidates.order_key` (largest values: blocks 512, warps 16, stages 8,
# group 64, split 256, phases 8, flags 1): 10+10+10+5+4+7+9+4+1+1 = 61 bits.
_ORDER_BITS = (10, 10, 10, 5, 4, 7, 9, 4, 1, 1)


def _concatenate(parts: list[Candidates]) -> Candidates:
    return Candidates(np.concatenate([p.table for p in parts], axis=1), all(p.derived for p in parts))


def _with(candidates: Candidates, **values) -> Candidates:
    """`candidates` with the named rows set to one value each (a twin of every candidate)."""
    table = candidates.table.copy()
    for name, value in values.items():
        table[ROWS.index(name)] = value
    return Candidates(table, candidates.derived)


def _product_grid() -> Candidates:
    """Every (block_m, block_n, num_warps, block_k, num_stages) of the search, plain (group_m,
    split_k, k_phases 1, neither swapped nor TMA)."""
    grid = np.array([(bm, bn, bk, w, s, 1, 1, 1, 0, 0, -1, -1, -1) for bm, bn, w, bk, s in
                     itertools.product(BLOCK_SIZES, BLOCK_SIZES, NUM_WARPS, BLOCK_K_SIZES, NUM_STAGES)],
                    dtype=np.int64)
    return Candidates(np.ascontiguousarray(grid.T))


@functools.lru_cache(maxsize=64)
def _static_plain(hardware: Hardware, sizes: tuple[int, int, int, int], out_bytes: int, low_s: int, fma: bool,
                  tma: bool, epilogue: tuple[bool, bool] = (False, False)) -> Candidates:
    """The plain candidates (or with `tma`, their TMA twins, whose epilogue reads the operands
    `epilogue` names, `resources.epilogue_operands`) of the rules that depend on nothing
    but the hardware, the operand sizes (`resources.operand_sizes`) and the output's and the
    fewest stages: registers, warps per
    tile, shared memory, occupancy; with their programs per SM (also storing fp32 partials, for
    their split and K-phase twins) and wgmma (`fma`: the tile runs on the FMA units,
    `resources.uses_fma`). `candidate_arrays` then applies the problem's limits."""
    grid = _product_grid()
    bm, bn, bk, warps, stages = grid.block_m, grid.block_n, grid.block_k, grid.num_warps, grid.num_stages
    accumulators = bm * bn // (32 * warps)
    smallest = (bm == BLOCK_SIZES[0]) & (bn == BLOCK_SIZES[0]) & (warps == NUM_WARPS[0])
    keep = ((smallest | (accumulators >= MIN_ACCUMULATORS_PER_THREAD))
            & (accumulators + resources.NON_ACCUMULATOR_REGISTERS <= hardware.max_regs_per_thread)
            & ~((warps == 8) & (bm * bn < 8 * MIN_TILE_ELEMENTS_PER_WARP_FOR_8_WARPS))
            & ~((warps == 2) & (bm > MAX_BLOCK_M_FOR_2_WARPS))
            & (low_s <= stages)
            & ~(fma & resources.fma_tile_spills(bm, bn, bk, warps))
            & (_pipeline_bytes(bm, bn, bk, stages, sizes) <= hardware.smem_per_block))
    plain = grid.take(keep)
    programs = programs_per_sm_arrays(plain, sizes, out_bytes, hardware)
    plain = plain.take(programs >= 1)
    plain.table[ROWS.index("programs_per_sm")] = programs[programs >= 1]
    plain.table[ROWS.index("partial_programs_per_sm")] = programs_per_sm_arrays(
        _with(plain, split_k=2), sizes, out_bytes, hardware)
    wgmma = ((plain.block_m % resources.WGMMA_ROWS == 0) & (plain.num_warps % 4 == 0)
             & hardware.wgmma & (not fma))
    plain.table[ROWS.index("uses_wgmma")] = wgmma
    plain.derived = True
    if not tma:
        return plain
    # The TMA kernel's twins of the plain wgmma tiles (rows a multiple of 64, a warpgroup's warps)
    # that fit with its store staging and epilogue scratch (`resources.fit_errors`,
    # `resources.tma_errors` per config).
    twins = _with(plain.take(wgmma), tma=1)
    biggest = np.maximum(np.maximum(twins.block_m, twins.block_n), twins.block_k)
    smem = shared_memory_arrays(twins, sizes, out_bytes, epilogue)
    programs = _programs_per_sm(twins, smem, hardware)
    keep = ((biggest <= resources.TMA_MAX_BOX) & (smem <= hardware.smem_per_block)
            & (32 * twins.num_warps <= 1024) & (programs >= 1))
    twins = twins.take(keep)
    twins.table[ROWS.index("programs_per_sm")] = programs[keep]
    twins.table[ROWS.index("partial_programs_per_sm")] = programs[keep]  # never split
    return twins


def uses_wgmma_arrays(candidates: Candidates, problem: Problem, hardware: Hardware) -> np.ndarray:
    """`resources.uses_wgmma` of every candidate."""
    rows = np.where(candidates.swap_ab, candidates.block_n, candidates.block_m)
    if not hardware.wgmma or resources.uses_fma(problem):
        return np.zeros(len(candidates), dtype=bool)
    return (rows % resources.WGMMA_ROWS == 0) & (candidates.num_warps % 4 == 0)


def _pipeline_bytes(bm, bn, bk, stages, sizes: tuple[int, int, int, int]):
    """`resources.shared_memory_bytes` of the pointer kernel, on arrays."""
    a_bytes, b_bytes, a_cast, b_cast = sizes
    return stages * (bm * a_bytes + bn * b_bytes) * bk + (bm * a_cast + bn * b_cast) * bk


def shared_memory_arrays(candidates: Candidates, sizes: tuple[int, int, int, int], out_bytes: int,
                         epilogue: tuple[bool, bool] = (False, False)) -> np.ndarray:
    """`resources.shared_memory_bytes` of every candidate."""
    bm, bn, tma = candidates.block_m, candidates.block_n, candidates.tma
    pipeline = _pipeline_bytes(bm, bn, candidates.block_k, candidates.num_stages, sizes)
    if tma.all():
        return pipeline + resources.tma_extra_bytes(bm, bn, candidates.num_warps, out_bytes, epilogue)
    stored = resources.stored_bytes(candidates.split_k * candidates.k_phases, out_bytes)
    pointer = np.maximum(pipeline, resources.epilogue_bytes(bm, bn, stored))
    if not tma.any():
        return pointer
    return np.where(tma, pipeline + resources.tma_extra_bytes(bm, bn, candidates.num_warps, out_bytes, epilogue),
                    pointer)


def programs_per_sm_arrays(candidates: Candidates, sizes: tuple[int, int, int, int], out_bytes: int,
                           hardware: Hardware, epilogue: tuple[bool, bool] = (False, False)) -> np.ndarray:
    """`resources.programs_per_sm` of every candidate (at least 0), for operands of `sizes`
    (`resources.operand_sizes`), an output of `out_bytes` and an epilogue reading the operands
    `epilogue` names (`resources.epilogue_operands`)."""
    return _programs_per_sm(candidates, shared_memory_arrays(candidates, sizes, out_bytes, epilogue), hardware)


def _programs_per_sm(candidates: Candidates, smem: np.ndarray, hardware: Hardware) -> np.ndarray:
    """`programs_per_sm_arrays` of candidates whose shared memory per program is `smem`."""
    bm, bn, warps = candidates.block_m, candidates.block_n, candidates.num_warps
    by_smem = hardware.smem_per_sm // (smem + resources.SHARED_MEMORY_RESERVED_PER_BLOCK)
    unit = resources.REGISTER_ALLOCATION_UNIT
    per_thread = -(-(bm * bn // (32 * warps) + resources.NON_ACCUMULATOR_REGISTERS) // unit) * unit
    by_registers = hardware.regs_per_sm // (per_thread * 32 * warps)
    by_threads = hardware.max_threads_per_sm // (32 * warps)
    return np.minimum(np.minimum(by_smem, by_registers), np.minimum(by_threads, resources.MAX_BLOCKS_PER_SM))


def program_k_steps_arrays(candidates: Candidates, problem: Problem) -> np.ndarray:
    """`program_k_steps` of every candidate."""
    bk = candidates.block_k
    phases = candidates.k_phases
    k_blocks = -(-problem.k // bk)
    if not (phases > 1).any():
        return -(-k_blocks // candidates.split_k)
    phase_rows = -(-problem.k // phases)
    phase_steps = -(-phase_rows // bk)
    split_steps = -(-k_blocks // candidates.split_k)
    return np.where(phases > 1, phase_steps, split_steps)


def candidate_arrays(problem: Problem, hardware: Hardware) -> Candidates:
    """`candidates_for_problem` as arrays, without building a `Config` and not in its order
    (`Candidates.order_key` gives it): the same rules on the whole grid of tiles, warps and stages
    at once (those of the hardware alone cached, `_static_plain`), then the split-K, K-phase,
    swapped and TMA twins."""
    max_m, max_n, min_k, max_k = block_limits(problem, hardware)
    low_m = min_block_m(problem, hardware)
    low_s = min_stages(problem, hardware)
    sizes, out_bytes = resources.operand_sizes(problem), problem.out_bytes

    def in_range(static: Candidates) -> Candidates:
        bm, bn, bk = static.block_m, static.block_n, static.block_k
        k_steps = -(-problem.k // bk)
        found = static.take((low_m <= bm) & (bm <= max_m) & (bn <= max_n) & (min_k <= bk) & (bk <= max_k)
                            & (static.num_stages <= np.maximum(low_s, k_steps + 1)))
        several = (-(-problem.m // found.block_m) > 1) & (-(-problem.n // found.block_n) > 1)
        found.table[5] = np.where(several, GROUP_SIZES[-1], GROUP_SIZES[0])
        return found

    fma = resources.uses_fma(problem)
    unphased = in_range(_static_plain(hardware, sizes, out_bytes, low_s, fma, False))
    # Without K phases, misaligned rows' narrow copies must not spill their addresses
    # (`resources.narrow_copies_per_thread`); the K-phase twins load at their own widths.
    copies = resources.narrow_copies_per_thread(problem, unphased.block_m, unphased.block_n, unphased.block_k,
                                                unphased.num_warps)
    spilling = copies > resources.max_narrow_copies_per_thread(problem)
    plain = unphased.take(~spilling) if np.any(spilling) else unphased
    if problem.gated:  # the plain pointer kernel only (`resources.fit_errors`)
        return _epilogue_fits(plain, problem, hardware)
    parts = [plain]
    if split_k_searched(problem, hardware):
        parts.append(_storing_partials(_split_arrays(plain, problem, hardware, low_s)))
    # The K-phase twins (`Config.k_phases`) where an operand stored with its rows along K is not
    # 16-byte aligned row to row: each phase count that loads it 4 bytes or more at a time
    # (`resources.k_phase_counts`), with the stage range of a phase's shorter K loop.
    for phases in resources.k_phase_counts(problem):
        if workspace_fits(phases, problem, hardware):
            twins = _with(unphased, k_phases=phases)
            twins = twins.take((twins.num_stages <= np.maximum(low_s, program_k_steps_arrays(twins, problem) + 1))
                               & (resources.phase_copies_per_thread(problem, phases, twins.block_m, twins.block_n,
                                                                    twins.block_k, twins.num_warps)
                                  <= resources.MAX_SHIFTED_COPIES_PER_THREAD))
            parts.append(_storing_partials(twins))
    # The swapped twins (`Config.swap_ab`) of the mma.sync candidates whose swapped tile runs wgmma
    # instead: on a wgmma GPU, tiles under 64 rows but 64 or more columns wide with 4 or 8 warps.
    # The twin loads, holds and stores what the tile does; only its MMA differs (wgmma reads both
    # operands from shared memory, so its warps no longer wait on ldmatrix:
    # `cost.mma_and_smem_take_turns`).
    if hardware.wgmma and not fma:
        unswapped = parts[0] if len(parts) == 1 else _concatenate(parts)
        turns = ((unswapped.block_m % resources.WGMMA_ROWS != 0) & (unswapped.block_n % resources.WGMMA_ROWS == 0)
                 & (unswapped.num_warps % 4 == 0))
        if turns.any():
            parts.append(_with(unswapped.take(turns), swap_ab=1, uses_wgmma=1))
    # The TMA kernel's twins of the plain wgmma candidates it can run (`resources.tma_errors`) with
    # its store staging in shared memory (`resources.shared_memory_bytes`). The kernel also runs
    # mma.sync tiles, but its equations' TMA terms (set-up per launch, K step) were measured on
    # wgmma tiles only (2026-12-01), so those twins are not offered (docs/model.md). With an
    # epilogue (`matmul_tma_epilogue_kernel`), each twin also holds its conversion scratch.
    if hardware.tma and not resources.tma_errors(Config(tma=True), problem, hardware):  # the problem's limits
        parts.append(in_range(_static_plain(hardware, sizes, out_bytes, low_s, fma, True,
                                            resources.epilogue_operands(problem))))
    found = parts[0] if len(parts) == 1 else _concatenate(parts)
    # The pointer kernel's wgmma tiles copy an fp32 operand stored M- or N-major one element at a
    # time (`resources.transposed_operands`): past a limit their addresses spill, and K phases,
    # which exist to widen the copies of exactly those operands (rows along K), widen nothing.
    if any(resources.transposed_operands(problem)):
        copies = resources.transposed_copies_per_thread(problem, found.block_m, found.block_n, found.block_k,
                                                        found.num_warps)
        transposing = uses_wgmma_arrays(found, problem, hardware) & ~found.tma
        found = found.take(~(transposing & ((copies > resources.MAX_TRANSPOSED_COPIES_PER_THREAD)
                                            | (found.k_phases > 1))))
    return _epilogue_fits(found, problem, hardware)


def _storing_partials(twins: Candidates) -> Candidates:
    """Split or K-phase twins of plain candidates, with the programs per SM of a tile storing fp32
    partials (whose conversion may take more shared memory: `resources.shared_memory_bytes`),
    those that fit."""
    programs = twins.table[ROWS.index("partial_programs_per_sm")]
    found = twins.take(programs >= 1)
    found.table[ROWS.index("programs_per_sm")] = found.table[ROWS.index("partial_programs_per_sm")]
    return found


def _epilogue_fits(found: Candidates, problem: Problem, hardware: Hardware) -> Candidates:
    """The candidates whose fused epilogue's registers fit (`resources.fit_errors`)."""
    if not problem.residual_dtype:
        return found
    accumulators = found.block_m * found.block_n // (32 * found.num_warps)
    registers = accumulators + -(-accumulators * problem.residual_bytes // 4) + resources.EPILOGUE_ADDRESS_REGISTERS
    fused = (found.split_k == 1) & (found.k_phases == 1)
    return found.take(~fused | (registers <= hardware.max_regs_per_thread))


def _split_arrays(plain: Candidates, problem: Problem, hardware: Hardware, low_s: int) -> Candidates:
    """The split-K variants of the plain candidates that `split_k_rejections` keeps: every plain
    candidate wide enough (`_split_tile`), with each split factor that fits while four times it
    does not (`_split_fits`); a split config differs from a plain one only in split_k, and its
    stage range is that of its shorter K loop, a subset of the plain one's."""
    _, max_n, _, _ = block_limits(problem, hardware)
    wide = plain.take(plain.block_n >= min(SPLIT_K_MIN_BLOCK_N, max_n))
    tiles = (-(-problem.m // wide.block_m)) * (-(-problem.n // wide.block_n)) * problem.batch
    k_blocks = -(-problem.k // wide.block_k)

    def fits(split: int) -> np.ndarray:
        return ((split <= SPLIT_K_FACTORS[-1]) & (k_blocks >= SPLIT_K_MIN_K_STEPS * split)
                & (tiles * split < SPLIT_K_MAX_WAVES * hardware.sm_count)
                & workspace_fits(split, problem, hardware))

    parts = []
    for split in SPLIT_K_FACTORS:
        keep = fits(split) & ~fits(4 * split) & (wide.num_stages <= np.maximum(low_s, -(-k_blocks // split) + 1))
        parts.append(_with(wide.take(keep), split_k=split))
    return _concatenate(parts)
