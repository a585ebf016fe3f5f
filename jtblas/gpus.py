"""GPU descriptions the model reads: the `Hardware` dataclass and the built-in H200, H100, A100.

Every number is a datasheet value or a measurement, with its source beside it. The model reads only
these fields, so a description of a new GPU (or a calibrated profile, `jtblas.profiles`) is all it
takes to retarget it. Pure Python: which description applies to the GPU in use is
`jtblas.hardware`'s job.
"""

from __future__ import annotations

import dataclasses

from jtblas.constants import DEFAULT_CONSTANTS, Constants

KIB = 1024
MB = 1000**2
TERA = 1e12
GIB = 1024**3


@dataclasses.dataclass(frozen=True, kw_only=True)
class Hardware:
    """What the performance model needs to know about one GPU.

    Attributes:
      name: short lower-case key (`"h200"`).
      full_name: the product name.
      compute_capability: (major, minor).
      sm_count: streaming multiprocessors.
      clock_hz: sustained SM clock under load (Hz).
      l2_bytes: L2 cache size (bytes).
      dram_bytes_per_s: achievable DRAM bandwidth (bytes/s).
      l2_bytes_per_s: achievable L2 bandwidth (bytes/s).
      smem_per_sm: shared memory per SM (bytes).
      smem_per_block: largest shared memory one program may use (bytes, opt-in).
      regs_per_sm: 32-bit registers per SM.
      max_regs_per_thread: hardware limit on registers per thread.
      max_threads_per_sm: resident threads per SM.
      tensor_flops: achievable dense tensor-core rate (FLOP/s) by operand dtype, fp32 meaning tf32.
      fp32_flops: achievable fp32 rate without tensor cores (FLOP/s), for `precision=HIGHEST`.
      wgmma: Hopper warpgroup MMA (needs num_warps a multiple of 4 and block_m ≥ 64).
      tma: the tensor-memory accelerator (Hopper) and a launcher that allocates the global
        scratch its device-side descriptors need (jaxlib ≥ 0.11 on the GPU; `detect` checks).
      launch_seconds: fixed cost of one kernel launch seen from the device (s).
      memory_bytes: device memory (bytes), an upper bound: a product whose operands, output and
        workspace need more is refused before anything is launched (`jtblas.model.resources.memory_errors`).
      source: where the numbers come from (a built-in, or the calibrated profile's path and date).
      constants: calibrated values of `jtblas.constants.Constants` fields (name → value) that
        replace the model's defaults on this GPU; empty for the built-ins.
      busy_sm_rates: ((fraction of the SMs busy, their rate over the all-busy rate), ...),
        fractions ascending in (0, 1]: how much faster an SM runs its MMAs, shared-memory reads
        and loads when only that fraction of the SMs has work (a grid smaller than the GPU), as
        `jtblas calibrate` measures it (one compute-bound tile per busy SM). Empty (the
        built-ins): the all-busy rates whatever the grid. The model interpolates between the
        points (`jtblas.model.cost`).
    """

    name: str
    full_name: str
    compute_capability: tuple[int, int]
    sm_count: int
    clock_hz: float
    l2_bytes: int
    dram_bytes_per_s: float
    l2_bytes_per_s: float
    smem_per_sm: int
    smem_per_block: int
    regs_per_sm: int
    max_regs_per_thread: int
    max_threads_per_sm: int
    tensor_flops: dict[str, float]
    fp32_flops: float
    wgmma: bool
    launch_seconds: float
    source: str = "built-in"
    constants: dict[str, float] = dataclasses.field(default_factory=dict)
    tma: bool = False
    # 80 GiB, the A100's and H100's: a description that does not say still refuses the absurd.
    memory_bytes: int = 80 * GIB
    busy_sm_rates: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
                raise ValueError(f"Hardware.{field.name} must be positive, got {value!r}")
        for dtype in ("bfloat16", "float16", "float32"):
            if self.tensor_flops.get(dtype, 0) <= 0:
                raise ValueError(f"Hardware.tensor_flops must give a positive rate for {dtype!r}")
        points = self.busy_sm_rates
        if (any(len(point) != 2 or not 0 < point[0] <= 1 or not point[1] > 0 for point in points)
                or [point[0] for point in points] != sorted({point[0] for point in points})):
            raise ValueError("Hardware.busy_sm_rates must be (fraction in (0, 1], rate > 0) pairs with "
                             f"ascending fractions, got {self.busy_sm_rates!r}")
        if self.smem_per_block > self.smem_per_sm:
            raise ValueError(
                f"Hardware.smem_per_block ({self.smem_per_block}) exceeds smem_per_sm ({self.smem_per_sm})"
            )

    def __hash__(self) -> int:
        return hash((self.name, self.source, self.sm_count, self.dram_bytes_per_s, self.clock_hz))

    def model_constants(self) -> Constants:
        """The model's `Constants` on this GPU: the defaults with `constants` replaced."""
        if not self.constants:
            return DEFAULT_CONSTANTS
        return dataclasses.replace(DEFAULT_CONSTANTS, **self.constants)


# Hopper SM: 228 KB shared memory per SM of which 227 KB per block (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability", cc 9.0); 64 K registers per SM, 255 per
# thread, 2048 threads per SM (same table).
_HOPPER_SM = dict(
    smem_per_sm=228 * KIB,
    smem_per_block=227 * KIB,
    regs_per_sm=65536,
    max_regs_per_thread=255,
    max_threads_per_sm=2048,
    wgmma=True,
    tma=True,
)

H200 = Hardware(
    name="h200",
    full_name="NVIDIA H200 SXM 141GB",
    compute_capability=(9, 0),
    sm_count=132,  # H200 datasheet; nvidia-smi on the lent machine agrees (the lent H200, 2026-11)
    clock_hz=1.755e9,  # H100/H200 SXM boost 1.98 GHz; ~1.755 GHz held under tensor load (nvidia-smi)
    l2_bytes=50 * MB,  # 50 MB datasheet (the driver reports 60 MB; 50 MB are usable as one cache)
    # Datasheet 4.8 TB/s; a device-to-device copy measures 4.3 TB/s (on the lent H200, 2026-11).
    dram_bytes_per_s=4.3e12,
    # L2: ~2.5x DRAM on Hopper (microbenchmark papers, e.g. Luo et al. 2024, "Benchmarking and
    # Dissecting the Nvidia Hopper GPU Architecture"), until `jtblas calibrate` measures it.
    l2_bytes_per_s=10.5e12,
    tensor_flops={
        # Datasheet dense bf16/fp16 989 TFLOP/s; cuBLAS sustains ~790 at 4096^3 (the lent H200, 2026-11).
        "bfloat16": 790 * TERA,
        "float16": 790 * TERA,
        # tf32: datasheet 495 dense, scaled by the same 0.8 sustained fraction as bf16.
        "float32": 395 * TERA,
        # fp8: datasheet 1979 dense, same 0.8 fraction (not yet a kernel dtype).
        "float8": 1580 * TERA,
    },
    fp32_flops=54 * TERA,  # datasheet 67 TFLOP/s fp32 (non-tensor), x0.8
    # What one more kernel launch costs jtblas.matmul inside jax.jit. Measured on the H200
    # (2026-11-30): 14.4 µs per launch in the afternoon's spot checks (1024^3: 21.3 vs 6.9 µs in a
    # CUDA graph), 5-8 µs in the 2026-11-30 run's (1024^3: 13.8 vs 6.8; two-launch split-K +11 and +16 µs),
    # 4.5 µs for chained launches (jtblas calibrate). Those launches went through jax-triton's
    # legacy custom call, which XLA leaves out of its CUDA graphs; since 2026-11-30 they lower to
    # the typed-FFI call and replay inside the graphs, ~0.1 µs apart (2026-11-30, BENCHMARKS.md at 705f18b).
    # `jtblas calibrate` measured 1.11 µs per chained launch inside jax.jit there (2026-11-30).
    # Until 2026-12-01 the built-in stayed 15 µs, a stand-in that kept the model from splitting
    # decode products (their 64-row splits lost); with 16-row tiles among the split candidates and
    # A's short rows masked (2026-12-01) the measured cost ranks as well or better (offline over
    # the 2026-11-30 searches, and on the GPU: 2026-12-01, BENCHMARKS.md at 705f18b).
    launch_seconds=1.1e-6,
    # Datasheet 141 GB, read as GiB: an upper bound (the lent H200 has about 139 GiB usable), so
    # the refusal never turns away a product that fits.
    memory_bytes=141 * GIB,
    source="built-in: datasheet, sustained rates measured with cuBLAS and copies on an H200 (2026-11)",
    **_HOPPER_SM,
)

H100 = dataclasses.replace(
    H200,
    name="h100",
    full_name="NVIDIA H100 SXM5 80GB",
    memory_bytes=80 * GIB,
    # Datasheet 3.35 TB/s; x0.9 the copy efficiency measured on the H200 (4.3 / 4.8).
    dram_bytes_per_s=3.0e12,
    l2_bytes_per_s=10.5e12,
    source="built-in: H100 SXM5 datasheet; sustained fractions as measured on the H200",
)

A100 = Hardware(
    name="a100",
    full_name="NVIDIA A100 SXM4 80GB",
    compute_capability=(8, 0),
    sm_count=108,  # A100 whitepaper
    clock_hz=1.41e9,  # boost clock, A100 datasheet
    l2_bytes=40 * MB,  # A100 whitepaper
    dram_bytes_per_s=1.8e12,  # datasheet 2.039 TB/s, x0.9 copy efficiency
    l2_bytes_per_s=5.0e12,  # ~2.5x DRAM (microbenchmark papers)
    # cc 8.0: 164 KB shared memory per SM, 163 KB per block (CUDA C++ Programming Guide).
    smem_per_sm=164 * KIB,
    smem_per_block=163 * KIB,
    regs_per_sm=65536,
    max_regs_per_thread=255,
    max_threads_per_sm=2048,
    # Datasheet: bf16/fp16 312, tf32 156 TFLOP/s dense; x0.8 sustained as on the H200.
    tensor_flops={"bfloat16": 250 * TERA, "float16": 250 * TERA, "float32": 125 * TERA},
    fp32_flops=15.6 * TERA,  # datasheet 19.5, x0.8
    wgmma=False,
    launch_seconds=15e-6,  # a jax-triton launch under jax.jit, as measured on the H200
    source="built-in: A100 SXM4 80GB datasheet; sustained fractions as measured on the H200",
)

BUILTIN: dict[str, Hardware] = {hw.name: hw for hw in (H200, H100, A100)}
# The description used where no GPU is present (CPU interpreter, `jtblas explain` on a laptop).
DEFAULT = H200
