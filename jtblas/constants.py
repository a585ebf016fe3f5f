"""The model's constants that no hardware description holds, each with its source.

`Constants` sits below both the GPU descriptions (`jtblas.gpus`: a calibrated profile replaces
some of its fields on one GPU, `Hardware.model_constants`) and the equations that read it
(`jtblas.model.cost`). Pure Python.
"""

from __future__ import annotations

import dataclasses

NANO = 1e-9


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Constants:
    """Model constants not in the hardware description, each with its source.

    Attributes:
      memory_latency_seconds: latency of one pipelined global load under load (s). DRAM latency on
        Hopper is ~480-500 clocks idle (Luo et al. 2024, "Benchmarking and Dissecting the Nvidia
        Hopper GPU Architecture") and grows under a saturating stream; we take 1 µs, so that
        `loads_in_flight` (num_stages − 2) loads in flight must cover it. Checked against the H200 benchmark's
        exhaustive data (docs/model.md): of 0.7, 1, 1.5 and 2 µs, 1 µs ranked configs best on
        either half of the shapes alone (a measurement to replace by `jtblas calibrate`).
      smem_bytes_per_clock: shared-memory bandwidth per SM (bytes/clock): 32 banks x 4 bytes on
        cc 8.x/9.x (CUDA C++ Programming Guide, "Shared Memory").
      load_bytes_per_clock: bytes one SM can bring in from L2/DRAM per clock (its load port): 64,
        i.e. 112 GB/s at the H200's 1.755 GHz, 3.4x a fair 1/132 share of its DRAM bandwidth, so at
        least ~39 busy SMs are needed to saturate DRAM (Triton's former matmul_perf_model assumed
        ~32 programs; calibration, see docs/model.md).
      mma_sync_fraction_on_wgmma_gpu: rate of mma.sync relative to wgmma on Hopper, for tiles with
        block_m < 64: about two thirds (Luo et al. 2024 measure legacy mma.sync on H800 well below
        wgmma's dense rate; calibration, see docs/model.md).
      k_step_overhead_clocks: non-overlapped cost of one K iteration of one program (clocks):
        barrier, async-copy wait, wgmma fence/commit, pointer increments. An estimate of a few
        dozen instructions on the critical path (calibration, see docs/model.md).
      l2_usable_fraction: fraction of the L2 that holds operand panels between reuses. Hopper's L2
        is two partitions and lines read by SMs of both may be held twice; half is a conservative
        capacity for data every SM reads (calibration, see docs/model.md).
      line_bytes: L2 cache-line size (128 bytes, four 32-byte sectors; CUDA C++ Best Practices
        Guide, "Coalesced Access to Global Memory"). A tile row shorter than a line still costs
        DRAM a whole line's worth of row activation and burst: see `line_efficiency`.
      sector_bytes: the unit of an L2 line that DRAM reads or writes (32 bytes; CUDA C++ Best
        Practices Guide, "Coalesced Access to Global Memory"). A write that covers part of a
        sector has DRAM read the sector back to merge it (`cost.estimate_arrays`, misaligned C).
      full_vector_bytes: width of a full vector load (16 bytes, `ld.global.v4.b32`/cp.async 16).
        An operand whose rows are only v-byte aligned is loaded v bytes at a time and costs
        full_vector_bytes / v times as much load-port time (measured 2026-11: odd sizes run at
        15-30% of the aligned speed).
      swizzle_bytes: the widest shared-memory swizzle of a wgmma operand (128 bytes; PTX ISA,
        "Shared Memory Matrix Layout"). A stage buffer whose rows are shorter uses a narrower
        swizzle and gets that fraction of the shared-memory bandwidth (`swizzle_efficiency`;
        on the H200, 128x128x32 tiles, whose K-major rows are 64 bytes, ran 1.17x (NN) and
        1.39x (NT, both operands K-major) slower than 128x128x64 at 4096x3584x3584).
      k_major_b_efficiency: our kernel's wgmma rate in NT (A and B both K-major, B stored [N, K])
        relative to NN. Measured on the H200 (Triton 3.6), best config of each layout from the
        exhaustive search: NT ÷ NN 0.77 at 4096³, 0.78 at 4096x4096x14336, 0.87 at 4096x768x768,
        0.89 at 4096x3584x3584 (2026-11-30); 0.87-0.94 with NT's K steps addressed from their
        indices (2026-11-30). It is kept at 0.8 because the model's NT picks rank ~0.75 of NT's
        best (docs/model.md). TT is not discounted: with B stored [N, K] too but A M-major, its
        best ran 0.93-0.94 of NN's in one run (2026-11-30, BENCHMARKS.md at 705f18b). The TMA kernel
        (`Config.tma`) is not discounted (docs/model.md, "The TMA kernel"). Calibration.
      tma_k_step_overhead_clocks: `k_step_overhead_clocks` of the TMA kernel. One thread issues
        each stage's two bulk copies with scalar tile coordinates and the consumers wait on an
        mbarrier; there is no per-thread address arithmetic, mask or async-copy issue, so we take
        half. Measured on the H200 through JAX (2026-12-01, `tma_twin_ab.json`): the TMA twin of
        128x256x64 w8 s4 runs 0-8% faster than the pointer kernel on products of 190 µs and more
        (e.g. 4096³ NN 1.037x, 8192x14336x4096 NN 1.08x, 4096x14336x8192 TN 1.015x); half of 32
        clocks is 1.3% of that tile's K step. Calibration.
      warp_schedulers_per_sm: warp schedulers (SM sub-partitions) per SM: 4 since Volta (NVIDIA
        Hopper and Ampere architecture whitepapers). An mma.sync program of at most this many
        16-row warps has one per scheduler, and their MMAs and shared-memory reads take turns
        (`mma_and_smem_take_turns`).
      narrow_loads_in_flight: loads narrower than cp.async's 4 bytes (rows 2-byte aligned) that one
        thread keeps in flight: they go through registers, each K step's loads issued together and
        waited for before its MMA, so a step takes (its loads per thread / this) memory latencies.
        Measured on the H200 through JAX (2026-12-04), bf16 B [1600, 50257] (odd row stride),
        M = 64, 64x128x64 w4 s3 (64 two-byte loads per thread per K step): 240.7 µs for 3 tiles
        per SM x 25 K steps, 9.6 µs a step, 6.7 loads a latency; the same loads at 128 per thread
        (16x128x64 w2) ran 5x slower still, which this lower bound does not reach.
      epilogue_warps_per_scheduler: resident warps per scheduler that an epilogue's activation
        needs to keep the FMA pipe issuing: a warp's fp32 instructions wait on each other (4 clocks
        on sm_80/sm_90), and a scheduler with one warp issued them about every other clock. Fewer
        run it at that fraction of `Hardware.fp32_flops`. Measured on the H100 through JAX
        (2026-12-06, bias + tanh GELU over bias + relu, TMA kernel, one program per SM): 64x256x64
        w4 (one warp per scheduler) about 80 FLOPs an element, 128x256x64 w8 (two) about 48, where
        the PTX counts 34.
      tma_setup_seconds: what the TMA kernel costs a launch more than the pointer kernel: its
        descriptors' global scratch and the three descriptors each program writes and fences
        before its first copy. Measured on the H200 through JAX
        (2026-12-01, `tma_twin_ab.json`): a one-tile product (128x256x64, 128x256x64 w8 s3) 7.37
        against 5.35 µs; +2.0 to +3.4 µs on every product of 45 µs or less.
      program_start_seconds: what a program costs before its first load is issued and after its
        last store, beyond the fill and the epilogue: its index arithmetic, the pointers and masks
        of its first stages, its exit. The pointer kernel pays it on every tile (each tile a
        program that starts cold), the persistent TMA kernel once per program. Measured by
        `jtblas calibrate` ("time per further tile"; derived in `derive.derive`): on an H100
        (2026-12-07, torch launches in a CUDA graph) each further tile per SM of 128x128x64 w4 s4
        at K = 128 cost 3.09 µs where the model without it gave 2.62; through JAX the same day an
        8192x8192xK sweep showed 0.33-0.40 µs a program at K ≤ 256.
      transposed_copy_bytes_per_clock: shared memory's rate (bytes/clock per SM) for the copies a
        tf32 wgmma tile of the pointer kernel writes transposed (`resources.transposed_operands`:
        an fp32 operand stored M- or N-major, which tf32 wgmma reads K-major): one 4-byte bank
        word per clock, a warp's 32 lanes writing 32 rows of the K-major stage buffer one bank
        after another. Measured on the H100 through JAX (2026-12-07, 16 fp32 NN and TN products,
        the pick timed beside XLA): such tiles moved their transposed operand's bytes at 3.2-6.4
        bytes per clock per SM (6304x1024x1024 NN, 64x256x16 w4 s5: 381 µs, 7.1x the prediction
        without this rate; 6400x1600x8192 TN, 128x128x32 w8 s5: 3563 µs, 6.8x).
    """

    memory_latency_seconds: float = 1000 * NANO
    smem_bytes_per_clock: float = 128.0
    load_bytes_per_clock: float = 64.0
    mma_sync_fraction_on_wgmma_gpu: float = 0.65
    k_step_overhead_clocks: float = 32.0
    tma_k_step_overhead_clocks: float = 16.0
    tma_setup_seconds: float = 2.0e-6
    l2_usable_fraction: float = 0.5
    full_vector_bytes: int = 16
    line_bytes: int = 128
    sector_bytes: int = 32
    swizzle_bytes: int = 128
    k_major_b_efficiency: float = 0.8
    warp_schedulers_per_sm: int = 4
    narrow_loads_in_flight: float = 7.0
    epilogue_warps_per_scheduler: float = 2.0
    program_start_seconds: float = 470 * NANO
    transposed_copy_bytes_per_clock: float = 4.0


DEFAULT_CONSTANTS = Constants()
