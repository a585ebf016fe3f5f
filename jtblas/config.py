"""The two value types every layer shares: a kernel `Config` and a GEMM `Problem`.

Both are frozen, slotted, keyword-only and hashable, so they can be cached on and passed as
static arguments to `jax.jit`. This module is pure Python: the model imports it without JAX.
"""

from __future__ import annotations

import dataclasses
import re

# Operand dtypes the kernel accepts, by NumPy/JAX name, with their size in bytes.
OPERAND_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
# Output dtypes the kernel can store (the fp32 accumulator is cast to one of these).
OUTPUT_DTYPE_BYTES = dict(OPERAND_DTYPE_BYTES)
# Dtypes of the epilogue's bias and residual (read, converted to fp32, added to the accumulator).
EPILOGUE_DTYPE_BYTES = dict(OPERAND_DTYPE_BYTES)
# The activations the kernel's epilogue applies to the fp32 accumulator (after the bias, before
# the residual): max(x, 0); GELU's tanh approximation and its exact erf form
# (`jax.nn.gelu(approximate=True / False)`); x · sigmoid(x).
ACTIVATIONS = ("relu", "gelu_tanh", "gelu", "silu")

VALID_NUM_WARPS = (1, 2, 4, 8, 16)
# tl.dot needs every block dimension to be at least 16 (an mma instruction's K and N).
MIN_BLOCK = 16
MAX_BLOCK = 512
INPUT_PRECISIONS = ("tf32", "ieee")
# Most programs one tile's K loop is shared by (split-K): 256 K slices (a grid under two waves
# never needs more; the model searches jtblas.model.candidates.SPLIT_K_FACTORS). Any integer: the
# kernel gives each split ⌈K blocks / split_k⌉ of them.
MAX_SPLIT_K = 256
# `Config.short()`'s form, read back by `Config.from_short`.
_SHORT_NAME = re.compile(r"(\d+)x(\d+)x(\d+) w(\d+) s(\d+) g(\d+)(?: k(\d+))?(?: p(\d+))?( swap)?( tma)?$")
# Most K phases (`Config.k_phases`): 16 bytes of the narrowest operand dtype (2 bytes) is 8 rows'
# worth of misalignment at most.
MAX_K_PHASES = 8


def compute_dtype_name(a_dtype: str, b_dtype: str, input_precision: str = "tf32") -> str:
    """The dtype the kernel multiplies operands stored in `a_dtype` and `b_dtype` in: theirs when
    they share one; else the narrower one's (bf16 activations x an fp32 weight run on bf16 tensor
    cores, as Flax's `Dense(dtype=jnp.bfloat16)` computes), and fp32 where both are 16-bit
    (fp16 x bf16) or the input precision is "ieee" (HIGHEST: the narrow operand converted
    exactly, full fp32 products)."""
    if a_dtype == b_dtype:
        return a_dtype
    narrow = [name for name in (a_dtype, b_dtype) if OPERAND_DTYPE_BYTES[name] == 2]
    if len(narrow) != 1 or input_precision == "ieee":
        return "float32"
    return narrow[0]


def _is_power_of_two(value: int) -> bool:
    return isinstance(value, int) and value > 0 and value & (value - 1) == 0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Config:
    """Meta-parameters of one launch of the GEMM kernel.

    Attributes:
      block_m, block_n, block_k: the tile each program computes (block_m × block_n of C) and the
        depth of one K step; powers of two in [16, 512].
      group_m: rows of tiles walked together by the grouped program ordering (L2 reuse); a power
        of two ≥ 1.
      num_warps: warps per program, one of 1, 2, 4, 8, 16.
      num_stages: software-pipeline depth of the K loop (shared-memory buffers), 1 to 8.
      split_k: number of programs sharing one tile's K loop (each ⌈K blocks / split_k⌉ of them),
        an int in [1, 256]; 1 means no split.
      swap_ab: compute each tile transposed, Cᵀ = Bᵀ·Aᵀ, so that the tensor cores' rows are the
        tile's block_n columns: a 16-row tile that is 64 or more columns wide and has 4 or 8 warps
        then runs wgmma instead of mma.sync on Hopper (the pointer kernel only; the same loads,
        shared memory and output).
      k_phases: number of programs sharing one tile's K rows by residue: program p reduces rows p,
        p + k_phases, ... (1: none). Where an operand stored with its rows along K has a row
        stride that is not a multiple of 16 bytes, k_phases rows apart it is, so each phase loads
        it 16 bytes at a time from a shifted tile (`jtblas/kernels/matmul.py`); the phases' fp32
        partials are summed like split-K's. A power of two up to 8; not with split_k or tma.
      tma: run the persistent kernel that moves A, B and C with the tensor-memory accelerator
        (`jtblas/kernels/matmul_tma.py`; Hopper, split_k 1) instead of the pointer-based one.
    """

    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3
    split_k: int = 1
    swap_ab: bool = False
    tma: bool = False
    k_phases: int = 1

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k"):
            value = getattr(self, name)
            if not _is_power_of_two(value) or not MIN_BLOCK <= value <= MAX_BLOCK:
                raise ValueError(
                    f"Config.{name} must be a power of two in [{MIN_BLOCK}, {MAX_BLOCK}], "
                    f"got {value!r}"
                )
        if not _is_power_of_two(self.group_m) or self.group_m > 64:
            raise ValueError(f"Config.group_m must be a power of two in [1, 64], got {self.group_m!r}")
        if self.num_warps not in VALID_NUM_WARPS:
            raise ValueError(f"Config.num_warps must be one of {VALID_NUM_WARPS}, got {self.num_warps!r}")
        if not isinstance(self.num_stages, int) or not 1 <= self.num_stages <= 8:
            raise ValueError(f"Config.num_stages must be an int in [1, 8], got {self.num_stages!r}")
        if not isinstance(self.split_k, int) or isinstance(self.split_k, bool) or not 1 <= self.split_k <= MAX_SPLIT_K:
            raise ValueError(f"Config.split_k must be an int in [1, {MAX_SPLIT_K}], got {self.split_k!r}")
        if not _is_power_of_two(self.k_phases) or self.k_phases > MAX_K_PHASES:
            raise ValueError(f"Config.k_phases must be a power of two in [1, {MAX_K_PHASES}], got {self.k_phases!r}")
        if self.k_phases > 1 and (self.split_k > 1 or self.tma):
            raise ValueError(f"Config.k_phases={self.k_phases} cannot be combined with split_k={self.split_k} "
                             f"or tma={self.tma} (the phases are the kernel's K split)")
        for name in ("swap_ab", "tma"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Config.{name} must be a bool, got {getattr(self, name)!r}")
        if self.tma and self.swap_ab:
            raise ValueError("Config.tma and Config.swap_ab cannot both be set (the TMA kernel does not swap)")
        if self.tma and self.split_k != 1:
            raise ValueError(
                f"Config.tma needs split_k=1 (the TMA kernel does not split K), got split_k={self.split_k}")

    @property
    def k_slices(self) -> int:
        """Programs sharing one tile's K loop, each writing an fp32 partial: split_k · k_phases."""
        return self.split_k * self.k_phases

    def short(self) -> str:
        """A compact one-line name, e.g. `128x256x64 w8 s3 g8` (` k4` for a split, ` p8` for
        K phases, ` swap`, ` tma`)."""
        name = (
            f"{self.block_m}x{self.block_n}x{self.block_k} w{self.num_warps} "
            f"s{self.num_stages} g{self.group_m}"
        )
        return (name + (f" k{self.split_k}" if self.split_k > 1 else "")
                + (f" p{self.k_phases}" if self.k_phases > 1 else "") + (" swap" if self.swap_ab else "")
                + (" tma" if self.tma else ""))

    @classmethod
    def from_short(cls, text: str) -> Config:
        """The Config of a `short()` name, e.g. `Config.from_short("128x256x64 w8 s3 g8 tma")`."""
        match = _SHORT_NAME.match(text.strip())
        if not match:
            raise ValueError(
                f"Config.from_short: {text!r} is not of the form '128x256x64 w8 s3 g8 [k4] [p8] [swap] [tma]'")
        bm, bn, bk, warps, stages, group, split, phases, swap, tma = match.groups()
        return cls(block_m=int(bm), block_n=int(bn), block_k=int(bk), num_warps=int(warps),
                   num_stages=int(stages), group_m=int(group), split_k=int(split or 1), swap_ab=bool(swap),
                   tma=bool(tma), k_phases=int(phases or 1))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """One GEMM C[M, N] = A[M, K] · B[K, N] as the kernel sees it.

    Attributes:
      m, n, k: problem sizes (elements), each ≥ 1.
      dtype: the compute dtype name (`"bfloat16"`, `"float16"` or `"float32"`): the operands'
        dtype, the one the tensor cores (or FMA units) multiply in.
      a_dtype, b_dtype: the dtype A (B) is stored in, where it is not `dtype` ("": it is): the
        kernel loads it as stored and converts it to `dtype` in registers.
      out_dtype: output dtype name.
      transpose_a: A is stored as [K, M] row-major (read through strides).
      transpose_b: B is stored as [N, K] row-major.
      input_precision: `"tf32"` or `"ieee"`; only changes fp32 operands.
      lda, ldb: elements between consecutive stored rows of A (B), at least the stored row length
        (K for A, M for a transposed A; N for B, K for a transposed B); 0 (the default) means
        dense. Only a repacked problem (`jtblas.model.repack`) has padded rows.
      batch: independent products of these sizes run by one launch (its grid's batch axis), each
        with its own A, B and C (`vmap`, batched `dot_general`); 1 (the default) is one product.
      bias_dtype: the dtype of a bias [N] added to every row of the fp32 product ("": none).
      activation: one of `ACTIVATIONS` applied after the bias ("": none).
      residual_dtype: the dtype of a residual [M, N] added last, before the cast to `out_dtype`
        ("": none). The bias, activation and residual are the kernel's epilogue: applied to the
        fp32 accumulator in the same launch (in the split-K reduction where K is split).
      gated: the product's N columns are a gate's N/2 then an up projection's N/2 (a gated
        linear unit, e.g. SwiGLU): C is [M, N/2] = activation(gate + bias[:N/2]) ·
        (up + bias[N/2:]) + residual, each tile pairing the gate's and the up projection's columns
        (`out_n`). The plain pointer kernel only: no K split, swapped tile, TMA or repacking.
    """

    m: int
    n: int
    k: int
    dtype: str = "bfloat16"
    out_dtype: str = "bfloat16"
    transpose_a: bool = False
    transpose_b: bool = False
    input_precision: str = "tf32"
    lda: int = 0
    ldb: int = 0
    batch: int = 1
    bias_dtype: str = ""
    activation: str = ""
    residual_dtype: str = ""
    a_dtype: str = ""
    b_dtype: str = ""
    gated: bool = False

    def __post_init__(self) -> None:
        for name in ("m", "n", "k", "batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Problem.{name} must be a positive int, got {value!r}")
        if self.dtype not in OPERAND_DTYPE_BYTES:
            raise ValueError(f"Problem.dtype must be one of {sorted(OPERAND_DTYPE_BYTES)}, got {self.dtype!r}")
        if self.out_dtype not in OUTPUT_DTYPE_BYTES:
            raise ValueError(
                f"Problem.out_dtype must be one of {sorted(OUTPUT_DTYPE_BYTES)}, got {self.out_dtype!r}"
            )
        if self.input_precision not in INPUT_PRECISIONS:
            raise ValueError(
                f"Problem.input_precision must be one of {INPUT_PRECISIONS}, got {self.input_precision!r}"
            )
        for name in ("a_dtype", "b_dtype"):
            value = getattr(self, name)
            if value and (value not in OPERAND_DTYPE_BYTES or value == self.dtype):
                raise ValueError(f"Problem.{name} must be '' (stored as dtype) or another of "
                                 f"{sorted(OPERAND_DTYPE_BYTES)} than dtype={self.dtype!r}, got {value!r}")
        for name in ("bias_dtype", "residual_dtype"):
            value = getattr(self, name)
            if value and value not in EPILOGUE_DTYPE_BYTES:
                raise ValueError(
                    f"Problem.{name} must be '' (none) or one of {sorted(EPILOGUE_DTYPE_BYTES)}, got {value!r}")
        if not isinstance(self.gated, bool):
            raise ValueError(f"Problem.gated must be a bool, got {self.gated!r}")
        if self.gated and self.n % 2:
            raise ValueError(f"Problem.n must be even for a gated product (the gate's columns, then the up "
                             f"projection's), got {self.n}")
        if self.activation and self.activation not in ACTIVATIONS:
            raise ValueError(f"Problem.activation must be '' (none) or one of {ACTIVATIONS}, got {self.activation!r}")
        for name, dense in (("lda", self.m if self.transpose_a else self.k),
                            ("ldb", self.k if self.transpose_b else self.n)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or (value and value < dense):
                raise ValueError(f"Problem.{name} must be 0 (dense) or an int >= {dense}, got {value!r}")

    @property
    def layout(self) -> str:
        """Two letters, A's then B's: N stored as used, T stored transposed (BLAS convention)."""
        return ("T" if self.transpose_a else "N") + ("T" if self.transpose_b else "N")

    @property
    def a_row_stride(self) -> int:
        """Elements between consecutive stored rows of A: `lda`, or the dense row length."""
        return self.lda or (self.m if self.transpose_a else self.k)

    @property
    def b_row_stride(self) -> int:
        """Elements between consecutive stored rows of B: `ldb`, or the dense row length."""
        return self.ldb or (self.k if self.transpose_b else self.n)

    @property
    def operand_bytes(self) -> int:
        """Bytes per operand element."""
        return OPERAND_DTYPE_BYTES[self.dtype]

    @property
    def a_bytes(self) -> int:
        """Bytes per element of A as stored."""
        return OPERAND_DTYPE_BYTES[self.a_dtype or self.dtype]

    @property
    def b_bytes(self) -> int:
        """Bytes per element of B as stored."""
        return OPERAND_DTYPE_BYTES[self.b_dtype or self.dtype]

    @property
    def casts(self) -> bool:
        """Whether an operand is stored in another dtype than the compute dtype."""
        return bool(self.a_dtype or self.b_dtype)

    @property
    def out_bytes(self) -> int:
        """Bytes per output element."""
        return OUTPUT_DTYPE_BYTES[self.out_dtype]

    @property
    def bias_bytes(self) -> int:
        """Bytes per bias element (0 without a bias)."""
        return EPILOGUE_DTYPE_BYTES[self.bias_dtype] if self.bias_dtype else 0

    @property
    def residual_bytes(self) -> int:
        """Bytes per residual element (0 without a residual)."""
        return EPILOGUE_DTYPE_BYTES[self.residual_dtype] if self.residual_dtype else 0

    @property
    def out_n(self) -> int:
        """Columns of C: N, or N/2 for a gated product."""
        return self.n // 2 if self.gated else self.n

    @property
    def has_epilogue(self) -> bool:
        """Whether the product has a bias, an activation, a residual or a gate."""
        return bool(self.bias_dtype or self.activation or self.residual_dtype or self.gated)

    def epilogue_short(self) -> str:
        """The epilogue in words, e.g. ` +bias(bfloat16) gelu +residual(float32)` ('' without one;
        ` gated silu` for a gated product)."""
        parts = [f"+bias({self.bias_dtype})" if self.bias_dtype else "", "gated" if self.gated else "",
                 self.activation, f"+residual({self.residual_dtype})" if self.residual_dtype else ""]
        return "".join(f" {part}" for part in parts if part)

    @property
    def flops(self) -> int:
        """Floating-point operations of the products: 2·batch·M·N·K."""
        return 2 * self.batch * self.m * self.n * self.k

    def short(self) -> str:
        """A compact one-line name, e.g. `4096x4096x4096 bfloat16 NN` (`4096 x 64x64x4096 ...` for
        a batch of 4096 products, ` b=float32` for a B stored in fp32, then the epilogue)."""
        padded = "".join(f" {name}={value}" for name, value in (("lda", self.lda), ("ldb", self.ldb)) if value)
        batch = f"{self.batch} x " if self.batch > 1 else ""
        stored = "".join(f" {name}={value}" for name, value in (("a", self.a_dtype), ("b", self.b_dtype)) if value)
        return (f"{batch}{self.m}x{self.n}x{self.k} {self.dtype} {self.layout}{stored}{padded}"
                f"{self.epilogue_short()}")
