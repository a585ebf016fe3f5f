"""How each contender runs one GEMM: the operands, the launchers and the peers' configurations.

Contenders (names used in the results JSON):
  jtblas      the model's pick (`jtblas.select`) on our kernel, launched on torch tensors
  oracle      the best of `selection.candidates_as_stored()` on our kernel (exhaustive; see `oracle.py`)
  xla         `lax.dot_general` under `jax.jit` (XLA autotunes between cuBLAS and its Triton GEMMs)
  cublas      `torch.mm` (cuBLAS / cuBLASLt)
  tutorial    Triton tutorial 03's `@triton.autotune` configs for CUDA, run through our kernel;
              the best one after timing them all (what the autotuner would keep)
  nvmmh       NVIDIA nvMatmulHeuristics' first TRITON-target choice mapped onto our kernel
  jtblas_jax  `jtblas.matmul` through JAX (jax-triton), timed by the slope method: a spot check
              that the torch launch measures what a JAX user gets
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from jtblas.bench.jax_loop import (  # noqa: F401 - the torch runner's names for them
    MAX_OPERAND_SETS,
    SlopeTimer,
    empty_iteration_seconds,
    jtblas_dot,
    operand_sets,
    xla_dot,
)
from jtblas.bench.jax_loop import operands as jax_operands  # noqa: F401
from jtblas.config import Config, Problem
from jtblas.torch_launch import LaunchOperands, kernel_launcher  # noqa: F401 - the torch runner's names

# Triton tutorial 03 (python/tutorials/03-matrix-multiplication.py, `get_cuda_autotune_config`,
# triton 3.x): the configs `@triton.autotune` times for fp16/bf16 operands on CUDA (its two
# further configs are for fp8 inputs only). Written as our Config; GROUP_SIZE_M is 8 in all.
TUTORIAL_CONFIGS = (
    Config(block_m=128, block_n=256, block_k=64, group_m=8, num_stages=3, num_warps=8),
    Config(block_m=64, block_n=256, block_k=32, group_m=8, num_stages=4, num_warps=4),
    Config(block_m=128, block_n=128, block_k=32, group_m=8, num_stages=4, num_warps=4),
    Config(block_m=128, block_n=64, block_k=32, group_m=8, num_stages=4, num_warps=4),
    Config(block_m=64, block_n=128, block_k=32, group_m=8, num_stages=4, num_warps=4),
    Config(block_m=128, block_n=32, block_k=32, group_m=8, num_stages=4, num_warps=4),
    Config(block_m=64, block_n=32, block_k=32, group_m=8, num_stages=5, num_warps=2),
    Config(block_m=32, block_n=64, block_k=32, group_m=8, num_stages=5, num_warps=2),
)

def config_dict(config: Config) -> dict:
    return dataclasses.asdict(config)


def config_from_dict(values: dict) -> Config:
    return Config(**values)


# --------------------------------------------------------------------------------------------
# nvMatmulHeuristics (optional)
# --------------------------------------------------------------------------------------------

_NVMMH_PRECISION = {"bfloat16": "BSB", "float16": "HSH", "float32": "TST"}


class Nvmmh:
    """nvMatmulHeuristics' TRITON target with the H200 preset (or H100 / A100 by name).

    The interface object is kept alive for the whole run: its destructor crashes at interpreter
    exit in 0.1.0.27 (seen 2026-11), so the CLI leaves through `os._exit` once it was used.
    """

    def __init__(self, gpu_name: str):
        import nvMatmulHeuristics as nv  # optional dependency: ImportError means "skip"

        self.nv = nv
        self.gpu_name = gpu_name
        self._interfaces = {}
        self._hw = {}

    def _interface(self, dtype: str):
        nv = self.nv
        if dtype not in self._interfaces:
            precision = _NVMMH_PRECISION.get(dtype, "BSB")
            interface = nv.NvMatmulHeuristicsInterface(nv.NvMatmulHeuristicsTarget.TRITON, precision=precision)
            hw = interface.createHardwareDescriptor()
            gpu = self.gpu_name.lower()
            preset = ("H100_SXM" if "h100" in gpu else "A100_SXM_80GB" if "a100" in gpu else "H200_SXM")
            if hasattr(nv.NvMatmulHeuristicsNvidiaGpu, preset):
                interface.setHardwarePredefinedGpu(hw, getattr(nv.NvMatmulHeuristicsNvidiaGpu, preset))
            self._interfaces[dtype] = interface
            self._hw[dtype] = hw
        return self._interfaces[dtype], self._hw[dtype]

    def query(self, problem: Problem) -> tuple[dict, float]:
        """First TRITON-target result as a plain dict, and the query's seconds."""
        interface, hw = self._interface(problem.dtype)
        layout = self.nv.boolsToNvMatmulHeuristicsLayout(problem.transpose_a, problem.transpose_b)
        start = time.perf_counter()
        results = interface.get_with_mnk(problem.m, problem.n, problem.k, layout, 1, hw)
        seconds = time.perf_counter() - start
        if not results:
            raise RuntimeError("nvMatmulHeuristics returned no configuration")
        k = results[0]["kernel"]
        raw = dict(
            cta=(k.cta_tile_m, k.cta_tile_n, k.cta_tile_k), warp=(k.warp_tile_m, k.warp_tile_n, k.warp_tile_k),
            stages=k.stages, split_k=k.split_k, swizzle=k.swizzle_factor, cta_order=k.cta_order,
            predicted_s=results[0].get("runtime"),
        )
        return raw, seconds


def _pow2_clamp(value, lo: int, hi: int) -> int:
    value = max(1, int(value or 1))
    p = 1 << (value.bit_length() - 1)  # round down to a power of two
    return max(lo, min(hi, p))


def config_from_nvmmh(raw: dict, problem: Problem, *, fits: Callable[[Config], bool], split_k_ok: bool) -> Config:
    """Maps nvMatmulHeuristics' CTA tile / warp tile / stages / split-K / swizzle onto our Config,
    clamped to what our kernel runs: blocks powers of two in [16, 256], warps = CTA tile ÷ warp
    tile in {4, 8} (Hopper's wgmma works on groups of 4 warps), group_m = swizzle, stages lowered
    until the config fits shared memory, split-K only if the kernel has it."""
    bm, bn, bk = (_pow2_clamp(x, 16, 256) for x in raw["cta"])
    wm, wn, _ = raw.get("warp") or (bm, bn, bk)
    warps = max(1, (bm // max(1, int(wm or bm))) * (bn // max(1, int(wn or bn))))
    warps = 4 if warps <= 4 else 8
    split = _pow2_clamp(raw.get("split_k") or 1, 1, 64) if split_k_ok else 1
    stages = max(1, min(8, int(raw.get("stages") or 3)))
    group = _pow2_clamp(raw.get("swizzle") or 1, 1, 64)
    config = Config(block_m=bm, block_n=bn, block_k=bk, group_m=group, num_warps=warps,
                    num_stages=stages, split_k=split)
    while not fits(config) and config.num_stages > 1:
        config = Config(**{**config_dict(config), "num_stages": config.num_stages - 1})
    return config


# --------------------------------------------------------------------------------------------
# torch-side operands and launchers (GPU machine only)
# --------------------------------------------------------------------------------------------


class TorchOperands:
    """`nbuf` independent random operand sets in the shape's storage layout, the outputs, and an
    fp32 reference product of set 0."""

    def __init__(self, torch, shape, nbuf: int, *, seed: int = 0):
        self.torch = torch
        dtype = getattr(torch, shape.dtype)
        gen = torch.Generator(device="cuda").manual_seed(seed)
        a_shape = (shape.k, shape.m) if shape.transpose_a else (shape.m, shape.k)
        b_shape = (shape.n, shape.k) if shape.transpose_b else (shape.k, shape.n)
        self.nbuf = nbuf
        self.a = [torch.randn(a_shape, device="cuda", dtype=dtype, generator=gen) for _ in range(nbuf)]
        self.b = [torch.randn(b_shape, device="cuda", dtype=dtype, generator=gen) for _ in range(nbuf)]
        self.c = [torch.empty((shape.m, shape.n), device="cuda", dtype=dtype) for _ in range(nbuf)]
        self.a_op = [x.t() if shape.transpose_a else x for x in self.a]  # logical [M, K] views
        self.b_op = [x.t() if shape.transpose_b else x for x in self.b]  # logical [K, N] views
        self.reference = torch.mm(self.a_op[0].float(), self.b_op[0].float())

    def error(self, launch: Callable[[int], object]) -> float:
        """max |C − ref| / max |ref| for set 0, after poisoning C with NaN (NaN if C was not fully
        written)."""
        torch = self.torch
        self.c[0].fill_(float("nan"))
        launch(0)
        torch.cuda.synchronize()
        err = (self.c[0].float() - self.reference).abs().max() / self.reference.abs().max().clamp_min(1e-30)
        return float(err)

    def free(self):
        self.a = self.b = self.c = self.a_op = self.b_op = self.reference = None


def repack_plan(problem: Problem):
    """The model's `jtblas.model.ProductPlan` for `problem` when it repacks operands, else None."""
    from jtblas import hardware, model

    plan = model.plan_for_problem(problem, hardware.detect())
    return plan if plan.pad_a or plan.pad_b else None


def repacked_launcher(ops: TorchOperands, plan) -> Callable[[int], object]:
    """launch(i): what `jtblas.matmul` runs for a repacking `jtblas.model.ProductPlan`: the misaligned
    operands copied into zero-padded buffers (K and the leading dimension rounded up; the padding
    is zeroed once, as the copies never touch it; an operand maybe transposed: `ProductPlan`),
    then the kernel on the padded problem, and, if M or N was padded, C's slice copied out of the
    padded C. The copies are part of the timed product."""
    from jtblas.model import repack

    torch = ops.torch
    problem, kernel_problem = plan.problem, plan.kernel_problem
    # What is copied: A and B as stored, or transposed (B [N, K] into [K, N], or in tf32 A [K, M]
    # into [M, K] and B [K, N] into [N, K]).
    sources = dict(a=[x.t() for x in ops.a] if plan.transpose_a else ops.a,
                   b=[x.t() for x in ops.b] if plan.transpose_b else ops.b)

    def padded_copies(operand, pad):
        if not pad:
            return sources[operand], None
        rows, row_stride = repack.stored_shape(kernel_problem, operand)
        buffers = [torch.zeros((rows, row_stride), device="cuda", dtype=x.dtype) for x in sources[operand]]
        views = [buf[: x.shape[0], : x.shape[1]] for buf, x in zip(buffers, sources[operand])]
        return buffers, views

    a_buffers, a_views = padded_copies("a", plan.pad_a)
    b_buffers, b_views = padded_copies("b", plan.pad_b)
    sliced = (kernel_problem.m, kernel_problem.n) != (problem.m, problem.n)
    c_out = ([torch.empty((kernel_problem.m, kernel_problem.n), device="cuda", dtype=x.dtype) for x in ops.c]
             if sliced else ops.c)
    kernel = kernel_launcher(LaunchOperands(a_buffers, b_buffers, c_out, torch), kernel_problem, plan.config)

    def launch(i):
        if a_views is not None:
            a_views[i].copy_(sources["a"][i])
        if b_views is not None:
            b_views[i].copy_(sources["b"][i])
        kernel(i)
        if sliced:
            ops.c[i].copy_(c_out[i][: problem.m, : problem.n])

    return launch


def cublas_launcher(ops: TorchOperands) -> Callable[[int], object]:
    torch = ops.torch
    a, b, c = ops.a_op, ops.b_op, ops.c

    def launch(i):
        torch.mm(a[i], b[i], out=c[i])

    return launch


def slope_timer_jax(dot: Callable, as_, bs, *, estimate_s: float, target_s: float = 4e-3
                    ) -> tuple[Callable[[int], dict], dict]:
    """`jax_loop.SlopeTimer` of `dot` as (measure(trials) → result dict, compile facts): the
    torch runner's JAX spot checks, timed as the benchmark of record times every product."""
    timer = SlopeTimer(dot, as_, bs, estimate_s=estimate_s, target_s=target_s)

    def measure(trials: int) -> dict:
        return dict(timer.measure(trials), method=timer.method(trials))

    return measure, dict(compile_s=timer.compile_s, repeats=timer.products, sets=timer.sets)
