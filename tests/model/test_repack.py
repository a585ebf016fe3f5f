"""Repacking: misaligned operands copied into zero-padded buffers before the kernel.

Correctness with repacking forced on (odd M, N, K; every layout and dtype) against float64; bit
identity with the plain kernel under the same config; batches, vmap and gradients; the model's
decisions on the H200 description; candidates of aligned shapes unchanged; CUDA lowering.
"""

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jtblas
from jtblas import hardware, ops
from jtblas.config import Problem
from jtblas.model import cost, repack, resources
from tests.reference import DTYPES, lower_for_cuda, random_operands, relative_error, tolerance

LAYOUTS = list(itertools.product([False, True], repeat=2))
LAYOUT_IDS = ["NN", "NT", "TN", "TT"]
# Odd sizes: 1, 2, 3, 7, 197 and primes, each of M, N and K in turn.
SHAPES = [(1, 2, 3), (7, 3, 197), (197, 7, 2), (13, 61, 37)]
CONFIG = jtblas.Config(block_m=32, block_n=32, block_k=32, group_m=1, num_warps=4, num_stages=2)


def product(transpose_a=False, transpose_b=False, config=CONFIG, **kw):
    def run(x, y):
        return jtblas.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b, config=config, **kw)

    return run


def forced(fn, mode="always"):
    """fn traced (and run) inside `repack_mode(mode)`."""
    def run(*args):
        with ops.repack_mode(mode):
            return jax.jit(fn)(*args)

    return run


@pytest.mark.parametrize("mode", ["always", "strides"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_forced_repack_matches_float64(m, n, k, transpose_a, transpose_b, dtype, mode, rng):
    """Both copies: C computed padded and sliced ("always"), or at the caller's M and N with the
    kernel's offsets wrapping at the padded row strides ("strides")."""
    a, b, reference = random_operands(rng, m, n, k, dtype, transpose_a=transpose_a, transpose_b=transpose_b)
    out = forced(product(transpose_a, transpose_b), mode)(a, b)
    assert out.dtype == DTYPES[dtype] and out.shape == (m, n)
    assert relative_error(out, reference) < tolerance(dtype, dtype)


@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
def test_forced_repack_really_pads(transpose_a, transpose_b):
    """The repacked trace pads both operands (so the tests above cannot pass on a plain run)."""
    a = jnp.zeros((37, 13) if transpose_a else (13, 37), jnp.bfloat16)
    b = jnp.zeros((61, 37) if transpose_b else (37, 61), jnp.bfloat16)
    with ops.repack_mode("always"):
        text = str(jax.make_jaxpr(product(transpose_a, transpose_b))(a, b))
    assert text.count("pad[") == 2
    assert "pad[" not in str(jax.make_jaxpr(product(transpose_a, transpose_b))(a, b))


@pytest.mark.parametrize("dtype,out_dtype", [("float32", "float32"), ("bfloat16", "float32"), ("float16", "float16")])
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
def test_same_config_bit_identical_with_and_without_repacking(transpose_a, transpose_b, dtype, out_dtype, rng):
    """The padded K columns are zeros: each fp32 partial sum gains exact zeros, so the bits agree."""
    a, b, _ = random_operands(rng, 45, 71, 83, dtype, transpose_a=transpose_a, transpose_b=transpose_b)
    fn = product(transpose_a, transpose_b, preferred_element_type=DTYPES[out_dtype])
    plain = forced(fn, "never")(a, b)
    repacked = forced(fn, "always")(a, b)
    np.testing.assert_array_equal(np.asarray(repacked), np.asarray(plain))


def test_model_chosen_config_under_forced_repack(rng):
    """config=None: the model plans the padded problem (`plan_for_problem(..., "always")`)."""
    a, b, reference = random_operands(rng, 67, 29, 101, "float16", transpose_b=True)
    out = forced(product(transpose_b=True, config=None))(a, b)
    assert relative_error(out, reference) < tolerance("float16", "float16")


def test_batched_and_vmapped_repack(rng):
    """A batch folded into M, a vmapped b (batch grid axis with padded batch strides), both."""
    a = jnp.asarray(rng.standard_normal((3, 5, 7, 19)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((4, 19, 11)), jnp.float32)
    hi = jax.lax.Precision.HIGHEST
    fn = product(config=None, precision=hi)
    expected_fold = np.einsum("abmk,kn->abmn", np.asarray(a, np.float64), np.asarray(b[0], np.float64))
    np.testing.assert_allclose(forced(fn)(a, b[0]), expected_fold, rtol=1e-5, atol=1e-5)
    vmapped = forced(jax.vmap(fn, in_axes=(None, 0)))(a[0, 0], b)
    expected = np.einsum("mk,bkn->bmn", np.asarray(a[0, 0], np.float64), np.asarray(b, np.float64))
    np.testing.assert_allclose(vmapped, expected, rtol=1e-5, atol=1e-5)
    both = forced(jax.vmap(fn))(a[0, :4], b)
    expected = np.einsum("bmk,bkn->bmn", np.asarray(a[0, :4], np.float64), np.asarray(b, np.float64))
    np.testing.assert_allclose(both, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (True, True)], ids=["NN", "TT"])
def test_grad_through_repacked_product(transpose_a, transpose_b, rng):
    """The backward GEMMs are planned (and here forced to repack) on their own."""
    a, b, _ = random_operands(rng, 9, 13, 11, "float32", transpose_a=transpose_a, transpose_b=transpose_b)
    hi = jax.lax.Precision.HIGHEST

    def loss(x, y, matmul):
        return jnp.sum(jnp.sin(matmul(x, y)))

    def ours(x, y):
        return jtblas.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b, precision=hi)

    def reference(x, y):
        x = x.T if transpose_a else x
        y = y.T if transpose_b else y
        return jnp.dot(x, y, precision=hi)

    with ops.repack_mode("always"):
        grads = jax.jit(jax.grad(lambda x, y: loss(x, y, ours), argnums=(0, 1)))(a, b)
        text = str(jax.make_jaxpr(jax.grad(lambda x, y: loss(x, y, ours), argnums=(0, 1)))(a, b))
    assert text.count("pad[") == 6  # two operands for each of the three GEMMs
    expected = jax.grad(lambda x, y: loss(x, y, reference), argnums=(0, 1))(a, b)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# The model's decision (pure Python, on the H200 description)
# ------------------------------------------------------------------------------------------------


# The H200 without its TMA kernel (a CUDA jaxlib that allocates no global scratch): NT runs on
# the pointer kernel and its K-major discount.
H200_WITHOUT_TMA = dataclasses.replace(hardware.H200, tma=False)


def plan(m, n, k, layout="NN", gpu="h200", mode="auto"):
    problem = Problem(m=m, n=n, k=k, transpose_a=layout[0] == "T", transpose_b=layout[1] == "T")
    return repack.plan_for_problem(problem, hardware.get(gpu), mode)


def test_model_repacks_odd_shape_on_h200():
    p = plan(1500, 4501, 3399)
    assert p.repacks and p.pad_a and p.pad_b
    # K zero-padded to a multiple of 64; B's rows (N = 4501, its contiguous axis) padded to 4544,
    # N kept: C is computed at the caller's 1500x4501, no slice (the padded-C option, C
    # 1500x4544 sliced, is ranked too and predicted slower).
    assert (p.kernel_problem.m, p.kernel_problem.n, p.kernel_problem.k) == (1500, 4501, 3456)
    assert (p.kernel_problem.lda, p.kernel_problem.ldb) == (0, 4544)
    assert repack.slice_seconds(p.problem, p.kernel_problem, hardware.H200) == 0 and p.copy_seconds > 0
    grown = repack.padded_problem(p.problem, pad_a=True, pad_b=True, pad_k=True)
    assert (grown.n, grown.ldb) == (4544, 0) and repack.slice_seconds(p.problem, grown, hardware.H200) > 0
    assert p.predicted_seconds < (1 - repack.REPACK_MIN_GAIN) * p.plain_seconds
    assert jtblas.select(1500, 4501, 3399, hardware="h200") == p.config
    assert p.plain_config == jtblas.model.select_for_problem(p.problem, hardware.H200)


def test_model_does_not_repack_aligned_shapes():
    for m, n, k in [(4096, 4096, 4096), (50257, 4096, 4096), (197, 768, 3072)]:
        p = plan(m, n, k)
        assert not p.repacks and p.kernel_problem == p.problem and p.copy_seconds == 0
        assert p.config == p.plain_config == jtblas.select(m, n, k, hardware="h200")


def test_aligned_candidates_unchanged():
    """The benchmark caches exhaustive searches by a hash of candidates() and reuses earlier first
    passes by `Config.short()`: 4096³ keeps its 191 pointer-kernel configs (names as before) and
    gains the TMA kernel's twins of its wgmma ones that fit (and no swapped tile: all are wgmma
    already; the hash moved with `Config`'s repr when it gained swap_ab, and k_phases). 64x256x64 w8
    s5 has no twin: its split stores take 48 KB beyond the pipeline (`resources.tma_extra_bytes`)."""
    from jtblas.bench.oracle import candidates_hash

    space = jtblas.candidates(4096, 4096, 4096, dtype="bf16", hardware="h200")
    plain = [c for c in space if not c.tma]
    twins = [c for c in space if c.tma]
    assert len(plain) == 191 and len(twins) == 183 and candidates_hash(space) == "44da1ff350b7"
    assert {dataclasses.replace(c, tma=False) for c in twins} <= set(plain)
    assert all(" tma" not in c.short() for c in plain) and all(c.short().endswith(" tma") for c in twins)
    assert [f.name for f in dataclasses.fields(jtblas.Config)] == [
        "block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages", "split_k", "swap_ab", "tma",
        "k_phases"]
    assert repr(jtblas.Config()) == ("Config(block_m=128, block_n=128, block_k=64, group_m=8, "
                                     "num_warps=8, num_stages=3, split_k=1, swap_ab=False, tma=False, k_phases=1)")


def test_copy_cost_and_padded_sizes():
    hw = hardware.H200
    problem = Problem(m=1500, n=4501, k=3399)
    kernel = repack.padded_problem(problem, pad_a=True, pad_b=True, pad_k=True)
    assert repack.stored_shape(kernel, "a") == (1500, 3456) and repack.stored_shape(kernel, "b") == (3456, 4544)
    copy_a = repack.copy_seconds(problem, kernel, "a", hw)
    assert copy_a == pytest.approx((1500 * 3399 + 1500 * 3456) * 2 / hw.dram_bytes_per_s + hw.launch_seconds)
    assert repack.slice_seconds(problem, kernel, hw) == pytest.approx(
        (1500 * 4544 + 1500 * 4501) * 2 / hw.dram_bytes_per_s + hw.launch_seconds)
    # A transposed A is contiguous along M: M is padded with its rows (C gains rows, sliced off).
    transposed = repack.padded_problem(Problem(m=197, n=768, k=3072, transpose_a=True), pad_a=True, pad_b=False,
                                       pad_k=False)
    assert transposed.m == 256 and transposed.lda == 0 and transposed.k == 3072 and transposed.a_row_stride == 256
    # A plain A is contiguous along K: its padded rows keep M and get a leading dimension.
    plain_a = repack.padded_problem(Problem(m=197, n=768, k=3000), pad_a=True, pad_b=False, pad_k=False)
    assert (plain_a.m, plain_a.k, plain_a.lda) == (197, 3000, 3008)
    assert repack.slice_seconds(Problem(m=197, n=768, k=3000), plain_a, hw) == 0
    with pytest.raises(ValueError, match="both operands"):
        repack.padded_problem(problem, pad_a=True, pad_b=False, pad_k=True)
    with pytest.raises(ValueError, match="lda"):
        Problem(m=4, n=4, k=8, lda=7)


def test_explain_gives_both_times():
    result = jtblas.explain(1500, 4501, 3399, hardware="h200")
    assert result.plan.repacks and result.config == jtblas.select(1500, 4501, 3399, hardware="h200")
    text = result.format(top=3)
    assert "repacked: the kernel runs 1500x4501x3456 bfloat16 NN ldb=4544" in text and "it repacks" in text
    assert f"{result.plan.plain_seconds * 1e6:.2f} µs plain" in text
    assert f"{result.plan.predicted_seconds * 1e6:.2f} µs" in text
    assert "nothing to repack" in jtblas.explain(4096, 4096, 4096, hardware="h200").why()


def test_explain_names_the_c_it_did_not_choose():
    """A copy of B that keeps N (the dw of an lm head at 128 tokens) is explained beside the same
    copy with C padded and sliced, each with its predicted time; both are real plans."""
    p = plan(1280, 50257, 128, "TN")
    assert p.pad_b and not p.pad_a and (p.kernel_problem.n, p.kernel_problem.ldb) == (50257, 50304)
    grown = repack.plan_for_problem(p.problem, hardware.H200, "always")
    text = jtblas.explain(1280, 50257, 128, transpose_a=True, hardware="h200").why()
    assert "ldb=50304" in text and "computing C padded ([1280, 50304]) and slicing it would predict" in text
    assert "it repacks" in text
    padded_c = repack.padded_problem(p.problem, pad_a=False, pad_b=True, pad_k=False)
    assert (padded_c.n, grown.kernel_problem.n) == (50304, 50304)


def test_vocab_projection_pads_only_the_weight():
    """N = 50257 (a vocabulary) with aligned K: only B, whose rows are N long, is copied, to
    rows of 50304; C keeps N = 50257."""
    p = plan(4096, 50257, 4096)
    assert p.repacks and p.pad_b and not p.pad_a and p.kernel_problem.k == 4096
    assert (p.kernel_problem.n, p.kernel_problem.ldb) == (50257, 50304)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("transpose_a", [False, True], ids=["NT", "TT"])
@pytest.mark.parametrize("m,n,k", [(7, 13, 197), (45, 71, 83), (64, 32, 128)])
def test_transposed_b_copy_matches_float64(m, n, k, transpose_a, dtype, rng):
    """B stored [N, K] copied into [K, N] (the kernel runs NN or TN), forced on: odd and aligned
    sizes; the gradients go through the same plan."""
    a, b, reference = random_operands(rng, m, n, k, dtype, transpose_a=transpose_a, transpose_b=True)
    run = product(transpose_a, True, config=None)
    with ops.repack_mode("transpose"):
        text = str(jax.make_jaxpr(run)(a, b))
    assert "transpose[" in text  # the copy is there, so the check below is of the transposed path
    out = forced(run, "transpose")(a, b)
    assert out.shape == (m, n) and relative_error(out, reference) < tolerance(dtype, dtype)


def test_batched_and_vmapped_transposed_b_copy(rng):
    """The transposed copy of a B stored [N, K] with a batch folded into M, a vmapped B (batch
    grid axis: the copy swaps the last two axes of every batch entry), and both."""
    a = jnp.asarray(rng.standard_normal((3, 5, 7, 19)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((4, 11, 19)), jnp.float32)  # each [N, K]
    fn = product(transpose_b=True, config=None, precision=jax.lax.Precision.HIGHEST)
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    np.testing.assert_allclose(forced(fn, "transpose")(a, b[0]), np.einsum("abmk,nk->abmn", a64, b64[0]),
                               rtol=1e-5, atol=1e-5)
    with ops.repack_mode("transpose"):
        assert "transpose[" in str(jax.make_jaxpr(jax.vmap(fn, in_axes=(None, 0)))(a[0, 0], b))
    vmapped = forced(jax.vmap(fn, in_axes=(None, 0)), "transpose")(a[0, 0], b)
    np.testing.assert_allclose(vmapped, np.einsum("mk,bnk->bmn", a64[0, 0], b64), rtol=1e-5, atol=1e-5)
    both = forced(jax.vmap(fn), "transpose")(a[0, :4], b)
    np.testing.assert_allclose(both, np.einsum("bmk,bnk->bmn", a64[0, :4], b64), rtol=1e-5, atol=1e-5)


def test_grad_through_transposed_b_copy(rng):
    a, b, _ = random_operands(rng, 9, 13, 11, "float32", transpose_b=True)
    hi = jax.lax.Precision.HIGHEST
    ours = lambda x, y: jnp.sum(jnp.sin(jtblas.matmul(x, y, transpose_b=True, precision=hi)))
    with ops.repack_mode("transpose"):
        grads = jax.jit(jax.grad(ours, argnums=(0, 1)))(a, b)
    expected = jax.grad(lambda x, y: jnp.sum(jnp.sin(jnp.dot(x, y.T, precision=hi))), argnums=(0, 1))(a, b)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_model_transposes_a_k_major_b_when_it_pays():
    """NT (a dx GEMM) on the H200 without its TMA kernel: a copy of B into [K, N] plus the NN
    kernel beats the NT pointer kernel for large products (k_major_b_efficiency); not for small
    ones, not without wgmma, not TT, never NN, and not with the TMA kernel (no K-major discount)."""
    big = plan(4096, 4096, 14336, "NT", gpu=H200_WITHOUT_TMA)
    assert big.repacks and big.transpose_b and big.pad_b and not big.pad_a
    assert not big.kernel_problem.transpose_b and big.kernel_problem.k == 14336
    assert big.copy_seconds > 0 and big.predicted_seconds < (1 - repack.REPACK_MIN_GAIN) * big.plain_seconds
    assert "transposed" in big.reason
    assert not plan(4096, 4096, 14336, "TT").repacks  # TT runs at NN speed: nothing to gain
    assert not plan(4096, 768, 768, "NT", gpu=H200_WITHOUT_TMA).transpose_b  # the copy's launch is not paid back
    with_tma = plan(4096, 4096, 14336, "NT")
    assert not with_tma.repacks and with_tma.config.tma
    assert not plan(4096, 4096, 14336, "NT", gpu="a100").transpose_b  # mma.sync: no K-major penalty
    assert not plan(4096, 4096, 14336, "NN").repacks
    with pytest.raises(ValueError, match="transposing an operand copies it"):
        repack.padded_problem(Problem(m=8, n=8, k=8, transpose_b=True), pad_a=False, pad_b=False, pad_k=False,
                              transpose_b=True)


def tf32_plan(m, n, k, layout, gpu="h100", precision="tf32"):
    problem = Problem(m=m, n=n, k=k, dtype="float32", out_dtype="float32", input_precision=precision,
                      transpose_a=layout[0] == "T", transpose_b=layout[1] == "T")
    return repack.plan_for_problem(problem, hardware.get(gpu))


def test_transposed_tf32_copies_are_priced_at_a_bank_word_per_clock():
    """A tf32 wgmma tile of the pointer kernel that copies B stored [K, N] transposed spends at least
    B's stage bytes / (4 bytes per clock) of shared memory per K step; the same tile on B stored
    [N, K], or in bf16, far less."""
    h100 = hardware.get("h100")
    config = jtblas.Config(block_m=64, block_n=256, block_k=32, num_warps=4, num_stages=5, group_m=8)
    nn, nt = (Problem(m=6304, n=1024, k=1024, dtype="float32", out_dtype="float32", transpose_b=t)
              for t in (False, True))
    b_stage = 32 * 256 * 4
    clock = h100.clock_hz
    transposed = cost.estimate(config, nn, h100)
    assert transposed.step_smem >= b_stage / (h100.model_constants().transposed_copy_bytes_per_clock * clock)
    assert transposed.step_smem > 8 * cost.estimate(config, nt, h100).step_smem
    bf16 = dataclasses.replace(nn, dtype="bfloat16", out_dtype="bfloat16")
    assert transposed.step_smem > 8 * cost.estimate(config, bf16, h100).step_smem


def test_model_copies_tf32_operands_k_major_when_it_pays():
    """tf32 on Hopper: a B stored [K, N] (and an A stored [K, M]) that a wgmma tile would copy
    transposed, a bank word per clock, is copied into [N, K] ([M, K]) first for the NT kernel where
    that pays: NN and TN at thousands of rows; never for NT (already K-major), not for a decode
    product (an mma.sync tile copies B at full width), not in "ieee" precision (FMA tiles), not on
    the A100 (mma.sync reads both layouts)."""
    nn = tf32_plan(6304, 1024, 1024, "NN")
    assert nn.pad_b and nn.transpose_b and not nn.pad_a and not nn.transpose_a
    assert nn.kernel_problem.transpose_b and not nn.kernel_problem.transpose_a and nn.kernel_problem.k == 1024
    assert nn.copies == "Bᵀ" and "transposed" in nn.reason
    assert nn.predicted_seconds < (1 - repack.REPACK_MIN_GAIN) * nn.plain_seconds
    tn = tf32_plan(1024, 1024, 8192, "TN")
    assert tn.transpose_a and tn.transpose_b and tn.copies == "AᵀBᵀ"
    assert not tn.kernel_problem.transpose_a and tn.kernel_problem.transpose_b
    nt = tf32_plan(6304, 1024, 1024, "NT")
    assert not nt.transpose_a and not nt.transpose_b
    assert not tf32_plan(4, 768, 3072, "NN").repacks
    assert not tf32_plan(6304, 1024, 1024, "NN", precision="ieee").repacks
    assert not tf32_plan(6304, 1024, 1024, "NN", gpu="a100").repacks


@pytest.mark.parametrize("layout", ["NN", "TN", "TT"])
@pytest.mark.parametrize("m,n,k", [(7, 13, 197), (64, 32, 128)])
def test_tf32_transposed_copies_match_float64(m, n, k, layout, rng):
    """fp32 in tf32 with its M- or N-major operands copied transposed (forced): NN copies B into
    [N, K], TN A into [M, K] and B into [N, K], TT A (and B, stored [N, K], into [K, N]);
    the values against float64, a vmapped B, and the gradients through the same plan."""
    transpose_a, transpose_b = layout[0] == "T", layout[1] == "T"
    a, b, reference = random_operands(rng, m, n, k, "float32", transpose_a=transpose_a, transpose_b=transpose_b)
    run = product(transpose_a, transpose_b, config=None)
    problem = Problem(m=m, n=n, k=k, dtype="float32", out_dtype="float32", transpose_a=transpose_a,
                      transpose_b=transpose_b)
    forced_plan = repack.plan_for_problem(problem, hardware.get("h100"), "transpose")
    assert forced_plan.transpose_a == transpose_a and forced_plan.transpose_b
    with ops.repack_mode("transpose"):
        assert str(jax.make_jaxpr(run)(a, b)).count("transpose[") == 1 + transpose_a
    out = forced(run, "transpose")(a, b)
    assert out.shape == (m, n) and relative_error(out, reference) < tolerance("float32", "float32")
    bs = jnp.stack([b, -2 * b])
    vmapped = forced(jax.vmap(run, in_axes=(None, 0)), "transpose")(a, bs)
    assert relative_error(vmapped[1], -2 * reference) < tolerance("float32", "float32")
    loss = lambda f: lambda x, y: jnp.sum(jnp.sin(f(x, y)))
    reference_fn = lambda x, y: jnp.matmul(x.T if transpose_a else x, y.T if transpose_b else y,
                                           precision=jax.lax.Precision.HIGHEST)
    with ops.repack_mode("transpose"):
        grads = jax.jit(jax.grad(loss(run), argnums=(0, 1)))(a, b)
    expected = jax.grad(loss(reference_fn), argnums=(0, 1))(a, b)
    for got, want in zip(grads, expected):
        assert relative_error(got, want) < 4 * tolerance("float32", "float32")


def test_wrapped_offsets_limit_the_load_width():
    """The kernel's tile offsets wrap at N (M) and are contiguous only in runs of N's (M's)
    power-of-two divisor; rows padded past N (M) wrap at the row stride instead (PADDED_N,
    PADDED_M), so their aligned stride makes the loads full width."""
    config = jtblas.Config(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3)
    constants = hardware.H200.model_constants()
    assert cost.vector_bytes(Problem(m=1024, n=2974, k=1024), config, "b", constants) == 4  # N = 2 mod 8
    strided = Problem(m=1024, n=2974, k=1024, ldb=3008)  # rows 16-byte aligned, padded past N
    assert cost.vector_bytes(strided, config, "b", constants) == 16
    assert resources.padded_rows(strided) == (False, True)
    transposed = Problem(m=1002, n=1024, k=1024, transpose_a=True, lda=1024)
    assert cost.vector_bytes(transposed, config, "a", constants) == 16
    assert resources.padded_rows(transposed) == (True, False)
    assert resources.padded_rows(Problem(m=1002, n=2974, k=1024, transpose_a=True)) == (False, False)


@pytest.mark.gpu
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
def test_repacked_large_tiles_on_gpu(transpose_a, transpose_b, rng):
    """Repacked products with the model's own (large) tiles on the GPU, odd M, N and K: the
    first repacked launch on the H200 faulted (misaligned address) before the kernel's offset
    hints were made honest."""
    if jax.default_backend() != "gpu":
        pytest.skip("needs a CUDA GPU")
    m, n, k = 1001, 2974, 1431
    a, b, reference = random_operands(rng, m, n, k, "bfloat16", transpose_a=transpose_a, transpose_b=transpose_b)
    run = product(transpose_a, transpose_b, config=None)
    for mode in ("always", "strides", "auto") + (("transpose",) if transpose_b else ()):
        out = forced(run, mode)(a, b)
        assert out.shape == (m, n)
        assert relative_error(out, reference) < tolerance("bfloat16", "bfloat16")


# ------------------------------------------------------------------------------------------------
# CUDA lowering (jax-triton's real compiler, sm_90, no GPU)
# ------------------------------------------------------------------------------------------------


def test_repacked_product_compiles_for_sm90(monkeypatch):
    monkeypatch.setenv(hardware.ENV_VAR, "h200")  # the model plans for the H200: it repacks
    a = jax.ShapeDtypeStruct((1500, 3399), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((3399, 4501), jnp.bfloat16)
    text = lower_for_cuda(jtblas.matmul, a, b)
    assert "triton_kernel_call" in text and text.count("stablehlo.pad") == 2


@pytest.mark.parametrize("tma", [False, True], ids=["no_tma_kernel", "tma_kernel"])
def test_transposed_b_plan_compiles_for_sm90(tma, monkeypatch):
    """A dx-shaped NT product on the H200: where the launcher cannot give the TMA kernel its scratch
    (CI's stacks), the model runs it as a transposed copy of B plus the NN kernel; where it can
    (jax-triton 0.3.1 on jaxlib >= 0.11, the GPU machine's stack), on the TMA kernel, which reads
    B stored [N, K] through its descriptor with no copy. Each lowers for sm_90."""
    from jtblas import launch

    if tma and not launch.global_scratch_supported("cuda"):
        pytest.skip("this jax-triton and jaxlib give the TMA kernel no global scratch")
    monkeypatch.setattr(launch.jax_triton_adapter, "global_scratch_supported", lambda: tma)
    monkeypatch.setenv(hardware.ENV_VAR, "h200")
    jax.clear_caches()  # a trace of the other case would otherwise be reused
    a = jax.ShapeDtypeStruct((4096, 14336), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((4096, 14336), jnp.bfloat16)  # stored [N, K]
    text = lower_for_cuda(functools.partial(jtblas.matmul, transpose_b=True), a, b)
    assert "triton_kernel_call" in text and ("stablehlo.transpose" in text) == (not tma)


def _corpus_sample():
    """Every repacked product of the benchmark corpus on the H200 plus every tenth of the others."""
    from jtblas.bench import shapes

    sample = []
    for i, shape in enumerate(shapes.load()):
        if repack.plan_for_problem(shape.problem(), hardware.H200).repacks or i % 10 == 0:
            sample.append(shape)
    return sample


def test_select_is_one_of_the_candidates_across_the_corpus():
    """`select`, `candidates` and `explain` describe the same problem, the one the kernel runs:
    the padded one where the model repacks (1500x4501x3399 NN, the 50257-row vocabulary TN)."""
    sample = _corpus_sample()
    repacked = 0
    rows = [(s.m, s.n, s.k, s.dtype, s.transpose_a, s.transpose_b, s.batch) for s in sample]
    rows += [(1500, 4501, 3399, "bfloat16", False, False, 1), (768, 50257, 8192, "bfloat16", True, False, 1)]
    for m, n, k, dtype, transpose_a, transpose_b, batch in rows:
        kw = dict(dtype=dtype, transpose_a=transpose_a, transpose_b=transpose_b, batch=batch, hardware="h200")
        space = jtblas.candidates(m, n, k, **kw)
        picked = jtblas.select(m, n, k, **kw)
        assert picked in space, (m, n, k, dtype, transpose_a, transpose_b, batch)
        explained = jtblas.explain(m, n, k, **kw)
        assert explained.config == picked
        assert sorted(e.config.short() for e in explained.ranked) == sorted(c.short() for c in space)
        if explained.plan.repacks:
            repacked += 1
            assert explained.plan.kernel_problem != explained.plan.problem
    assert repacked >= 2  # the two named products at least
