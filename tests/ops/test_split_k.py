"""Split-K: each split factor against a float64 reference (dtypes, layouts, K tails, splits with
no K block, batches), bit-reproducibility, the model's choice of split, and the CUDA lowering.

The CPU runs both launches (partials, then the fixed-order sum) under Triton's interpreter with
NaN-poisoned outputs, so a partial that no program writes fails the finiteness check.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jtblas
from jtblas import hardware, model, ops
from jtblas.model import candidates, resources
from jtblas.launch_specs import launch_spec, sum_splits_spec
from tests.reference import (
    DTYPES, kernel_calls, lower_for_cuda, random_operands, relative_error, stored_shapes, tolerance,
)

LAYOUTS = list(itertools.product([False, True], repeat=2))
LAYOUT_IDS = ["NN", "NT", "TN", "TT"]
SPLITS = (2, 3, 4, 5, 6, 7, 8, 16, 32)


def split_config(split_k: int, block_k: int = 16) -> jtblas.Config:
    return jtblas.Config(block_m=32, block_n=32, block_k=block_k, group_m=1, num_warps=4,
                         num_stages=2, split_k=split_k)


def product(a, b, config, transpose_a=False, transpose_b=False, **kwargs):
    return jax.jit(lambda x, y: jtblas.matmul(
        x, y, transpose_a=transpose_a, transpose_b=transpose_b, config=config, **kwargs))(a, b)


# M and N with tails; K = 200 is 13 blocks of 16 (a masked K tail): splits of 2 to 5 and 7 leave
# unequal slices (3: 5, 5, 3 blocks; 7: six of 2, one of 1), 6 and 8 one empty slice, 16 and 32
# more splits than K blocks.
@pytest.mark.parametrize("split_k", SPLITS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_every_split_matches_float64_reference(split_k, dtype, rng):
    transpose_a, transpose_b = LAYOUTS[(SPLITS.index(split_k) + len(dtype)) % len(LAYOUTS)]
    m, n, k = 37, 53, 200
    a, b, reference = random_operands(rng, m, n, k, dtype, transpose_a=transpose_a, transpose_b=transpose_b)
    out = product(a, b, split_config(split_k), transpose_a, transpose_b)
    assert out.dtype == DTYPES[dtype] and out.shape == (m, n)
    assert relative_error(out, reference) < tolerance(dtype, dtype)


@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("m,n,k,block_k", [(64, 32, 256, 32), (7, 45, 100, 16), (1, 1, 3, 16)])
def test_layouts_even_and_tail_k(transpose_a, transpose_b, m, n, k, block_k, rng):
    """K a multiple of block_k (no mask), K with a tail, and K smaller than one block."""
    a, b, reference = random_operands(rng, m, n, k, "bfloat16", transpose_a=transpose_a, transpose_b=transpose_b)
    out = product(a, b, split_config(4, block_k), transpose_a, transpose_b)
    assert relative_error(out, reference) < tolerance("bfloat16", "bfloat16")


def test_fp32_output_of_bf16_operands(rng):
    a, b, reference = random_operands(rng, 33, 40, 300, "bfloat16")
    out = product(a, b, split_config(8), preferred_element_type=jnp.float32)
    assert out.dtype == jnp.float32
    assert relative_error(out, reference) < tolerance("bfloat16", "float32")


def test_precision_highest(rng):
    a, b, reference = random_operands(rng, 40, 24, 300, "float32")
    out = product(a, b, split_config(4), precision=jax.lax.Precision.HIGHEST)
    assert relative_error(out, reference) < tolerance("float32", "float32", "ieee")


def test_batch_grid_axis_under_vmap(rng):
    """Both operands batched: one launch over grid axis 1, partials [split, batch, M, N]."""
    batch, m, n, k = 3, 21, 34, 90
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, k, n)).astype(np.float32)
    config = split_config(4)
    out = jax.jit(jax.vmap(lambda x, y: jtblas.matmul(x, y, config=config, precision="highest")))(a, b)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    assert out.shape == (batch, m, n)
    assert relative_error(out, reference) < tolerance("float32", "float32", "ieee")


def test_deterministic_over_repeated_runs(rng):
    a, b, _ = random_operands(rng, 45, 38, 333, "bfloat16")
    config = split_config(8)
    jitted = jax.jit(lambda x, y: jtblas.matmul(x, y, config=config))
    first = np.asarray(jitted(a, b))
    for result in (jitted(a, b), jitted(a, b), jtblas.matmul(a, b, config=config)):
        assert np.array_equal(np.asarray(result), first)


def test_launch_specs():
    problem = jtblas.Problem(m=100, n=60, k=1000)
    plain = launch_spec(problem, split_config(1))
    split = launch_spec(problem, split_config(8), batch=3)
    assert plain.grid == (8, 1) and plain.metaparams["SPLIT_K"] == 1
    assert split.grid == (8, 3, 8) and split.metaparams["SPLIT_K"] == 8
    # The workspace [split, batch, M, N] is dense: its batch stride is M·N whatever the caller says.
    assert split.scalars[-1] * split.metaparams["STRIDE_CB_UNIT"] == 100 * 60
    reduction = sum_splits_spec(problem, split_config(8), batch=3)
    assert reduction.scalars[0] * reduction.metaparams["SIZE_UNIT"] == 3 * 100 * 60
    assert reduction.grid == (-(-3 * 100 * 60 // reduction.metaparams["BLOCK"]),)
    with pytest.raises(ValueError, match="does not split"):
        sum_splits_spec(problem, split_config(1))


def test_reduction_programs_spread_over_the_sms():
    """The reduction's programs cover the output once and give every SM one where the output is
    small (a 128x128 output in 1024-element programs was 16 programs on 16 SMs), in programs of at
most 256 elements on 4 warps (measured faster on the H200, 2026-12-01); the model costs
    the same programs."""
    hw = hardware.H200
    for m, n, batch in [(128, 128, 1), (64, 64, 1), (1, 7, 1), (256, 256, 3), (4096, 4096, 1), (129, 131, 2)]:
        problem = jtblas.Problem(m=m, n=n, k=65536)
        spec = sum_splits_spec(problem, split_config(16), batch=batch, hw=hw)
        block, size = spec.metaparams["BLOCK"], batch * m * n
        assert block == resources.reduction_block(size, hw)
        assert block & (block - 1) == 0 and 32 <= block <= 256
        assert spec.grid == (-(-size // block),)
        assert spec.grid[0] >= min(hw.sm_count, -(-size // 32))  # every SM busy, or 32-element programs
        assert spec.grid[0] < 2 * hw.sm_count or block == 256
        assert spec.num_warps == max(1, min(4, block // 64))  # two elements per thread
    assert sum_splits_spec(jtblas.Problem(m=128, n=128, k=8192), split_config(8), hw=hw).grid == (256,)  # 64 each


@pytest.mark.parametrize("m,n,split", [(64, 64, 64), (5, 3, 128), (33, 40, 16)])
def test_small_outputs_and_deep_splits(m, n, split, rng):
    """Reduction programs of 32-128 elements (1 warp) and splits past 32, on tails, vs float64."""
    k = 64 * split + 7  # every split has a K block; the last one is masked
    a, b, reference = random_operands(rng, m, n, k, "bfloat16")
    config = jtblas.Config(block_m=16, block_n=16, block_k=32, num_warps=4, num_stages=3, split_k=split)
    out = product(a, b, config)
    assert out.dtype == jnp.bfloat16
    assert relative_error(out, reference) < tolerance("bfloat16", "bfloat16")


def test_model_splits_deep_k_few_tiles_only():
    deep = jtblas.select(256, 256, 65536, dtype="bf16", hardware="h200")
    assert deep.split_k > 1
    assert jtblas.select(128, 128, 32768, dtype="bf16", hardware="h200").split_k > 1
    assert jtblas.select(4096, 4096, 4096, dtype="bf16", hardware="h200").split_k == 1
    # A 64x64 output and 512 K blocks: split until at least 64 programs share it (one 64x64 tile
    # split 64 ways: 9.7 µs, 32 ways: 11.7 µs on the H200, 2026-11-30, BENCHMARKS.md at 705f18b; since
    # 2026-12-01 the pick is four 16x64 2-warp tiles split 32 ways, 54 TFLOP/s against 56 before).
    deep_small = jtblas.select(64, 64, 65536, dtype="bf16", hardware="h200")
    assert (64 // deep_small.block_m) * (64 // deep_small.block_n) * deep_small.split_k >= 64
    # Decode products' 16-row tiles are split candidates (since 2026-12-01), and where a few
    # tiles leave most SMs idle one is picked: 1x768x3072 has 12 tiles of 16x64. A narrow tile is
    # never split.
    decode_space = jtblas.candidates(1, 3584, 18944, dtype="bf16", hardware="h200")
    assert any(c.block_m == 16 and c.split_k > 1 for c in decode_space)
    decode = jtblas.select(1, 768, 3072, dtype="bf16", hardware="h200")
    assert decode.split_k > 1 and decode.block_m == 16
    narrow = model.rejection_reasons(jtblas.Config(block_m=64, block_n=32, block_k=64, split_k=4),
                                     jtblas.Problem(m=64, n=64, k=65536), hardware.H200)
    assert any("narrow" in reason for reason in narrow)
    # Many tiles: the search space is exactly the plain one (the benchmark's cached oracle runs).
    big = jtblas.candidates(4096, 4096, 4096, dtype="bf16", hardware="h200")
    assert all(c.split_k == 1 for c in big) and len([c for c in big if not c.tma]) == 191
    reasons = model.rejection_reasons(jtblas.Config(block_m=128, block_n=256, block_k=64, split_k=2),
                                      jtblas.Problem(m=4096, n=4096, k=4096), hardware.H200)
    assert any("no split-K" in reason for reason in reasons)


def test_split_candidates_follow_the_rules():
    problem = jtblas.Problem(m=256, n=256, k=65536)
    hw = hardware.H200
    space = model.candidates_for_problem(problem, hw)
    splits = [c for c in space if c.split_k > 1]
    assert splits and len(space) <= 700
    for c in splits:
        assert model.rejection_reasons(c, problem, hw) == []
        tiles = -(-256 // c.block_m) * -(-256 // c.block_n)
        assert tiles * c.split_k < candidates.SPLIT_K_MAX_WAVES * hw.sm_count
        assert -(-65536 // c.block_k) >= candidates.SPLIT_K_MIN_K_STEPS * c.split_k
        assert c.block_n >= candidates.SPLIT_K_MIN_BLOCK_N


def test_a_split_of_three_fills_the_wave_that_two_and_four_miss():
    """768x768x6304 TN (ViT-B/16's attention-output dw): 36 tiles of 128x128 on 132 SMs. Split 2
    keeps 72 SMs busy, split 4 needs two waves; split 3 (108 programs) is searched and wins, with
    each split's K steps and partials in its terms."""
    problem = jtblas.Problem(m=768, n=768, k=6304, transpose_a=True)
    hw = hardware.H200
    ranked = model.select.rank(problem, hw)
    tile = "128x128x64 w4 s5 g8"
    by_split = {e.config.split_k: e for e in ranked if e.config.short().startswith(tile + " k") or
                e.config.short() == tile}
    assert {2, 3, 4} <= set(by_split)
    assert by_split[3].programs == 108 and by_split[2].programs == 72 and by_split[4].programs == 144
    assert by_split[3].k_steps == -(-99 // 3) and by_split[3].partial_bytes == 3 * 768 * 768 * 4
    assert by_split[3].predicted_seconds < min(by_split[2].predicted_seconds, by_split[4].predicted_seconds)
    assert ranked[0].config.split_k == 3
    assert "K is split 3 ways" in jtblas.explain(768, 768, 6304, transpose_a=True, hardware="h200").why()


def test_split_estimate_terms_and_words():
    result = jtblas.explain(256, 256, 65536, dtype="bf16", hardware="h200")
    win = result.winner
    assert win.config.split_k > 1 and win.programs == win.tiles * win.config.split_k
    assert win.partial_bytes == win.config.split_k * 256 * 256 * 4
    assert win.reduction > hardware.H200.launch_seconds
    assert win.compose() == pytest.approx(win.predicted_seconds, rel=1e-12)
    assert f"K is split {win.config.split_k} ways" in result.why()
    plain = next(e for e in result.ranked if e.config.split_k == 1)
    assert plain.reduction == 0 and plain.partial_bytes == 0
    assert "Not split" in jtblas.explain(16, 4096, 4096, dtype="bf16", hardware="h200").why()


SM90_CASES = [
    ("bfloat16", "NN", dict(block_m=64, block_n=64, block_k=64, group_m=1, num_warps=4, num_stages=4, split_k=8)),
    ("float16", "TT", dict(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=3, split_k=4)),
    ("float32", "NT", dict(block_m=64, block_n=32, block_k=32, group_m=1, num_warps=4, num_stages=3, split_k=32)),
    ("bfloat16", "TN", dict(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=4, num_stages=5, split_k=3)),
]


@pytest.mark.parametrize("dtype,layout,config", SM90_CASES,
                         ids=[f"{case[0]}-k{case[2]['split_k']}" for case in SM90_CASES])
def test_split_configs_compile_for_sm90(dtype, layout, config):
    """jax-triton's real CUDA lowering (PTX for sm_90, no GPU needed): both kernels compile."""
    config = jtblas.Config(**config)
    transpose_a, transpose_b = layout[0] == "T", layout[1] == "T"

    def fn(x, y):
        return jtblas.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b, config=config)

    text = lower_for_cuda(fn, *stored_shapes(1000, 520, 777, layout, dtype))  # tails everywhere
    assert text.count("triton_kernel_call") == 2  # the partials and their sum


@pytest.mark.gpu
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("m,n,k,dtype", [(256, 256, 16384, "bfloat16"), (120, 130, 20011, "float16"),
                                         (768, 768, 6304, "bfloat16")])
def test_split_picks_on_the_gpu(transpose_a, transpose_b, m, n, k, dtype, rng):
    """The model's split-K pick for a deep-K shape (768x768x6304: 36 tiles, split 3 ways),
    on the CUDA device, against float64; and the same bits on a second run (the fixed-order
    reduction)."""
    config = jtblas.select(m, n, k, dtype=dtype, transpose_a=transpose_a, transpose_b=transpose_b)
    assert config.split_k > 1, config
    a, b, reference = random_operands(rng, m, n, k, dtype, transpose_a=transpose_a, transpose_b=transpose_b)
    device = jax.devices("gpu")[0]
    a, b = jax.device_put(a, device), jax.device_put(b, device)
    first = product(a, b, None, transpose_a, transpose_b)
    second = product(a, b, None, transpose_a, transpose_b)
    assert relative_error(first, reference) < tolerance(dtype, dtype)
    np.testing.assert_array_equal(np.asarray(first), np.asarray(second))


# Opt-in atomic split-K (deterministic=False): the splits add fp32 partials into a zeroed buffer.
ATOMIC_CASES = [(split, dtype, layout) for split in (2, 3, 4, 8) for dtype in ("float32", "bfloat16")
                for layout in (LAYOUTS[(split + len(dtype)) % 4], LAYOUTS[(split + len(dtype) + 1) % 4])]


@pytest.mark.parametrize("split_k,dtype,layout", ATOMIC_CASES,
                         ids=[f"k{s}-{d}-{LAYOUT_IDS[LAYOUTS.index(lay)]}" for s, d, lay in ATOMIC_CASES])
def test_atomic_split_matches_float64_reference(split_k, dtype, layout, rng):
    """K = 200 is 13 blocks of 16 (a masked K tail; split 8 leaves an empty slice); M, N tails."""
    transpose_a, transpose_b = layout
    m, n, k = 37, 53, 200
    a, b, reference = random_operands(rng, m, n, k, dtype, transpose_a=transpose_a, transpose_b=transpose_b)
    out = product(a, b, split_config(split_k), transpose_a, transpose_b, deterministic=False)
    assert out.dtype == DTYPES[dtype] and out.shape == (m, n)
    assert relative_error(out, reference) < tolerance(dtype, dtype)


def _callbacks(fn, *args) -> int:
    return kernel_calls(fn, *args)


@pytest.mark.parametrize("dtype,out_dtype,launches", [
    ("float32", None, 1), ("bfloat16", "float32", 1), ("bfloat16", None, 2), ("float16", None, 2),
])
def test_atomic_split_launches(dtype, out_dtype, launches, rng):
    """fp32 output: the atomic launch writes C; any other output dtype adds one cast launch.
    The deterministic default keeps its two launches."""
    a, b, reference = random_operands(rng, 33, 40, 300, dtype)
    config = split_config(4)

    def fn(deterministic):
        return lambda x, y: jtblas.matmul(x, y, config=config, preferred_element_type=out_dtype,
                                          deterministic=deterministic)

    assert _callbacks(fn(False), a, b) == launches
    assert _callbacks(fn(True), a, b) == 2
    out = jax.jit(fn(False))(a, b)
    assert out.dtype == jnp.dtype(out_dtype or dtype)
    assert relative_error(out, reference) < tolerance(dtype, out_dtype or dtype)


def test_atomic_split_batch_and_grad(rng, monkeypatch):
    """A vmapped batch (one atomic buffer [batch, M, N]) and the backward GEMMs, which inherit
    the flag, against the deterministic path."""
    flags = []
    launch_gemm = ops._launch_gemm

    def spy(*args, deterministic=True, **kwargs):
        flags.append(deterministic)
        return launch_gemm(*args, deterministic=deterministic, **kwargs)

    monkeypatch.setattr(ops, "_launch_gemm", spy)
    batch, m, n, k = 3, 21, 34, 90
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, k, n)).astype(np.float32)
    config = split_config(4)

    def fn(deterministic):
        return jax.vmap(lambda x, y: jtblas.matmul(x, y, config=config, precision="highest",
                                                   deterministic=deterministic))

    reference = a.astype(np.float64) @ b.astype(np.float64)
    assert relative_error(jax.jit(fn(False))(a, b), reference) < tolerance("float32", "float32", "ieee")
    x, w = a[0], b[0]
    loss = {d: (lambda x, w, d=d: jtblas.matmul(x, w, config=config, deterministic=d).sum())
            for d in (True, False)}
    grads = {d: jax.grad(loss[d], argnums=(0, 1))(x, w) for d in (True, False)}
    for fast, exact in zip(grads[False], grads[True]):
        np.testing.assert_allclose(np.asarray(fast), np.asarray(exact), rtol=1e-4, atol=1e-4)
    # The forward product and both backward products are traced with the caller's flag (traced
    # afresh: jax 0.12 reuses the trace of the gradient above, so the spy would see no call).
    jax.clear_caches()
    flags.clear()
    jax.make_jaxpr(jax.grad(loss[False], argnums=(0, 1)))(x, w)
    assert flags == [False] * 3


def test_deterministic_true_is_the_default_bit_for_bit(rng):
    a, b, _ = random_operands(rng, 45, 38, 333, "bfloat16")
    for config in (split_config(8), split_config(1)):
        default = product(a, b, config)
        explicit = product(a, b, config, deterministic=True)
        assert np.array_equal(np.asarray(default), np.asarray(explicit))
    # Unsplit configs launch the same single kernel whatever the flag.
    assert np.array_equal(np.asarray(product(a, b, split_config(1), deterministic=False)),
                          np.asarray(product(a, b, split_config(1))))
    with pytest.raises(TypeError, match="deterministic"):
        jtblas.matmul(a, b, deterministic="no")


def test_atomic_launch_specs():
    problem = jtblas.Problem(m=100, n=60, k=1000)
    spec = launch_spec(problem, split_config(8), batch=3, atomic=True)
    assert spec.grid == (8, 3, 8) and spec.metaparams["ATOMIC_SPLIT"]
    assert spec.scalars[-1] * spec.metaparams["STRIDE_CB_UNIT"] == 100 * 60
    assert not launch_spec(problem, split_config(8), atomic=False).metaparams["ATOMIC_SPLIT"]
    assert not launch_spec(problem, split_config(1), atomic=True).metaparams["ATOMIC_SPLIT"]
    cast = sum_splits_spec(problem, split_config(8), batch=3, atomic=True)
    assert cast.metaparams["SPLIT_K"] == 1 and cast.scalars[0] * cast.metaparams["SIZE_UNIT"] == 3 * 100 * 60


@pytest.mark.parametrize("dtype,calls", [("float32", 1), ("bfloat16", 2)])
def test_atomic_split_compiles_for_sm90(dtype, calls):
    """jax-triton's CUDA lowering of the atomic split (tl.atomic_add on fp32, zeroed output)."""
    config = jtblas.Config(block_m=64, block_n=64, block_k=64, group_m=1, num_warps=4, num_stages=4, split_k=8)

    def fn(x, y):
        return jtblas.matmul(x, y, config=config, deterministic=False)

    text = lower_for_cuda(fn, *stored_shapes(1000, 520, 777, "NN", dtype))
    assert text.count("triton_kernel_call") == calls
