"""How each contender runs one GEMM: the operands, the launchers and the peers' configurations.

Contenders (names used in the results JSON):
  jtblas      the model's pick (`jtblas.select`) on our kernel, launched on torch tensors
  oracle      the best of `jtblas.candidates()` on our kernel (exhaustive; see `oracle.py`)
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
import math
import time
from collections.abc import Callable

from jtblas.config import Config, Problem

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

# Operand sets rotate so that the bytes touched per launch cycle exceed the L2 this many times
# over: weights then come from DRAM, as in a real forward pass, not from a hot L2.
L2_ROTATION_FACTOR = 2.5
MAX_OPERAND_SETS = 16


def config_dict(config: Config) -> dict:
    return dataclasses.asdict(config)


def config_from_dict(values: dict) -> Config:
    return Config(**values)


def operand_sets(set_bytes: int, l2_bytes: int, *, limit: int = MAX_OPERAND_SETS) -> int:
    """How many operand sets to rotate through: enough that they cover L2_ROTATION_FACTOR × L2."""
    if set_bytes <= 0:
        return 1
    return int(max(1, min(limit, math.ceil(L2_ROTATION_FACTOR * l2_bytes / set_bytes))))


# --------------------------------------------------------------------------------------------
# nvMatmulHeuristics (optional)
# --------------------------------------------------------------------------------------------

_NVMMH_PRECISION = {"bfloat16": "BSB", "float16": "HSH", "float32": "TST"}


class Nvmmh:
    """nvMatmulHeuristics' TRITON target with the H200 preset (or H100 / A100 by name).

    The interface object is kept alive for the whole run: its destructor crashes at interpreter
    exit in 0.1.0.27 (shared/PEERS.md), so the CLI leaves through `os._exit` once it was used.
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


def kernel_launcher(ops: TorchOperands, problem: Problem, config: Config) -> Callable[[int], object]:
    """launch(i): our `matmul_kernel` on operand set i with `config` (the grid and constexprs come
    from `jtblas.ops.launch_spec`, exactly as `jtblas.matmul` launches it)."""
    from jtblas.kernels.matmul import matmul_kernel
    from jtblas.kernels.matmul_tma import matmul_tma_kernel
    from jtblas.kernels.reduce import sum_splits_kernel
    from jtblas.ops import launch_spec, sum_splits_spec

    spec = launch_spec(problem, config)
    if config.tma:
        use_torch_global_scratch(ops.torch)
    kernel = (matmul_tma_kernel if config.tma else matmul_kernel)[spec.grid]
    scalars, meta = spec.scalars, spec.metaparams
    a, b, c = ops.a, ops.b, ops.c

    if config.split_k == 1:
        def launch(i):
            kernel(a[i], b[i], *scalars, c[i], num_warps=spec.num_warps, num_stages=spec.num_stages, **meta)

        return launch

    # Split-K: fp32 partials [split_k, M, N] (one workspace: launches are serialised on a stream),
    # then the fixed-order sum and cast; both launches are timed as one product.
    workspace = ops.torch.empty((config.split_k, problem.m, problem.n), device="cuda", dtype=ops.torch.float32)
    reduce = sum_splits_spec(problem, config)
    reducer = sum_splits_kernel[reduce.grid]

    def launch_split(i):
        kernel(a[i], b[i], *scalars, workspace, num_warps=spec.num_warps, num_stages=spec.num_stages, **meta)
        reducer(workspace, *reduce.scalars, c[i], num_warps=reduce.num_warps, num_stages=reduce.num_stages,
                **reduce.metaparams)

    return launch_split


def gluon_ws_launch(torch, a, b, c, config: Config, *, transpose_a: bool, transpose_b: bool) -> None:
    """C = op(a) · op(b) into `c` (torch tensors, bf16/fp16, row-major as stored) by the
    experimental warp-specialized Gluon kernel, launched as `jtblas.ops.gluon_ws_matmul` launches
    it (`jtblas.ops.gluon_ws_spec`) on the GPU in use."""
    from jtblas import hardware
    from jtblas.kernels.gluon_ws import ws_matmul_kernel
    from jtblas.ops import gluon_ws_spec

    use_torch_global_scratch(torch)
    dtype = str(a.dtype).removeprefix("torch.")
    m, n = c.shape
    problem = Problem(m=m, n=n, k=a.shape[0] if transpose_a else a.shape[1], dtype=dtype, out_dtype=dtype,
                      transpose_a=transpose_a, transpose_b=transpose_b)
    spec = gluon_ws_spec(problem, config, hardware.detect())
    ws_matmul_kernel[spec.grid](a, b, *spec.scalars, c, num_warps=spec.num_warps, **spec.metaparams)


def use_torch_global_scratch(torch) -> None:
    """Lets Triton's own launcher allocate the global scratch of kernels that need it (the TMA
    kernel's device-side descriptors) from torch's caching allocator, on the current stream
    (graph-capturable)."""
    import triton

    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))


def repack_plan(problem: Problem):
    """The model's `jtblas.model.Plan` for `problem` when it repacks operands, else None."""
    from jtblas import hardware, model

    plan = model.plan_for_problem(problem, hardware.detect())
    return plan if plan.pad_a or plan.pad_b else None


def repacked_launcher(ops: TorchOperands, plan) -> Callable[[int], object]:
    """launch(i): what `jtblas.matmul` runs for a repacking `jtblas.model.Plan`: the misaligned
    operands copied into zero-padded buffers (K and the leading dimension rounded up; the padding
    is zeroed once, as the copies never touch it; a B stored [N, K] maybe transposed into
    [K, N]), then the kernel on the padded problem, and, if M or N was padded, C's slice copied
    out of the padded C. The copies are part of the timed product."""
    from jtblas.model import repack

    torch = ops.torch
    problem, kernel_problem = plan.problem, plan.kernel_problem
    # What is copied: A as stored; B as stored, or B [N, K] transposed into [K, N].
    sources = dict(a=ops.a, b=[x.t() for x in ops.b] if plan.transpose_b else ops.b)

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


@dataclasses.dataclass
class LaunchOperands:
    """The operand lists `kernel_launcher` reads (a, b, c per operand set) and the torch module."""

    a: list
    b: list
    c: list
    torch: object = None


def cublas_launcher(ops: TorchOperands) -> Callable[[int], object]:
    torch = ops.torch
    a, b, c = ops.a_op, ops.b_op, ops.c

    def launch(i):
        torch.mm(a[i], b[i], out=c[i])

    return launch


# --------------------------------------------------------------------------------------------
# JAX side: XLA's dot and jtblas.matmul, timed by the slope method
# --------------------------------------------------------------------------------------------


def xla_dot(shape) -> Callable:
    """`lax.dot_general` contracting the stored layouts directly (no explicit transpose)."""
    import jax
    import jax.numpy as jnp

    ca = 0 if shape.transpose_a else 1
    cb = 1 if shape.transpose_b else 0
    out = jnp.dtype(shape.dtype)

    def dot(a, b):
        return jax.lax.dot_general(a, b, (((ca,), (cb,)), ((), ())), preferred_element_type=out)

    return dot


def jtblas_dot(shape, config: Config | None) -> Callable:
    import jtblas

    def dot(a, b):
        return jtblas.matmul(a, b, transpose_a=shape.transpose_a, transpose_b=shape.transpose_b, config=config)

    return dot


# Products per body of the timing loop (unrolled iterations x operand sets). On the H200 one
# iteration of XLA's while loop cost 16-25 µs of its own (BENCHMARKS.md, 2026-11-30) - a
# device-to-host check of the loop condition - which the slope charged to every product; with 16
# products per body it is paid once per 16. A body of 16 iterations x 16 operand sets (small
# shapes rotate 16 sets to defeat L2) took XLA up to 11.6 s to compile per shape; the unroll
# shrinks as the sets grow instead.
LOOP_UNROLL = 16


def loop_unroll(sets: int, repeats: int) -> int:
    """Iterations unrolled into one loop body: enough for LOOP_UNROLL products (at most
    `repeats`)."""
    return max(1, min(repeats, -(-LOOP_UNROLL // sets)))


def loop_function(dot: Callable, repeats: int) -> Callable:
    """f(as_, bs) → outputs: `repeats` iterations, each running `dot` once on every operand set,
    in a `fori_loop` whose body holds `loop_unroll` iterations. XLA can neither hoist nor merge
    the dots: each iteration writes tanh(C[0, 0]) into A[0, 0] (an in-place one-element update of
    the loop-carried A), so the next iteration's product depends on this one's. Every C of every
    iteration in the body is a loop output: were only the last one's carried, XLA would compute
    just C[0, 0] of the others' split-K reductions (it pushes the slice into the reduce fusion),
    timing cuBLAS's split products without most of their reduction."""
    import jax
    import jax.numpy as jnp

    def f(as_, bs):
        unroll = loop_unroll(len(as_), repeats)
        trips, rest = divmod(repeats, unroll)

        def iteration(as_):
            new_as, cs = [], []
            for a, b in zip(as_, bs):
                c = dot(a, b)
                new_as.append(a.at[0, 0].set(jnp.tanh(c[0, 0].astype(jnp.float32)).astype(a.dtype)))
                cs.append(c)
            return new_as, cs

        def body(_, carry):
            as_, _ = carry
            outputs = []
            for _ in range(unroll):
                as_, cs = iteration(as_)
                outputs.append(cs)
            return as_, outputs

        shapes = [jax.eval_shape(dot, a, b) for a, b in zip(as_, bs)]
        outputs = [[jnp.zeros(c.shape, c.dtype) for c in shapes] for _ in range(unroll)]
        as_, outputs = jax.lax.fori_loop(0, trips, body, (list(as_), outputs))
        for _ in range(rest):
            as_, cs = iteration(as_)
            outputs.append(cs)
        return outputs

    return f


def jax_operands(shape, nbuf: int, seed: int = 0):
    import jax
    import jax.numpy as jnp

    dtype = jnp.dtype(shape.dtype)
    a_shape = (shape.k, shape.m) if shape.transpose_a else (shape.m, shape.k)
    b_shape = (shape.n, shape.k) if shape.transpose_b else (shape.k, shape.n)
    keys = jax.random.split(jax.random.key(seed), 2 * nbuf)
    as_ = [jax.random.normal(keys[2 * i], a_shape, dtype) for i in range(nbuf)]
    bs = [jax.random.normal(keys[2 * i + 1], b_shape, dtype) for i in range(nbuf)]
    jax.block_until_ready((as_, bs))
    return as_, bs


def slope_timer_jax(dot: Callable, as_, bs, *, estimate_s: float, target_s: float = 4e-3
                    ) -> tuple[Callable[[int], dict], dict]:
    """Compiles the slope loop of `dot` for R and 2R iterations (R so that R iterations of
    len(as_) dots each take about `target_s`) and returns measure(trials), the per-dot device time
    by the slope method (callable again without recompiling), and the compile facts."""
    import jax

    from jtblas.bench.timing import measure_slope, repeats_for

    sets = len(as_)
    repeats = repeats_for(target_s, estimate_s * sets, lo=2, hi=2048)
    start = time.perf_counter()
    short = jax.jit(loop_function(dot, repeats)).lower(as_, bs).compile()
    compile_s = time.perf_counter() - start
    long = jax.jit(loop_function(dot, 2 * repeats)).lower(as_, bs).compile()
    compiled = {repeats: short, 2 * repeats: long}
    jax.block_until_ready(short(as_, bs))  # warm both (first run allocates, loads kernels)
    jax.block_until_ready(long(as_, bs))

    def run(r):
        jax.block_until_ready(compiled[r](as_, bs))

    def measure(trials: int) -> dict:
        result = measure_slope(run, repeats, trials=trials)
        return dict(
            seconds=result["seconds"] / sets, t_short_s=result["t_short_s"], t_long_s=result["t_long_s"],
            fixed_s=result["fixed_s"],
            method=f"slope (t(2R)-t(R))/R of a jitted fori_loop, R={repeats}, {sets} dot(s) per iteration, "
            f"median of {trials}",
        )

    return measure, dict(compile_s=compile_s, repeats=repeats, sets=sets)


def slope_time_jax(dot: Callable, as_, bs, *, estimate_s: float, target_s: float = 4e-3, trials: int = 5) -> dict:
    """Per-dot device time of `dot` by the slope method (`slope_timer_jax`, measured once)."""
    measure, facts = slope_timer_jax(dot, as_, bs, estimate_s=estimate_s, target_s=target_s)
    return {**measure(trials), **facts}


def empty_iteration_seconds(trials: int = 5) -> float:
    """Device time of one loop iteration with the chaining update but no dot (R = 1000): what the
    slope method adds per iteration around the dot itself."""
    import jax
    import jax.numpy as jnp

    from jtblas.bench.timing import measure_slope

    a = jnp.ones((16, 16), jnp.bfloat16)

    def make(r):
        def f(a):
            def body(_, a):
                return a.at[0, 0].set(jnp.tanh(a[0, 1].astype(jnp.float32)).astype(a.dtype))

            return jax.lax.fori_loop(0, r, body, a, unroll=LOOP_UNROLL)

        return jax.jit(f).lower(a).compile()

    compiled = {1000: make(1000), 2000: make(2000)}
    for fn in compiled.values():
        jax.block_until_ready(fn(a))
    return measure_slope(lambda r: jax.block_until_ready(compiled[r](a)), 1000, trials=trials)["seconds"]
