"""On-chip resources one program of the GEMM kernel uses, and whether a config fits the GPU.

Pure Python; shared by the ops layer (to reject a forced config that cannot run) and the model
(to filter candidates).
"""

from __future__ import annotations

import numpy as np

from jtblas.config import Config, Problem
from jtblas.gpus import Hardware

# Registers per thread that are not accumulators: addresses, loop counters, masks, the
# operand fragments of one mma step. ~64 is what ptxas reports for a 128x128x64 bf16 kernel beyond
# its 64 accumulator registers (nvcc -Xptxas -v on Triton 3.x kernels; also tritonBLAS's port notes).
NON_ACCUMULATOR_REGISTERS = 64

# Bytes per element of the TMA kernel's epilogue conversion scratch (`shared_memory_bytes`).
TMA_EPILOGUE_SCRATCH_BYTES = 4


def shared_memory_bytes(config: Config, problem: Problem) -> int:
    """Shared memory of one program (bytes): the pipelined A and B tiles, the pointer kernel's
    epilogue conversion where it takes more, and for the TMA kernel the staging buffer of its C
    stores.

    Triton's pipeliner keeps `num_stages` buffers of A (block_m × block_k) and B (block_k ×
    block_n) in flight (operands in their own dtype, plus one converted tile of an operand stored
    in another dtype than the compute dtype, `operand_sizes`). The pointer kernel's epilogue
    converts the fp32 accumulator to the store's layout through shared memory the pipeline no
    longer uses, at most the whole C tile in the stored dtype (`epilogue_bytes`). The TMA kernel's
    stores go through a block_m × (block_n or block_n / 2, `store_halves`) buffer of their own
    (Triton 3.6 for sm_90: 128x256x64, 3 stages, bf16: 147,456 + 32,768 bytes, plus 24 of
    barriers). The TMA kernel's epilogue cannot reuse the pipeline's buffers either (they stay
    live across its flattened tile loop): Triton converts the bias row and the residual tile, loaded
    through pointers, to the accumulator's layout through scratch of their own, counted here at
    block_n × 4 and block_m × block_n × 4 bytes (the most Triton 3.6 took for sm_90 over eight tiles
    of 64-256 rows and columns, 2026-12-06: an fp32 residual exactly that, a bf16 one 8-64 KB).
    """
    a_bytes, b_bytes, a_cast, b_cast = operand_sizes(problem)
    pipeline = (config.num_stages * (config.block_m * a_bytes + config.block_n * b_bytes) * config.block_k
                + (config.block_m * a_cast + config.block_n * b_cast) * config.block_k)
    if not config.tma:
        return max(pipeline, epilogue_bytes(config.block_m, config.block_n,
                                            int(stored_bytes(config.k_slices, problem.out_bytes))))
    return pipeline + tma_extra_bytes(config.block_m, config.block_n, config.num_warps, problem.out_bytes,
                                      epilogue_operands(problem))


def stored_bytes(k_slices, out_bytes: int):
    """Bytes of each element the kernel stores (ints or arrays): fp32 partials where K is split or
    phased (`Config.k_slices` > 1), else C's `out_bytes`."""
    return np.where(np.asarray(k_slices) > 1, PARTIAL_BYTES, out_bytes)


def epilogue_bytes(block_m, block_n, stored):
    """Shared memory the pointer kernel's epilogue may take converting its accumulator to the
    store's layout (ints or arrays): the whole C tile in the stored dtype, an upper bound. Triton
    3.6 for sm_90 (CPU, 2026-12-07) took exactly that for fp32 stores of 64x256 (4 and 8 warps),
    128x128, 256x64 (8 warps) and 128x256 tiles, and less than the pipeline for 128x128 and 256x64
    on 4 warps and 256x128 on 8."""
    return block_m * block_n * stored


def epilogue_operands(problem: Problem) -> tuple[bool, bool]:
    """(whether the problem's epilogue reads a bias, whether it reads a residual)."""
    return bool(problem.bias_dtype), bool(problem.residual_dtype)


def tma_extra_bytes(block_m, block_n, num_warps, out_bytes: int, operands: tuple[bool, bool]):
    """Shared memory the TMA kernel takes beyond its pipeline (bytes; tile sizes as ints or
    arrays): the staging of its C stores, block_m × (block_n, or block_n / 2 where it stores halves,
    `store_halves`) × `out_bytes`; where it stores halves from warp groups side by side along N
    (fewer than 16 rows a warp: 64 rows on 8 warps), the whole tile's conversion before the split,
    block_m × block_n × `out_bytes` more; and its epilogue's conversion scratch for the operands `operands`
    names (`epilogue_operands`), block_n × 4 for a bias row and block_m × block_n × 4 for a residual
    tile (`shared_memory_bytes`)."""
    bias, residual = operands
    halves = block_n >= STORE_HALVES_MIN_BLOCK_N
    store_n = block_n // (1 + halves)
    # Triton 3.6 for sm_90, 64x256 tiles on 8 warps: 48 KB beyond the pipeline with a bf16 C and
    # 96 KB with an fp32 one, where 4 warps take 16 and 32 KB (compiled on the CPU, 2026-12-06; no
    # other TMA candidate tile takes more than this rule counts without it).
    split_along_n = halves & (num_warps * (WGMMA_ROWS // 4) > block_m)  # a warp group: 64 rows, 4 warps
    return (block_m * store_n * out_bytes + block_m * block_n * out_bytes * split_along_n
            + block_n * TMA_EPILOGUE_SCRATCH_BYTES * bias + block_m * block_n * TMA_EPILOGUE_SCRATCH_BYTES * residual)


def operand_sizes(problem: Problem) -> tuple[int, int, int, int]:
    """(A's bytes per element as stored, B's, A's converted copy's, B's): a converted copy is one
    K step's tile in the compute dtype (0 bytes where the operand is stored in it), which Triton
    writes to shared memory for an MMA that reads the operand there (wgmma's B), an estimate of
    the conversion's staging not read from the compiler."""
    return (problem.a_bytes, problem.b_bytes, problem.operand_bytes if problem.a_dtype else 0,
            problem.operand_bytes if problem.b_dtype else 0)


# The TMA kernel stores tiles this wide as two halves (`store_halves`).
STORE_HALVES_MIN_BLOCK_N = 256


def store_halves(config: Config) -> bool:
    """Whether the TMA kernel stores its tile as two halves of block_n / 2 columns (half the
    staging buffer): for 256-column tiles, the form measured fastest on the H200 (2026-11-30)."""
    return config.block_n >= STORE_HALVES_MIN_BLOCK_N


# The tensor-memory accelerator's limits (CUDA driver API, cuTensorMapEncodeTiled): global
# addresses and strides multiples of 16 bytes, at most 256 elements per box dimension.
TMA_ALIGNMENT_BYTES = 16
TMA_MAX_BOX = 256
# Operand dtypes of the TMA kernel: 16-bit ones, whose wgmma reads either operand in either major
# order from shared memory (a transposed operand is a transposed view of the loaded tile).
TMA_DTYPES = ("bfloat16", "float16")


def tma_errors(config: Config, problem: Problem, hardware: Hardware) -> list[str]:
    """Reasons the TMA kernel cannot run `config` on `problem`; empty when it can. Any tile runs:
    a wgmma tile, or one Triton lowers to mma.sync (e.g. the 16-row decode tiles, which ran 4-6 µs
    slower than on the pointer kernel on the H200, 2026-12-01, BENCHMARKS.md at 705f18b, so `candidates`
    offers only the wgmma ones)."""
    errors = []
    if not hardware.tma:
        errors.append(f"{hardware.name} has no TMA kernel (no tensor-memory accelerator, or the "
                      "installed jaxlib allocates no global scratch for its descriptors)")
    if config.split_k != 1:
        errors.append(f"the TMA kernel does not split K (split_k={config.split_k})")
    if problem.dtype not in TMA_DTYPES:
        errors.append(f"the TMA kernel takes {TMA_DTYPES} operands, not {problem.dtype}")
    if problem.casts:
        errors.append(f"the TMA kernel does not convert operands (A {problem.a_dtype or problem.dtype}, "
                      f"B {problem.b_dtype or problem.dtype}, compute {problem.dtype})")
    if problem.gated:
        errors.append("the TMA kernel does not pair a gated product's columns (gated=True)")
    biggest = max(config.block_m, config.block_n, config.block_k)
    if biggest > TMA_MAX_BOX:
        errors.append(f"a TMA box holds at most {TMA_MAX_BOX} elements per axis, got a {biggest}-wide block")
    for name, elements, size in (("A row stride", problem.a_row_stride, problem.a_bytes),
                                 ("B row stride", problem.b_row_stride, problem.b_bytes),
                                 ("C row stride (N)", problem.n, problem.out_bytes)):
        if elements * size % TMA_ALIGNMENT_BYTES:
            errors.append(f"{name} {elements} x {size} bytes is not a multiple of {TMA_ALIGNMENT_BYTES} bytes")
    return errors


def accumulator_registers_per_thread(config: Config) -> int:
    """fp32 accumulator registers each thread holds: block_m·block_n / (32·num_warps)."""
    return config.block_m * config.block_n // (32 * config.num_warps)


def registers_per_thread(config: Config) -> int:
    """Estimated registers per thread: accumulators plus a fixed allowance for the rest."""
    return accumulator_registers_per_thread(config) + NON_ACCUMULATOR_REGISTERS


# The FMA tile (fp32 with input_precision "ieee", `uses_fma`) holds about twice its accumulators
# in registers, and more as block_k grows: Triton's FMA lowering unrolls a K step's
# accumulators × block_k multiply-adds with their A and B values live. sm_90a, `ptxas -v` on our
# Triton 3.6 kernel (2026-12-07; the H100's 71 FMA tiles for 4096^3 at their fewest stages): 8-64
# accumulators per thread took 48-240 registers; 128 accumulators spilled 80-1,300 bytes in 11
# tiles of 12 (128x256x16 w8: 255 registers, none); at accumulators × block_k = 4096, 64x128x128
# and 128x64x128 w4 spilled 972 and 1,224 bytes, 64x32x256 w4 over a K tail (TN 768x2304x6304)
# 1,092, other layouts 4-68; at 2048, 16 bytes at most (four tiles in the four layouts at 2 and
# 3 stages: 32 compiles). Before these limits (and `MAX_FMA_NARROW_COPIES_PER_THREAD`) 258 of the model's H100
# and H200 plans for the corpus in fp32 "ieee" spilled, up to 3,476 bytes; a limit of 4096 rather
# than 2048 is predicted 0.3% faster at most, on 226 plans.
MAX_FMA_ACCUMULATORS_PER_THREAD = 64
MAX_FMA_PRODUCTS_PER_THREAD = 2048


def fma_tile_spills(block_m, block_n, block_k, num_warps):
    """Whether an FMA tile (`uses_fma`) holds more than ptxas keeps in registers: over
    MAX_FMA_ACCUMULATORS_PER_THREAD accumulators, or accumulators × block_k over
    MAX_FMA_PRODUCTS_PER_THREAD; also element-wise on integer arrays."""
    accumulators = block_m * block_n // (32 * num_warps)
    return (accumulators > MAX_FMA_ACCUMULATORS_PER_THREAD) | (accumulators * block_k > MAX_FMA_PRODUCTS_PER_THREAD)


# Registers of the epilogue's addresses and masks (the K loop's operand fragments and addresses
# are dead by then): an estimate, not read from ptxas.
EPILOGUE_ADDRESS_REGISTERS = 16


def fused_epilogue(config: Config, problem: Problem) -> bool:
    """Whether the GEMM kernel itself applies the problem's epilogue (bias, activation, residual):
    without a K split (split-K or K phases, whose reduction kernel applies it after the sum)."""
    return problem.has_epilogue and config.k_slices == 1


def epilogue_registers_per_thread(config: Config, problem: Problem) -> int:
    """Registers per thread while a fused epilogue runs: the accumulators, the tile's residual
    loaded in their layout (an fp32 element per register, two 16-bit ones), the addresses."""
    accumulators = accumulator_registers_per_thread(config)
    return accumulators + -(-accumulators * problem.residual_bytes // 4) + EPILOGUE_ADDRESS_REGISTERS


def fit_errors(config: Config, problem: Problem, hardware: Hardware) -> list[str]:
    """Reasons `config` cannot run `problem` on `hardware`; empty when it fits."""
    errors = []
    smem = shared_memory_bytes(config, problem)
    if smem > hardware.smem_per_block:
        staging = " + the TMA store's staging" if config.tma else ", or the epilogue's C tile if more"
        errors.append(
            f"shared memory {smem} bytes (num_stages={config.num_stages} x "
            f"({config.block_m} x {problem.a_bytes} B + {config.block_n} x {problem.b_bytes} B) x {config.block_k}"
            f"{staging}) "
            f"exceeds {hardware.name}'s {hardware.smem_per_block} bytes per block"
        )
    threads = 32 * config.num_warps
    if threads > 1024:
        errors.append(f"num_warps={config.num_warps} gives {threads} threads, over 1024 per block")
    if config.tma:
        errors.extend(tma_errors(config, problem, hardware))
    if problem.gated and (config.k_slices > 1 or config.swap_ab or config.tma):
        errors.append(f"a gated product runs in the plain pointer kernel only, not {config.short()} (its tiles "
                      "pair the gate's and the up projection's columns in the epilogue)")
    if config.k_phases > 1 and problem.casts:
        errors.append(f"K phases (k_phases={config.k_phases}) with operands of different dtypes (A "
                      f"{problem.a_dtype or problem.dtype}, B {problem.b_dtype or problem.dtype}): not built")
    if problem.residual_dtype and fused_epilogue(config, problem):
        registers = epilogue_registers_per_thread(config, problem)
        if registers > hardware.max_regs_per_thread:
            errors.append(f"the epilogue holds {registers} registers per thread (accumulators, the residual's "
                          f"tile in {problem.residual_dtype}, addresses), over {hardware.max_regs_per_thread}")
    return errors


# A vector load or cp.async moves at most 16 bytes, from an address that is a multiple of its size
# (PTX ISA, ld.global.v4 and cp.async cp-size 4, 8 or 16).
VECTOR_BYTES = 16
# The narrowest copy cp.async makes (PTX ISA, cp.async: cp-size 4, 8 or 16 bytes): narrower
# loads go through registers, not the software pipeline.
MIN_ASYNC_COPY_BYTES = 4


def rows_along_k(problem: Problem) -> tuple[bool, bool]:
    """Whether A (B) is stored with its rows along K: A stored [K, M] (transpose_a), B [K, N]
    (not transpose_b). Their row starts step by the row stride at every K index."""
    return problem.transpose_a, not problem.transpose_b


def needed_k_phases(problem: Problem) -> int:
    """Fewest K phases (`Config.k_phases`) k such that, k rows apart, every operand stored with
    its rows along K starts on a 16-byte boundary: 16 / gcd(16, row stride x bytes), over those
    operands (1 where they all already do, 8 for a bf16 row of odd length)."""
    phases = 1
    for stride_bytes in _misaligned_row_strides(problem):
        phases = max(phases, VECTOR_BYTES // _alignment(stride_bytes))
    return phases


def k_phase_counts(problem: Problem) -> tuple[int, ...]:
    """The K phase counts a config may have beyond 1: each power of two up to `needed_k_phases`
    whose phases load the misaligned operands at least MIN_ASYNC_COPY_BYTES at a time
    (`phase_vector_bytes`), so that their loads are pipelined. Fewer phases write fewer fp32
    partials and load narrower vectors; for a bf16 row of odd length: 2 (4-byte loads), 4 (8),
    8 (16)."""
    if problem.casts:  # the phases' vector width is one element count for both operands
        return ()
    needed = needed_k_phases(problem)
    return tuple(p for p in (2, 4, 8) if p <= needed and phase_vector_bytes(problem, p) >= MIN_ASYNC_COPY_BYTES)


def phase_vector_bytes(problem: Problem, k_phases: int) -> int:
    """Width (bytes) of the loads of the operands K phases shift (`shifted_operands`): the
    largest power of two (at most 16) dividing k_phases row strides, over those operands."""
    widths = [_alignment(k_phases * stride_bytes) for stride_bytes in _misaligned_row_strides(problem)]
    return min(widths, default=VECTOR_BYTES)


def shifted_operands(problem: Problem, config: Config) -> tuple[bool, bool]:
    """Whether the K-phase kernel loads A's (B's) tiles from a `phase_vector_bytes` boundary,
    shifted (`matmul_kernel`'s SHIFT_A, SHIFT_B): the config has K phases and the operand's rows
    run along K with a row stride that is not a multiple of 16 bytes."""
    if config.k_phases == 1:
        return False, False
    return misaligned_rows_along_k(problem)


# Vector copies of the operands K phases shift that one thread issues per stage, at most. Each
# has an address of its own (a shifted tile starts on a phase-vector boundary and its rows are a
# runtime stride apart), and beyond this ptxas spills them. sm_90a, `ptxas -v` on our Triton 3.6
# kernels (2026-12-06): 16x256x64 on 2 warps with 4-byte copies (128 per thread) spilled 1,944
# bytes, and ran 1x50257x1280 bf16 2.7x slower (160 µs) than 16x64x64 (32 per thread, 128
# registers, 59 µs) on an H100 through JAX; with 8-byte copies (64 per thread) it spilled 76
# bytes and ran 1.15x slower; tiles with 32 or fewer (16x64 to 64x256, 2-16-byte copies) used
# 93-255 registers and spilled nothing.
MAX_SHIFTED_COPIES_PER_THREAD = 32


def plain_load_bytes(problem: Problem, operand: str, block_k, full: int = VECTOR_BYTES):
    """Width (bytes) of the pointer kernel's loads of `operand` ("a" or "b") without K phases, at
    most `full` (`cost.vector_bytes` says why); also element-wise on an integer array of block_k.
    A row-major operand's rows start at multiples of its row stride; a K-contiguous one with a K
    tail (K not a multiple of block_k) loads no wider than K's bytes allow; an M- (N-) contiguous
    one wraps its tile offsets at M (N), or at its row stride where its rows are padded past it."""
    return _width_by_k_tail(problem, block_k, *_plain_load_widths(problem, operand, full))


def _width_by_k_tail(problem: Problem, block_k, whole: int, tail: int):
    """`whole` where block_k divides K, else `tail` (element-wise on an array of block_k)."""
    if whole == tail:
        return np.full(np.shape(block_k), whole, dtype=np.int64)
    return np.where(problem.k % np.asarray(block_k) != 0, tail, whole)


def _plain_load_widths(problem: Problem, operand: str, full: int) -> tuple[int, int]:
    """`plain_load_bytes` of a block_k that divides K and of one that leaves a K tail."""
    element = problem.a_bytes if operand == "a" else problem.b_bytes
    if operand == "a":
        stride, k_contiguous, extent = problem.a_row_stride, not problem.transpose_a, problem.m
    else:
        stride, k_contiguous, extent = problem.b_row_stride, problem.transpose_b, problem.n
    stride_bytes = stride * element
    width = min(full, stride_bytes & -stride_bytes)
    if k_contiguous:
        k_bytes = problem.k * element
        return width, min(width, k_bytes & -k_bytes)
    extent_bytes = extent * element if stride == extent else stride_bytes
    wrapped = min(width, extent_bytes & -extent_bytes)
    return wrapped, wrapped


# Copies narrower than 16 bytes but pipelined (cp.async of 4 or 8 bytes: rows whose stride is not
# a multiple of 16 bytes, or a K tail) that one thread of the kernel without K phases issues per
# stage, at most. Their addresses are held in registers, rows a runtime stride apart, and past this
# ptxas spills them (the K-phase kernel's shift bookkeeping spills sooner,
# `MAX_SHIFTED_COPIES_PER_THREAD`). sm_90a, `ptxas -v` on our Triton 3.6 kernels (2026-12-07): no
# tile of 64 four-byte copies per thread or fewer spilled (fp32 1x50257x1024, 16x128x32 w2: 64);
# above, 72 (bf16 6x4858x12954, 16x128x128 w4 s4) spilled 180 bytes with a split and none
# without, 144 (w2 s3) 2,100; fp32 lm heads on 16x128x64 and 16x256x64 w2 s3, 128 and 256 copies
# (1x32001x4096), 1,192 and 8,476 bytes, 272 (16x4096x32001 NT) 4,980. Triton
# 3.9 spills that 64-copy tile 8 bytes and the 72-copy ones 188-192. On an H100 through JAX the
# 144-copy tile ran 6x4858x12954 in 301 µs split 6 and 890 split 2, predicted 47 and 68.
MAX_NARROW_COPIES_PER_THREAD = 64
# An FMA tile (`uses_fma`) keeps half as many: its multiply-adds' operands hold the registers
# (`fma_tile_spills`). sm_90a, `ptxas -v`, Triton 3.6 (2026-12-07, the model's FMA picks for the
# corpus in fp32 "ieee" on the H100 and the H200): 64x128x64 and 128x64x64 w4 with 48 or 64
# four- and eight-byte copies per thread per stage spilled 252-976 bytes, 128x128x64 w8 with 64
# spilled 124. With this limit and `fma_tile_spills`, the picks (H100, H200 and, for sm_80, A100;
# 317 distinct compiles) spill 56 bytes at most, 20 or fewer in all but one. A limit of 16 moved
# 1-16-token lm-head dx picks off 16x64x32 tiles (8 accumulators) predicted up to 1.97x slower:
# not taken.
MAX_FMA_NARROW_COPIES_PER_THREAD = 32


def max_narrow_copies_per_thread(problem: Problem) -> int:
    """`MAX_NARROW_COPIES_PER_THREAD`, or `MAX_FMA_NARROW_COPIES_PER_THREAD` where the tile runs on
    the FMA units."""
    return MAX_FMA_NARROW_COPIES_PER_THREAD if uses_fma(problem) else MAX_NARROW_COPIES_PER_THREAD


def narrow_copies_per_thread(problem: Problem, block_m, block_n, block_k, num_warps):
    """Pipelined copies narrower than 16 bytes (`plain_load_bytes` from MIN_ASYNC_COPY_BYTES up)
    that one thread of the kernel without K phases issues per stage, A's and B's together; also
    element-wise on integer arrays of block sizes and warps (a plain 0 where neither operand has
    any)."""
    copies = 0
    for operand, rows in (("a", block_m), ("b", block_n)):
        widths = _plain_load_widths(problem, operand, VECTOR_BYTES)
        if not any(MIN_ASYNC_COPY_BYTES <= width < VECTOR_BYTES for width in widths):
            continue  # 16-byte loads (or loads through registers) whatever block_k: nothing to count
        width = _width_by_k_tail(problem, block_k, *widths)
        narrow = (MIN_ASYNC_COPY_BYTES <= width) & (width < VECTOR_BYTES)
        element = problem.a_bytes if operand == "a" else problem.b_bytes
        copies = copies + np.where(narrow, -(-(rows * block_k * element) // width) // (32 * num_warps), 0)
    return copies


# tf32 wgmma reads both operands K-major from shared memory (PTX ISA, wgmma: tf32 operands in
# shared memory are K-major only), so Triton writes an fp32 operand stored M- or N-major there
# transposed, one 4-byte `cp.async.ca` per element, whatever its rows' alignment; each copy holds
# its own global and shared addresses. sm_90a, `ptxas -v` on our Triton 3.6 kernels (2026-12-07):
# of the tiles issuing 64 such copies per thread per stage, fp32 NN 64x256x32 w4 s5 spilled 124
# bytes, 16x64x128 w4 swapped 108, 32x64x128 w4 swapped 236, 64x128x64 w4 s4 split 2 392, TN
# 128x128x32 w4 s5 84, TT 128x128x64 w4 s4 204 (64x128x64 w4 s4 unsplit: none, 254 registers);
# of those issuing 48 (TN 64x128x32 and 128x64x32 w4 at 3-6 stages, 128x256x32 and 256x128x32
# w8, split or not) or fewer (NN 128x128x32 w4, 128x256x32 w8, 64x64x64 w4, 64x32x128 w4; TT
# 128x256x64 w8) none spilled, at 116-255 registers. The K-phase kernel copies them 4 bytes at a
# time too (its phases widen nothing here) and spilled at 24 with 4 phases (TN 128x256x16 w8 s5,
# 160 bytes), so tf32 wgmma tiles take no K phases. Until then the model picked spilling tiles
# for 59 products of the corpus in tf32 (H100 and H200 together).
MAX_TRANSPOSED_COPIES_PER_THREAD = 48


def transposed_operands(problem: Problem) -> tuple[bool, bool]:
    """Whether a wgmma tile of the pointer kernel copies A (B) into shared memory transposed, one
    element at a time: the product runs in tf32 and the operand is stored M- (N-) major, A as
    [K, M] (transpose_a), B as [K, N] (not transpose_b)."""
    if problem.dtype != "float32" or uses_fma(problem):
        return False, False
    return problem.transpose_a, not problem.transpose_b


def transposed_copies_per_thread(problem: Problem, block_m, block_n, block_k, num_warps):
    """4-byte copies of the operands a wgmma tile copies transposed (`transposed_operands`) that
    one thread issues per stage, A's and B's together; also element-wise on integer arrays of
    block sizes and warps."""
    transpose_a, transpose_b = transposed_operands(problem)
    return (transpose_a * block_m + transpose_b * block_n) * block_k // (32 * num_warps)


def shifted_copies_per_thread(config: Config, problem: Problem) -> int:
    """Vector copies (`phase_vector_bytes` wide) of the operands K phases shift
    (`shifted_operands`) that one thread issues for one stage; 0 without K phases."""
    if config.k_phases == 1:
        return 0
    return phase_copies_per_thread(problem, config.k_phases, config.block_m, config.block_n, config.block_k,
                                   config.num_warps)


def phase_copies_per_thread(problem: Problem, k_phases: int, block_m, block_n, block_k, num_warps):
    """`shifted_copies_per_thread` of tiles with `k_phases` > 1 phases; also element-wise on integer
    arrays of block sizes and warps."""
    shift_a, shift_b = misaligned_rows_along_k(problem)
    elements = (shift_a * block_m + shift_b * block_n) * block_k
    return -(-elements * problem.operand_bytes // phase_vector_bytes(problem, k_phases)) // (32 * num_warps)


def misaligned_rows_along_k(problem: Problem) -> tuple[bool, bool]:
    """Whether A (B) is stored with its rows along K and a row stride that is not a multiple of
    16 bytes: the operands K phases shift."""
    return tuple(
        along_k and (stride * problem.operand_bytes) % VECTOR_BYTES != 0
        for along_k, stride in zip(rows_along_k(problem), (problem.a_row_stride, problem.b_row_stride))
    )


def phase_major_a(problem: Problem, config: Config) -> bool:
    """Whether K phases run on a phase-major copy of A (`matmul_kernel`'s PHASE_MAJOR_A): A is
    stored [M, K], K-contiguous, so a phase's K indices (k_phases apart) would load it one element
    at a time, each load waiting for its own (cp.async copies no fewer than 4 bytes); the copy
    [M, k_phases · `phase_columns`] holds each phase's K columns side by side instead."""
    return config.k_phases > 1 and not problem.transpose_a


def phase_columns(problem: Problem, k_phases: int, block_k: int) -> int:
    """Columns of one phase's block in the phase-major copy of A: ⌈K / k_phases⌉ rounded up to
    whole K blocks (zeros past K), so the kernel loads it without a K mask, and every block starts
    on a 16-byte boundary (block_k ≥ 16). Also element-wise on integer arrays of counts and blocks."""
    phase_rows = -(-problem.k // k_phases)
    return -(-phase_rows // block_k) * block_k


def padded_rows(problem: Problem) -> tuple[bool, bool]:
    """Whether A stored [K, M] (B stored [K, N]) holds more elements per row than M (N): a copy
    padded past the caller's M (N) without growing them (`jtblas.model.repack.padded_problem`),
    whose tile offsets wrap at the padded row length instead (`matmul_kernel`'s PADDED_M, PADDED_N)."""
    return (problem.transpose_a and problem.a_row_stride > problem.m,
            not problem.transpose_b and problem.b_row_stride > problem.n)


def c_vector_bytes(problem: Problem) -> int:
    """Width (bytes) of the kernel's stores of C: the largest power of two, at most 16, dividing
    its row stride (out_n · out_bytes; a bf16 C over an odd N is stored 2 bytes at a time)."""
    return _alignment(problem.out_n * problem.out_bytes)


def _alignment(stride_bytes: int) -> int:
    """Largest power of two dividing stride_bytes, at most VECTOR_BYTES (16 for 0)."""
    return min(VECTOR_BYTES, stride_bytes & -stride_bytes) if stride_bytes else VECTOR_BYTES


def _misaligned_row_strides(problem: Problem) -> list[int]:
    """Row strides (bytes) of the operands stored with their rows along K whose rows do not start
    on 16-byte boundaries."""
    return [stride * problem.operand_bytes
            for along_k, stride in zip(rows_along_k(problem), (problem.a_row_stride, problem.b_row_stride))
            if along_k and (stride * problem.operand_bytes) % VECTOR_BYTES != 0]


def k_from_indices(problem: Problem) -> bool:
    """Whether the kernel addresses each K step from its K indices (else: carried pointer
    increments; `jtblas.kernels.matmul.reduce_k_blocks`). Chosen by layout, from one run of both
    forms over the same configs on the H200 (Triton 3.6, 2026-11-30; BENCHMARKS.md at 705f18b, "K
    addressing"): in NT (both operands K-major) the indexed form's best config was 2-9% faster
    (4096³: 701 vs 644 TFLOP/s) and the exhaustive best of 21 NT shapes 1.06x faster in geometric
    mean; in TT it was 0-8% slower, in NN and TN within 1%."""
    return problem.transpose_b and not problem.transpose_a


def masks_short_a(problem: Problem, config: Config) -> bool:
    """Whether the kernel masks A's rows past M instead of wrapping them (`matmul_kernel`'s SHORT_A_ROWS):
    where all of A is shorter than a tile (M < block_m) and its rows are K-contiguous (not
    transpose_a; a mask along M-contiguous rows would narrow the loads). Wrapped, A's few rows were
    loaded block_m / M times per step by every program at the same K; masked rows cost no load."""
    return problem.m < config.block_m and not problem.transpose_a


def loaded_a_rows(problem: Problem, config: Config) -> int:
    """Rows of A one K step of a tile loads from memory: block_m, or M where they are masked."""
    return problem.m if masks_short_a(problem, config) else config.block_m


# --- The split-K reduction kernel (jtblas.kernels.reduce.sum_splits_kernel) ----------------------

# Elements one reduction program sums: at most 256 (two per thread of 4 warps), at least 32 (one
# per thread of a warp). Measured on the H200 (2026-12-01, BENCHMARKS.md at 705f18b: block 32-4096 x 1-8
# warps after the product on ten split-K shapes): programs of 256 elements on 4 warps took
# 2.4-3.3 µs where the former 1024 on 4 warps took 3.3-7.3 (1024x1024 split 4: 7.3 → 3.2); small
# programs with few elements per thread put more loads of the partials in flight on every SM.
REDUCTION_MAX_BLOCK = 256
REDUCTION_MIN_BLOCK = 32
REDUCTION_ELEMENTS_PER_WARP = 64


def reduction_block(elements: int, hardware: Hardware) -> int:
    """Elements per program of the split-K reduction over `elements` outputs: the largest power of
    two that still gives every SM a program (clamped to [REDUCTION_MIN_BLOCK, REDUCTION_MAX_BLOCK]).
    The reduction streams split_k partials per element from L2: a fixed 1024-element block left
    a 128x128 output to 16 programs on 16 SMs (16 KB per program per split), which at split 32 made
    the reduction cost more than the product on the H200 (2026-11-30, BENCHMARKS.md at 705f18b)."""
    share = max(1, elements // hardware.sm_count)
    block = 1 << (share.bit_length() - 1)
    return min(REDUCTION_MAX_BLOCK, max(REDUCTION_MIN_BLOCK, block))


def reduction_warps(block: int) -> int:
    """Warps of a reduction program of `block` elements: one per REDUCTION_ELEMENTS_PER_WARP (two
    elements per thread), 1 to 4."""
    return max(1, min(4, block // REDUCTION_ELEMENTS_PER_WARP))


# --- Occupancy and instruction layout (used by the cost model) ------------------------------------

# The CUDA runtime reserves 1 KB of shared memory per resident block on cc 8.x and 9.x (CUDA C++
# Programming Guide, "Shared Memory" in the compute capability 8.x/9.0 sections).
SHARED_MEMORY_RESERVED_PER_BLOCK = 1024
# Resident blocks per SM: 32 on cc 8.0 and 9.0 (CUDA C++ Programming Guide, technical
# specifications table).
MAX_BLOCKS_PER_SM = 32
# Registers are allocated per thread in units of 8 (256 per warp) on cc 8.x/9.x (CUDA occupancy
# calculator's "register allocation unit size").
REGISTER_ALLOCATION_UNIT = 8
# Hopper's warpgroup MMA covers 64 rows per warpgroup of 4 warps; Triton 3.x lowers tl.dot to
# wgmma only when the dot's rows % 64 == 0 and num_warps % 4 == 0 (AccelerateMatmul,
# `supportMMA(.., 3)`), and to the older mma.sync (or FMA for fp32 with input_precision="ieee")
# otherwise.
WGMMA_ROWS = 64
# Rows of one mma.sync instruction (m16n8k16 for 16-bit operands; PTX ISA, "Matrix shape").
MMA_ROWS = 16


def mma_tile(config: Config) -> tuple[int, int]:
    """(rows, columns) of the tile as its tl.dot computes it: block_m x block_n, or block_n x
    block_m for a swapped tile (`Config.swap_ab`: the kernel accumulates Cᵀ = Bᵀ·Aᵀ)."""
    return (config.block_n, config.block_m) if config.swap_ab else (config.block_m, config.block_n)


def uses_wgmma(config: Config, problem: Problem, hardware: Hardware) -> bool:
    """True when Triton lowers this tile's tl.dot to Hopper's wgmma (else mma.sync or FMA)."""
    rows, _ = mma_tile(config)
    return (
        hardware.wgmma
        and not uses_fma(problem)
        and rows % WGMMA_ROWS == 0
        and config.num_warps % 4 == 0
    )


def uses_fma(problem: Problem) -> bool:
    """True when tl.dot runs on the fp32 FMA units: fp32 operands with input_precision="ieee"."""
    return problem.dtype == "float32" and problem.input_precision == "ieee"


def warp_grid(config: Config, problem: Problem, hardware: Hardware) -> tuple[int, int]:
    """(warps along the rows, warps along the columns) of the accumulator (`mma_tile`: M and N, or
    N and M for a swapped tile), as Triton 3.x lays them out.

    wgmma (`warpsPerTileV3`): starts at (4, 1) and doubles the rows' warps while the rows exceed 16
    per warp, else the columns'. mma.sync (`warpsPerTileV2`): doubles the rows' warps while they
    have at least as many 16-row fragments per warp as the columns have 16-column pairs, else the
    columns'.
    """
    warps = config.num_warps
    rows, columns = mma_tile(config)
    if uses_wgmma(config, problem, hardware):
        warps_m, warps_n = 4, 1
        while warps_m * warps_n < warps:
            if rows > 16 * warps_m:
                warps_m *= 2
            else:
                warps_n *= 2
        return warps_m, warps_n
    warps_m, warps_n = 1, 1
    while warps_m * warps_n < warps:
        if rows // 16 // warps_m >= columns // 16 // warps_n:
            if warps_m < rows // 16:
                warps_m *= 2
            else:
                warps_n *= 2
        else:
            warps_n *= 2
    return warps_m, warps_n


def shared_memory_reads_per_step(config: Config, problem: Problem, hardware: Hardware,
                                 *, split: bool = False) -> int | tuple[int, int]:
    """Bytes the tensor-core (or FMA) instructions read from shared memory per K step of one tile.

    In the dot's own terms (`mma_tile`: rows x columns; its row operand is A, or B for a swapped
    tile): wgmma: each warpgroup issues one m64·n·k instruction per 64 of its rows, and each reads
    its rows and its columns: the row operand is read once per warpgroup column (warps_n / 1
    groups), the column operand once per 64 rows: bytes = block_k · (rows · warpgroups_n +
    columns · rows / 64). mma.sync/FMA: each warp loads its rows and its columns (ldmatrix):
    bytes = block_k · (rows · warps_n + columns · warps_m).
    With `split`, A's and B's parts as a pair.
    """
    warps_m, warps_n = warp_grid(config, problem, hardware)
    rows, columns = mma_tile(config)
    column_readers = rows // WGMMA_ROWS if uses_wgmma(config, problem, hardware) else warps_m
    row_bytes = config.block_k * rows * warps_n * problem.operand_bytes
    column_bytes = config.block_k * columns * column_readers * problem.operand_bytes
    a_bytes, b_bytes = (column_bytes, row_bytes) if config.swap_ab else (row_bytes, column_bytes)
    return (a_bytes, b_bytes) if split else a_bytes + b_bytes


def register_limited_programs(config: Config, hardware: Hardware) -> int:
    """Programs per SM the register file allows (registers per thread rounded to the unit)."""
    per_thread = -(-registers_per_thread(config) // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    return hardware.regs_per_sm // (per_thread * 32 * config.num_warps)


def shared_memory_limited_programs(config: Config, problem: Problem, hardware: Hardware) -> int:
    """Programs per SM the shared memory allows (with the runtime's 1 KB per block)."""
    per_program = shared_memory_bytes(config, problem) + SHARED_MEMORY_RESERVED_PER_BLOCK
    return hardware.smem_per_sm // per_program


def thread_limited_programs(config: Config, hardware: Hardware) -> int:
    """Programs per SM the resident-thread limit allows."""
    return hardware.max_threads_per_sm // (32 * config.num_warps)


def programs_per_sm(config: Config, problem: Problem, hardware: Hardware) -> int:
    """Programs of this config resident on one SM at once (occupancy), at least 0."""
    return min(
        shared_memory_limited_programs(config, problem, hardware),
        register_limited_programs(config, hardware),
        thread_limited_programs(config, hardware),
        MAX_BLOCKS_PER_SM,
    )


# Split-K and K-phase partials are fp32.
PARTIAL_BYTES = 4
GIB = 1024**3


def footprint_bytes(problem: Problem) -> int:
    """Device bytes the products need whatever the config: A and B as stored (their row strides
    included) and C, for every batch entry."""
    a_rows = problem.k if problem.transpose_a else problem.m
    b_rows = problem.n if problem.transpose_b else problem.k
    operands = a_rows * problem.a_row_stride * problem.a_bytes + b_rows * problem.b_row_stride * problem.b_bytes
    return problem.batch * (operands + problem.m * problem.out_n * problem.out_bytes)


def workspace_bytes(config: Config, problem: Problem) -> int:
    """Bytes of the fp32 partials a split (split-K or K phases) writes: batch · k_slices · M · N · 4
    (0 without a split)."""
    if config.k_slices == 1:
        return 0
    return problem.batch * config.k_slices * problem.m * problem.n * PARTIAL_BYTES


def memory_errors(problem: Problem, hardware: Hardware, config: Config | None = None) -> list[str]:
    """Why `problem` (run by `config`, whose split adds its workspace) cannot fit `hardware`'s
    device memory; empty when it fits. Checked before anything is planned or launched, so that an
    absurd size is refused in words, not predicted in years."""
    needed = footprint_bytes(problem) + (workspace_bytes(config, problem) if config is not None else 0)
    if needed <= hardware.memory_bytes:
        return []
    what = "A, B and C" if config is None or config.k_slices == 1 else f"A, B, C and {config.short()}'s partials"
    return [f"M={problem.m}, N={problem.n}, K={problem.k}, batch={problem.batch} ({problem.dtype}) need "
            f"{needed / GIB:.4g} GiB for {what}, more than {hardware.name}'s {hardware.memory_bytes / GIB:.4g} GiB "
            "of device memory"]
