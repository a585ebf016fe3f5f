"""The TMA kernel (`matmul_tma_kernel`, `Config.tma`): numerics against float64 on every layout,
tails, dtypes and batches (Triton's interpreter on CPU, the same cases on a GPU under `gpu`), its
global scratch against the compiler's, and the model's use of it. The CUDA launcher's scratch
wrappers: tests/ops/test_jax_triton_adapter.py.
"""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import pytest

import jtblas
from jtblas import hardware, jax_triton_adapter, launch, launch_specs, model, operands
from jtblas.config import Problem
from jtblas.kernels.matmul_tma import GLOBAL_SCRATCH_ALIGN, GLOBAL_SCRATCH_BYTES, matmul_tma_kernel
from jtblas.model import cost, resources
from tests.ops.test_epilogue import float64_reference
from tests.ops.test_epilogue import operands as stored_operands
from tests.reference import compile_for_sm90, random_operands, relative_error, stored, tolerance
from tests.ops.test_matmul import BACKENDS, check_config, on_backend

LAYOUTS = list(itertools.product([False, True], repeat=2))
LAYOUT_IDS = ["NN", "NT", "TN", "TT"]
# Every stored row a multiple of 16 bytes (8 elements), as TMA needs; none a multiple of the blocks.
SHAPES = [(8, 8, 8), (40, 72, 24), (136, 200, 88), (72, 264, 40)]
TMA_CONFIGS = [
    jtblas.Config(block_m=64, block_n=32, block_k=32, group_m=2, num_warps=4, num_stages=3, tma=True),
    jtblas.Config(block_m=64, block_n=256, block_k=16, group_m=1, num_warps=4, num_stages=3, tma=True),  # halves
]
# Tiles Triton lowers to mma.sync (fewer than 64 rows, or not a warpgroup's warps): the kernel runs
# them, the model does not offer them (`candidates.candidate_arrays`).
MMA_SYNC_TMA_CONFIGS = [
    jtblas.Config(block_m=16, block_n=64, block_k=64, group_m=1, num_warps=2, num_stages=3, tma=True),
    jtblas.Config(block_m=32, block_n=32, block_k=32, group_m=2, num_warps=4, num_stages=2, tma=True),
]


@pytest.fixture(autouse=True)
def _skip_cuda_where_the_stack_has_no_tma_kernel(request):
    """The TMA kernel's device-side descriptors need global scratch that jtblas can give only with
    jax-triton 0.3.1 on jaxlib >= 0.11 (`launch.global_scratch_supported`); with jax-triton 0.4.x
    `hardware.detect()` offers no TMA kernel and a forced TMA config is refused
    (`test_a_forced_tma_config_is_refused_where_the_stack_has_none`)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec and callspec.params.get("backend") == "cuda" and not launch.global_scratch_supported("cuda"):
        pytest.skip("this jax-triton and jaxlib give the TMA kernel no global scratch "
                    "(jax-triton 0.3.1 with jaxlib >= 0.11 does)")


@pytest.mark.gpu
def test_a_forced_tma_config_is_refused_where_the_stack_has_none(rng):
    """Where the installed stack cannot run the TMA kernel (jax-triton 0.4.x), the model offers no
    TMA config and a forced one is a ValueError naming the config and the reason."""
    if launch.global_scratch_supported("cuda"):
        pytest.skip("this stack runs the TMA kernel")
    assert not hardware.detect().tma
    a, b, _ = random_operands(rng, 40, 72, 24, "bfloat16")
    a, b = on_backend("cuda", a, b)
    with pytest.raises(ValueError, match="tma=True.*no TMA kernel"):
        jtblas.matmul(a, b, config=TMA_CONFIGS[0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_tma_kernel_matches_float64(backend, dtype, transpose_a, transpose_b, m, n, k, rng):
    config = TMA_CONFIGS[(m + n + k) % len(TMA_CONFIGS)]
    check_config(config, backend, rng, m, n, k, dtype, transpose_a, transpose_b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("m,n,k", [(1, 72, 40), (3, 136, 88), (16, 64, 64), (40, 200, 24)])
@pytest.mark.parametrize("config", MMA_SYNC_TMA_CONFIGS, ids=lambda c: c.short())
def test_tma_kernel_runs_mma_sync_tiles(backend, config, transpose_a, transpose_b, m, n, k, rng):
    """16- and 32-row tiles on the TMA kernel, decode rows (M = 1, 3) included: the copy engine
    zero-fills A's rows past M and clips C's. A stored transposed ([K, M]) needs 16-byte rows,
    so M = 1 and 3 run with A as used."""
    if transpose_a and m % 8:
        pytest.skip("a [K, M] A with M < 8 has rows TMA cannot address (not a multiple of 16 bytes)")
    check_config(config, backend, rng, m, n, k, "bfloat16", transpose_a, transpose_b)


def test_model_offers_tma_twins_of_wgmma_tiles_only():
    """The model's TMA candidates are wgmma tiles (the TMA terms were measured on those); the
    mma.sync tiles it offers on the pointer kernel have no TMA twin, at decode sizes too."""
    for m, n, k in ((1, 4096, 4096), (16, 3584, 3584), (4096, 4096, 4096)):
        problem = Problem(m=m, n=n, k=k)
        configs = jtblas.candidates(m, n, k, hardware="h200")
        assert any(c.tma for c in configs)
        assert all(resources.uses_wgmma(c, problem, hardware.H200) for c in configs if c.tma)
        mma_sync = [c for c in configs if c.split_k == 1 and not resources.uses_wgmma(c, problem, hardware.H200)]
        assert bool(mma_sync) == (m < 64)
        assert not set(dataclasses.replace(c, tma=True) for c in mma_sync) & set(configs)
        assert not resources.tma_errors(MMA_SYNC_TMA_CONFIGS[0], problem, hardware.H200)  # runs, if forced


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("config", TMA_CONFIGS, ids=lambda c: c.short())
def test_tma_fp32_output_and_batches(backend, config, rng):
    """preferred_element_type=float32 (an fp32 C through the TMA store), a batched rhs (the
    persistent grid over the batch, with batch strides) and a broadcast lhs (batch stride 0)."""
    a, b, reference = random_operands(rng, 40, 264, 56, "bfloat16", transpose_b=True)
    a, b = on_backend(backend, a, b)
    out = jtblas.matmul(a, b, transpose_b=True, preferred_element_type=jnp.float32, config=config)
    assert out.dtype == jnp.float32
    assert relative_error(out, reference) < tolerance("bfloat16", "float32")
    bs = jnp.stack([b, -b, 2 * b])
    batched = jax.vmap(lambda y: jtblas.matmul(a, y, transpose_b=True, config=config))(bs)
    for i, scale in enumerate((1, -1, 2)):
        assert relative_error(batched[i], scale * reference) < tolerance("bfloat16", "bfloat16")


@pytest.fixture
def one_sm(monkeypatch):
    """A GPU of one SM: a batch's tiles outnumber the resident programs, so programs walk tiles
    of several batch entries."""
    small = dataclasses.replace(hardware.detect(), sm_count=1)
    monkeypatch.setattr(hardware, "detect", lambda: small)


# (A batched, B batched): both, and one operand broadcast (its batch stride 0). A batched A stored
# [M, K] with B broadcast folds into M (one product), so that case runs with A stored [K, M].
BATCHINGS = [(True, True), (True, False), (False, True)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("batched", BATCHINGS, ids=["both", "a_only", "b_only"])
def test_tma_batch_is_one_persistent_grid(backend, one_sm, batched, transpose_a, transpose_b, rng):
    """A batch of 3 products with tails in M and N (136x72 in 64x32 tiles: 9 tiles each, 27 over
    the 16 programs one SM holds): every entry's edges zero-fill and clip on their own, no tile
    reads or writes a neighbouring entry, every output written (they start poisoned)."""
    config = TMA_CONFIGS[0]
    m, n, k, batch = 136, 72, 88, 3
    if batched == (True, False) and not transpose_a:
        transpose_a = True
    spec = launch_specs.tma_launch_spec(Problem(m=m, n=n, k=k, transpose_a=transpose_a, transpose_b=transpose_b),
                                        config, batch=batch, batch_strides=(1, 1, 1))
    assert spec.grid[0] < batch * 9  # programs walk tiles across entries
    a, b = stored_operands(rng, m, n, k, "bfloat16", transpose_a, transpose_b)
    a_s = jnp.stack([a, -a, 2 * a]) if batched[0] else a
    b_s = jnp.stack([b, 3 * b, -b]) if batched[1] else b
    a_s, b_s = on_backend(backend, a_s, b_s)
    product = jax.vmap(lambda x, y: jtblas.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b,
                                                  config=config),
                       in_axes=(0 if batched[0] else None, 0 if batched[1] else None))
    out = jax.jit(product)(a_s, b_s)
    assert out.shape == (batch, m, n)
    reference = float64_reference(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    for i, (scale_a, scale_b) in enumerate(zip((1, -1, 2), (1, 3, -1))):
        scale = (scale_a if batched[0] else 1) * (scale_b if batched[1] else 1)
        assert relative_error(out[i], scale * reference) < tolerance("bfloat16", "bfloat16")


@pytest.mark.parametrize("backend", BACKENDS)
def test_tma_batch_applies_each_entrys_bias_and_residual(backend, one_sm, rng):
    """The epilogue of a batch on one persistent grid: entry i's bias row and residual tile, an
    exact GELU, an fp32 C."""
    config = TMA_CONFIGS[0]
    m, n, k, batch = 136, 72, 88, 3
    a = jnp.stack([stored_operands(rng, m, n, k, "bfloat16", False, True)[0] for _ in range(batch)])
    b = jnp.stack([stored_operands(rng, m, n, k, "bfloat16", False, True)[1] for _ in range(batch)])
    bias = jnp.stack([stored(rng, (n,), "float32") for _ in range(batch)])
    residual = jnp.stack([stored(rng, (m, n), "bfloat16") for _ in range(batch)])
    a, b, bias, residual = on_backend(backend, a, b, bias, residual)
    out = jax.jit(jax.vmap(lambda x, y, z, w: jtblas.matmul(
        x, y, bias=z, residual=w, activation="gelu", transpose_b=True, preferred_element_type=jnp.float32,
        config=config)))(a, b, bias, residual)
    assert out.dtype == jnp.float32
    for i in range(batch):
        reference = float64_reference(a[i], b[i], bias=bias[i], activation="gelu", residual=residual[i],
                                      transpose_b=True)
        assert relative_error(out[i], reference) < tolerance("bfloat16", "float32")


def test_tma_batch_launch_and_model_count_tiles_over_the_batch():
    """One grid over the batch: min(batch · tiles, resident programs) programs, descriptors over
    [batch, rows, columns] for the batched operands and C; the model's TMA twin of a batch of small
    products pays a cold start per program, not per tile, so it is the pick where the pointer
    kernel's programs each start cold (512 x 1024x1024x128 NT, attention scores, on the H200)."""
    config = jtblas.Config(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=4, num_stages=3, tma=True)
    problem = Problem(m=1024, n=1024, k=128, transpose_b=True, batch=512)
    one = dataclasses.replace(problem, batch=1)
    spec = launch_specs.tma_launch_spec(one, config, batch=512, batch_strides=(0, 1024 * 128, 1024 * 1024),
                                        hw=hardware.H200)
    resident = hardware.H200.sm_count * resources.programs_per_sm(config, one, hardware.H200)
    assert spec.grid == (resident,) and spec.scalars[-1] == 512
    assert (spec.metaparams["A_BATCHED"], spec.metaparams["B_BATCHED"], spec.metaparams["C_BATCHED"]) == (
        False, True, True)
    unbatched = launch_specs.tma_launch_spec(one, config, hw=hardware.H200)
    assert unbatched.grid == (64,) and not any(unbatched.metaparams[f"{x}_BATCHED"] for x in "ABC")
    estimate = cost.estimate(config, problem, hardware.H200)
    pointer = cost.estimate(dataclasses.replace(config, tma=False), problem, hardware.H200)
    assert estimate.sm_latency < 0.75 * pointer.sm_latency
    plan = model.plan_for_problem(problem, hardware.H200)
    assert plan.config.tma and plan.copy_seconds == 0, plan


@pytest.mark.parametrize("config", [
    jtblas.Config(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3, tma=True),
    jtblas.Config(block_m=16, block_n=64, block_k=256, group_m=1, num_warps=2, num_stages=4, tma=True),
], ids=lambda c: c.short())
def test_global_scratch_is_the_compilers(config):
    """The scratch the launcher allocates per program is what Triton compiles the kernel to use
    (three descriptors), and the compiled name is the function's (the launcher's key); compiled
    for sm_90, a wgmma tile and a 16-row mma.sync tile both load through TMA and use no more
    shared memory than the model counts."""
    meta = dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
                INPUT_PRECISION="tf32", TRANSPOSE_A=False, TRANSPOSE_B=True,
                STORE_HALVES=resources.store_halves(config), INDEX_64=False)
    compiled = compile_for_sm90(matmul_tma_kernel, meta, num_warps=config.num_warps, num_stages=config.num_stages)
    assert compiled.metadata.name == matmul_tma_kernel.fn.__name__
    assert compiled.metadata.global_scratch_size == GLOBAL_SCRATCH_BYTES
    assert compiled.metadata.global_scratch_align == GLOBAL_SCRATCH_ALIGN
    ttgir = compiled.asm["ttgir"]
    problem = Problem(m=8, n=8, k=8)
    assert ttgir.count("async_tma_copy_global_to_local") >= 2
    assert ("warp_group_dot" in ttgir) == resources.uses_wgmma(config, problem, hardware.H200)
    assert compiled.metadata.shared <= resources.shared_memory_bytes(config, problem) + 64


@pytest.mark.parametrize("out", ["bfloat16", "float32"])
@pytest.mark.parametrize("num_warps", [4, 8])
def test_split_stores_take_the_shared_memory_the_model_counts(num_warps, out):
    """A 64x256 tile stores two halves of 128 columns; on 8 warps its two warp groups sit side by
    side along N and Triton converts the whole tile through shared memory before the split (48 KB
    beyond the pipeline with a bf16 C where 4 warps take 16). The model counts what the compiler
    takes, to the barriers: a config it calls feasible must launch."""
    config = jtblas.Config(block_m=64, block_n=256, block_k=64, group_m=8, num_warps=num_warps, num_stages=3, tma=True)
    meta = dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, INPUT_PRECISION="tf32", TRANSPOSE_A=False,
                TRANSPOSE_B=False, STORE_HALVES=resources.store_halves(config), INDEX_64=False)
    compiled = compile_for_sm90(matmul_tma_kernel, meta, num_warps=num_warps, num_stages=3,
                                pointer_types={"c_ptr": "*bf16" if out == "bfloat16" else "*fp32"})
    counted = resources.shared_memory_bytes(config, Problem(m=4096, n=4096, k=4096, out_dtype=out))
    assert counted <= compiled.metadata.shared <= counted + 64


def _tma_tiles() -> list[tuple[int, int, int]]:
    """(block_m, block_n, num_warps) of every TMA twin the model offers on the Hopper descriptions,
    over a square, a decode and a fused-layer product."""
    problems = [Problem(m=4096, n=4096, k=4096), Problem(m=16, n=8192, k=4096),
                Problem(m=2048, n=768, k=3072, bias_dtype="bfloat16", residual_dtype="bfloat16")]
    return sorted({(c.block_m, c.block_n, c.num_warps) for hw in (hardware.H100, hardware.H200)
                   for problem in problems for c in model.candidates_for_problem(problem, hw) if c.tma})


@pytest.mark.parametrize("epilogue", ["none", "bias_residual"])
def test_every_tma_tile_takes_no_more_shared_memory_than_counted(epilogue):
    """Each TMA tile shape the model offers, compiled for sm_90 (2 stages of block_k 32: the
    pipeline's share is exact), takes at most the shared memory `resources.shared_memory_bytes`
    counts, to the barriers; without an epilogue no less either. An undercount is a launch
    that fails (64x256 on 8 warps took 32 KB more than counted until 2026-12-06)."""
    from jtblas.kernels.matmul_tma import matmul_tma_epilogue_kernel

    fused = epilogue != "none"
    problem = Problem(m=4096, n=4096, k=4096, bias_dtype="bfloat16" if fused else "",
                      residual_dtype="bfloat16" if fused else "")
    tiles = _tma_tiles()
    assert (64, 256, 8) in tiles and (128, 256, 8) in tiles
    for block_m, block_n, num_warps in tiles:
        config = jtblas.Config(block_m=block_m, block_n=block_n, block_k=32, num_warps=num_warps, num_stages=2,
                               tma=True)
        meta = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=32, GROUP_M=8, INPUT_PRECISION="tf32",
                    TRANSPOSE_A=False, TRANSPOSE_B=False, STORE_HALVES=resources.store_halves(config), INDEX_64=False)
        if fused:
            meta.update(HAS_BIAS=True, ACTIVATION="", HAS_RESIDUAL=True)
        compiled = compile_for_sm90(matmul_tma_epilogue_kernel if fused else matmul_tma_kernel, meta,
                                    num_warps=num_warps, num_stages=2)
        counted = resources.shared_memory_bytes(config, problem)
        assert compiled.metadata.shared <= counted + 64, config.short()
        assert fused or compiled.metadata.shared >= counted, config.short()


def test_old_jaxlib_gets_no_tma_and_a_clear_error(monkeypatch):
    """Where the CUDA launcher cannot allocate scratch, the model never picks the TMA kernel and
    a forced TMA config is refused with the reason, before anything is compiled."""
    monkeypatch.setattr(jax_triton_adapter, "_jaxlib_kernel_takes_scratch", lambda: False)
    with launch.forced_backend("cuda", compute_capability=90):
        hw = operands.launch_hardware([])
    assert not hw.tma and hardware.H200.tma
    assert not hardware.for_launch(hardware.H200, "cuda").tma  # what `detect` gives on such a GPU
    assert hardware.for_launch(hardware.H200, "cpu").tma  # the interpreter needs no jaxlib scratch
    assert not model.select_for_problem(Problem(m=4096, n=4096, k=4096, transpose_b=True), hw).tma
    with pytest.raises(RuntimeError, match="global scratch"):
        jax_triton_adapter._register_global_scratch(matmul_tma_kernel, (384, 128))
    problem = Problem(m=64, n=64, k=64)
    with pytest.raises(ValueError, match="no TMA kernel"):
        operands.check_config(TMA_CONFIGS[0], problem, hw)


def test_bad_tma_configs_name_the_reason():
    a = jnp.ones((40, 24), jnp.bfloat16)
    with pytest.raises(ValueError, match="B row stride 36"):
        jtblas.matmul(a, jnp.ones((24, 36), jnp.bfloat16), config=TMA_CONFIGS[0])
    with pytest.raises(ValueError, match="takes .* operands, not float32"):
        jtblas.matmul(a.astype(jnp.float32), jnp.ones((24, 40), jnp.float32), config=TMA_CONFIGS[0])
    with pytest.raises(ValueError, match="at most 256 elements"):
        jtblas.matmul(a, jnp.ones((24, 40), jnp.bfloat16), config=dataclasses.replace(TMA_CONFIGS[0], block_k=512))
    with pytest.raises(ValueError, match="split_k=1"):
        jtblas.Config(split_k=2, tma=True)
    with pytest.raises(ValueError, match="tma must be a bool"):
        jtblas.Config(tma=1)


def test_model_uses_tma_where_it_pays():
    """On the H200 the TMA kernel has no K-major discount and a shorter K step, but costs each
    launch its descriptors' set-up (`tma_k_step_overhead_clocks`, `tma_setup_seconds`): large
    products run on it in every layout, NT on the caller's layout (no transposed copy); small
    ones keep the pointer kernel; no TMA without the hardware, for fp32, or for rows TMA cannot
    address."""
    layouts = ((False, False), (True, False), (False, True), (True, True))
    for m, n, k in ((8192, 14336, 4096), (4096, 4096, 14336)):
        plan = model.plan_for_problem(Problem(m=m, n=n, k=k, transpose_b=True), hardware.H200)
        assert plan.config.tma and not plan.repacks
        for transpose_a, transpose_b in layouts:
            assert jtblas.select(m, n, k, transpose_a=transpose_a, transpose_b=transpose_b, hardware="h200").tma
    for transpose_a, transpose_b in layouts:
        assert not jtblas.select(1024, 1024, 1024, transpose_a=transpose_a, transpose_b=transpose_b,
                                 hardware="h200").tma
    assert not jtblas.select(4096, 4096, 4096, transpose_b=True, hardware="a100").tma
    assert not jtblas.select(4096, 4096, 4096, dtype="float32", transpose_b=True, hardware="h200").tma
    assert not any(c.tma for c in jtblas.candidates(4096, 4099, 4096, transpose_b=True, hardware="h200"))


def test_tma_twin_costs_its_setup_and_saves_per_step():
    """A TMA twin's estimate differs from its pointer config's by the two TMA constants only
    (NN: no K-major discount either way): the launch costs `tma_setup_seconds` more, each K step
    `k_step_overhead_clocks − tma_k_step_overhead_clocks` clocks less."""
    hw = hardware.H200
    constants = hw.model_constants()
    problem = Problem(m=4096, n=4096, k=4096)
    pointer = jtblas.Config(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4, group_m=8)
    plain = cost.estimate(pointer, problem, hw)
    twin = cost.estimate(dataclasses.replace(pointer, tma=True), problem, hw)
    assert twin.launch == pytest.approx(plain.launch + constants.tma_setup_seconds)
    saved = (constants.k_step_overhead_clocks - constants.tma_k_step_overhead_clocks) / hw.clock_hz
    assert saved > 0 and twin.step == pytest.approx(plain.step - saved)
    assert twin.step_mma == plain.step_mma and twin.dram_bytes == plain.dram_bytes


def test_explain_names_the_kernel_and_its_twin():
    """`explain` says which kernel runs the pick and what the same config predicts on the other
    (with both K steps and launches); no such sentence where only one kernel can run it."""
    large = jtblas.explain(8192, 14336, 4096, hardware="h200")
    assert large.config.tma
    twin = next(e for e in large.ranked if e.config == dataclasses.replace(large.config, tma=False))
    assert f"The TMA kernel: the same config on the pointer kernel predicts {twin.predicted_seconds * 1e6:.2f} µs" \
        in large.why()
    small = jtblas.explain(2048, 2048, 2048, hardware="h200")
    assert not small.config.tma and "The pointer kernel: the same config on the TMA kernel" in small.why()
    # 8192x768x768 on the H100, three tiles per SM: the TMA kernel's one program per SM pays its
    # pipeline's fill once, the pointer kernel's three programs, one after another, each pay theirs.
    mid = jtblas.explain(8192, 768, 768, hardware="h100")
    pointer = next(e for e in mid.ranked if e.config == dataclasses.replace(mid.config, tma=False))
    assert mid.config.tma and mid.winner.sm_latency < pointer.sm_latency
    assert f"latency chain per SM {mid.winner.sm_latency * 1e6:.2f} µs against {pointer.sm_latency * 1e6:.2f} µs" \
        in mid.why()
    assert "kernel: the same config" not in jtblas.explain(2048, 2048, 2048, hardware="a100").why()
    split = jtblas.explain(256, 256, 65536, hardware="h200")  # a split pick has no TMA twin
    assert split.config.split_k > 1 and "kernel: the same config" not in split.why()


@pytest.mark.parametrize("backend", BACKENDS)
def test_tma_products_in_a_jitted_loop_match_float64(backend, rng):
    """TMA launches inside a jitted loop, which XLA records into a CUDA graph on the GPU: there the
    descriptors' scratch must be an XLA buffer (`jax_triton_adapter._scratch_output`); jaxlib's per-launch
    allocation cannot be recorded (2026-11-30, BENCHMARKS.md at 705f18b)."""
    a, b, reference = random_operands(rng, 136, 200, 88, "bfloat16", transpose_b=True)
    a, b = on_backend(backend, a, b)
    rounds, scales = 3, (1.0, 2.0, 4.0)  # products of A, 2A, 4A (exact in bf16): several calls per body

    def loop(x, y):
        def body(_, acc):
            for scale in scales:
                acc = acc + jtblas.matmul(x * jnp.asarray(scale, x.dtype), y, transpose_b=True,
                                          preferred_element_type=jnp.float32, config=TMA_CONFIGS[0])
            return acc

        return jax.lax.fori_loop(0, rounds, body, jnp.zeros((136, 200), jnp.float32))

    out = jax.jit(loop)(a, b) / (rounds * sum(scales))
    assert relative_error(out, reference) < tolerance("bfloat16", "float32")

