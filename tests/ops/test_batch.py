"""Batched products and launch limits: batch-aware planning (waves over batch x tiles, the
split-K workspace cap), grids within CUDA's limits, 64-bit offsets, and errors for products that
cannot fit; plus the whole benchmark corpus's unbatched picks held fixed."""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jtblas
from jtblas import hardware, launch_specs, model, operands
from jtblas.bench import shapes
from jtblas.config import Problem
from jtblas.model import candidates, resources
from jtblas.model.select import rank
from tests.reference import DTYPES, kernel_calls, relative_error, tolerance

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
# The benchmark sets of single products (batched.csv came with the batch-aware model).
UNBATCHED_SETS = ("models", "odd", "deepk", "square", "misaligned")


def _pick_name(plan: model.ProductPlan) -> str:
    flags = "".join(f for f, on in ((" +A", plan.pad_a), (" +B", plan.pad_b), (" +Bt", plan.transpose_b),
                                    (" +C", plan.c_padded)) if on)
    return plan.config.short() + flags


def test_corpus_picks_unchanged_without_a_batch():
    """Every unbatched row of the benchmark sets keeps the pick (config and repacked operands) it
    had when `tests/data/corpus_picks.json` was written (H200, 512 products with the misaligned set;
    " +C": C computed padded and sliced; last changed 2026-12-07: each program pays a start cost
    (`Constants.program_start_seconds`), 29 picks move (decode splits to more ways, mid-size
    forwards to the TMA kernel, misaligned dw at 1-16 tokens to 128-column tiles or B copied);
    before that,
    2026-12-06 (evening): the persistent TMA
    kernel pays fill and epilogue once per program, 39 mid-size and lm-head forwards move to it;
    before that, split factors 3, 5, 6 and 7
    searched besides powers of two, 15 split products move, 768x768 dw to 3 ways; before that, a
    compute-bound tie goes to the tile with the smaller shared-memory time, 24 products from
    256x128x64 to 128x256x64 on 8 warps; before that, copies of misaligned rows keep the caller's
    M and N, with the kernel wrapping at the padded row stride: 44 picks moved, 40 of them from C
    padded and sliced on the TMA kernel to C at the caller's shape)."""
    expected = json.loads((DATA / "corpus_picks.json").read_text())
    h200 = hardware.get("h200")
    picks = {s.key(): _pick_name(model.plan_for_problem(s.problem(), h200))
             for s in shapes.load(UNBATCHED_SETS)}
    changed = {key: (expected.get(key), pick) for key, pick in picks.items() if expected.get(key) != pick}
    assert not changed, f"{len(changed)} picks changed (was, now): {dict(list(changed.items())[:10])}"
    assert len(picks) == len(expected)


# ---- the model with a batch --------------------------------------------------------------------

H200 = hardware.get("h200")


@pytest.mark.parametrize("batch,m,n,k", [(4096, 64, 64, 4096), (1000, 128, 128, 32768), (32, 128, 128, 64)])
def test_a_batch_that_fills_the_gpu_is_not_split(batch, m, n, k):
    """The batch entries fill every SM: no split-K, no fp32 workspace (before the model knew the
    batch, 4096 x 64x64x4096 planned split 16: a 1 GiB workspace for a 32 MiB result)."""
    problem = Problem(m=m, n=n, k=k, batch=batch)
    plan = model.plan_for_problem(problem, H200)
    assert plan.config.k_slices == 1
    win = rank(plan.kernel_problem, H200)[0]
    per_product = -(-m // plan.config.block_m) * -(-n // plan.config.block_n)
    assert win.tiles == per_product * batch and win.programs == win.tiles
    assert win.waves == -(-win.tiles // (H200.sm_count * win.programs_per_sm))


def test_the_unbatched_product_still_splits():
    assert model.plan_for_problem(Problem(m=64, n=64, k=4096), H200).config.split_k > 1


def test_a_small_batch_may_still_split_within_the_cap():
    """Two 64x64x8192 products leave 130 SMs idle: split-K pays, its workspace is tiny."""
    problem = Problem(m=64, n=64, k=8192, batch=2)
    config = model.plan_for_problem(problem, H200).config
    assert config.split_k > 1
    assert resources.workspace_bytes(config, problem) <= candidates.max_workspace_bytes(H200)


@pytest.mark.parametrize("batch", [1, 2, 8, 64, 512])
@pytest.mark.parametrize("shape", [(64, 64, 4096), (16, 50257, 1024), (768, 50257, 8192), (128, 128, 32768)])
def test_every_candidate_keeps_its_workspace_within_the_cap(shape, batch):
    m, n, k = shape
    problem = Problem(m=m, n=n, k=k, batch=batch)
    for config in model.candidates_for_problem(problem, H200):
        assert resources.workspace_bytes(config, problem) <= candidates.max_workspace_bytes(H200), config.short()


@pytest.mark.parametrize("m,n,k", [(64, 151937, 4096), (384, 151937, 8192), (256, 50257, 8192)])
def test_unbatched_k_phases_of_odd_vocabularies_stay_under_the_cap(m, n, k):
    """Unbatched products whose phases write up to 1.7 GiB keep them (a fixed 256 MiB cap had
    turned these to 2-byte loads): 1/32 of the H200's memory binds only on batches."""
    transpose_a = m > 64  # a weight gradient (dy's rows misaligned); the decode product NN
    plan = model.plan_for_problem(Problem(m=m, n=n, k=k, transpose_a=transpose_a), H200)
    assert plan.plain_config.k_phases > 1


def test_k_phases_past_the_cap_are_not_offered_and_say_why():
    """16x50257x1024 NN (B's rows 2-byte aligned) may run in 8 K phases unbatched (24.5 MiB of
    partials); 256 of them would write 6.1 GiB, over 1/32 of the H200's 141 GiB (4.4 GiB), while
    2 and 4 phases (1.5 and 3.1 GiB) stay under it."""
    assert candidates.max_workspace_bytes(H200) == 141 * 2**30 // 32
    one = Problem(m=16, n=50257, k=1024)
    many = Problem(m=16, n=50257, k=1024, batch=256)
    assert any(c.k_phases == 8 for c in model.candidates_for_problem(one, H200))
    offered = {c.k_phases for c in model.candidates_for_problem(many, H200)}
    assert 8 not in offered and 2 in offered
    twin = jtblas.Config(block_m=16, block_n=256, block_k=64, num_warps=2, num_stages=3, group_m=1, k_phases=8)
    assert any("workspace cap" in r for r in model.rejection_reasons(twin, many, H200))


def test_batch_one_is_the_default_and_changes_nothing():
    assert Problem(m=5, n=6, k=7) == Problem(m=5, n=6, k=7, batch=1)
    assert jtblas.select(64, 64, 4096, hardware="h200") == jtblas.select(64, 64, 4096, hardware="h200", batch=1)


def test_explain_shows_the_batch():
    text = str(jtblas.explain(64, 64, 4096, batch=4096, hardware="h200"))
    assert text.startswith("4096 x 64x64x4096 bfloat16 NN on h200")
    assert Problem(m=2, n=3, k=4, batch=5).flops == 2 * 5 * 2 * 3 * 4


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_a_bad_batch_is_refused_with_its_value(value):
    with pytest.raises(ValueError, match="batch"):
        jtblas.select(64, 64, 64, batch=value, hardware="h200")


# ---- sizes that cannot fit -------------------------------------------------------------------------


@pytest.mark.parametrize("m,n,k,batch", [(2**40, 2**40, 2**40, 1), (64, 64, 2**31 + 1, 1), (8192, 8192, 8192, 1024)])
def test_products_beyond_device_memory_are_refused_with_their_sizes(m, n, k, batch):
    for entry in (jtblas.select, jtblas.explain, jtblas.candidates):
        if entry is jtblas.candidates:
            continue  # the search space itself needs no memory; select and explain refuse
        with pytest.raises(ValueError, match=rf"M={m}, N={n}, K={k}, batch={batch} .*GiB.*h200's 141 GiB"):
            entry(m, n, k, batch=batch, hardware="h200")


def test_a_forced_split_whose_workspace_passes_device_memory_is_refused():
    problem = Problem(m=16384, n=16384, k=1 << 16, batch=4)  # A, B, C: 12 GiB; 256 partials: 1 TiB
    config = jtblas.Config(block_m=128, block_n=128, block_k=64, split_k=256)
    with pytest.raises(ValueError, match="partials, more than h200's 141 GiB"):
        operands.check_config(config, problem, H200)


def test_a_product_that_fits_memory_but_has_k_past_int32_gets_64_bit_offsets():
    """1x1x(2^31+1): 8 GiB of operands fit; the plan is a real one and the launch indexes in int64."""
    problem = Problem(m=1, n=1, k=2**31 + 1)
    config = model.plan_for_problem(problem, H200).config
    spec = launch_specs.launch_spec(problem, config, hw=H200)
    assert spec.metaparams["INDEX_64"]


# ---- launch limits -------------------------------------------------------------------------------


def test_grid_axes_past_cudas_limits_are_refused_by_the_launch_spec():
    problem = Problem(m=16, n=16, k=16, batch=70000)
    with pytest.raises(ValueError, match=r"grid \(1, 70000, 1\).*65535 along y and z"):
        launch_specs.launch_spec(problem, jtblas.Config(block_m=16, block_n=16, block_k=16, num_warps=1, group_m=1),
                        batch=70000, hw=H200)


@pytest.mark.parametrize("batch,rows,index_64", [(1, 1024, False), (4096, 1024, True), (2, 2**19, False)])
def test_64_bit_offsets_only_past_2_to_the_31_elements(batch, rows, index_64):
    """INDEX_64 turns on for the whole batch's elements (4096 x 1024x1024 C: 2^32), not before
    (2 x 2^19 x 1024: 2^30)."""
    problem = Problem(m=rows, n=1024, k=64, batch=batch)
    strides = (rows * 64, 64 * 1024, rows * 1024) if batch > 1 else (0, 0, 0)
    spec = launch_specs.launch_spec(problem, jtblas.Config(), batch=batch, batch_strides=strides, hw=H200)
    assert spec.metaparams["INDEX_64"] is index_64


# ---- batched products on the CPU interpreter (NaN-poisoned outputs) ------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("spec", ["bhqd,bhkd->bhqk", "bhqk,bhkd->bhqd"], ids=["scores-NT", "values-NN"])
def test_batched_dot_general_matches_float64(spec, dtype, rng):
    """Attention-like products, batch x heads as dot_general batch dimensions: one batched launch,
    against a float64 einsum of the same rounded inputs, within the dtype's tolerance."""
    lhs_shape, rhs_shape = {"bhqd,bhkd->bhqk": ((2, 3, 17, 24), (2, 3, 19, 24)),
                            "bhqk,bhkd->bhqd": ((2, 3, 17, 19), (2, 3, 19, 24))}[spec]
    lhs = jnp.asarray(rng.standard_normal(lhs_shape), DTYPES[dtype])
    rhs = jnp.asarray(rng.standard_normal(rhs_shape), DTYPES[dtype])
    contracting = ((3,), (3,)) if spec.startswith("bhqd") else ((3,), (2,))
    dims = (contracting, ((0, 1), (0, 1)))
    out = jax.jit(lambda x, y: jtblas.dot_general(x, y, dims))(lhs, rhs)
    reference = np.einsum(spec, np.asarray(lhs, np.float64), np.asarray(rhs, np.float64))
    assert out.dtype == DTYPES[dtype]
    assert relative_error(out, reference) < tolerance(dtype, dtype)


def _launches(fn, *args) -> int:
    return kernel_calls(fn, *args)


@pytest.mark.parametrize("config", [None, jtblas.Config(block_m=16, block_n=16, block_k=16, num_warps=1,
                                                          num_stages=2, group_m=1, split_k=2)],
                         ids=["model", "split-k"])
@pytest.mark.parametrize("batched", ["both", "rhs"])
def test_a_batch_past_the_grid_limit_runs_in_chunks(batched, config, monkeypatch, rng):
    """With the grid's batch axis limited to 2 entries, a batch of 5 runs as 3 launches (2, 2, 1)
    of the same kernel (a split adds each chunk's reduction), and every entry is right: the chunks
    take the right slices of a batched operand and the whole of a broadcast one."""
    monkeypatch.setattr(launch_specs, "MAX_GRID_YZ", 2)
    batch, m, n, k = 5, 9, 12, 40
    a = jnp.asarray(rng.standard_normal((batch, m, k) if batched == "both" else (m, k)), jnp.float32)
    b = jnp.asarray(rng.standard_normal((batch, k, n)), jnp.float32)
    fn = jax.vmap(lambda x, y: jtblas.matmul(x, y, precision=jax.lax.Precision.HIGHEST, config=config),
                  in_axes=(0 if batched == "both" else None, 0))
    out = jax.jit(fn)(a, b)
    spec = "bmk,bkn->bmn" if batched == "both" else "mk,bkn->bmn"
    reference = np.einsum(spec, np.asarray(a, np.float64), np.asarray(b, np.float64))
    assert relative_error(out, reference) < tolerance("float32", "float32", "ieee")
    assert _launches(fn, a, b) == 3 * (2 if config is not None else 1)


def test_the_grid_limit_is_cudas():
    assert launch_specs.MAX_GRID_YZ == 65535 and launch_specs.MAX_GRID_X == 2**31 - 1


def test_launch_specs_of_every_chunk_stay_within_the_limits():
    """B = 70000 (batch x heads past 65535) traced for the GPU: no launch spec is built past the
    grid's batch axis (it would raise), and the two chunks cover the batch."""
    seen = []
    original = launch_specs.launch_spec

    def spying(problem, config, **kwargs):
        spec = original(problem, config, **kwargs)
        seen.append(spec.grid)
        return spec

    import unittest.mock

    with unittest.mock.patch.object(launch_specs, "launch_spec", spying):
        a = jax.ShapeDtypeStruct((70000, 16, 32), jnp.bfloat16)
        b = jax.ShapeDtypeStruct((70000, 32, 16), jnp.bfloat16)
        jax.make_jaxpr(jax.vmap(jtblas.matmul))(a, b)
    # (custom_vmap also traces the unbatched product once, for its output type: batch 1)
    assert [grid[1] for grid in seen if grid[1] > 1] == [65535, 70000 - 65535]
    assert all(max(grid[1:]) <= 65535 for grid in seen)


@pytest.mark.gpu
def test_70000_tiny_products_on_the_gpu(rng):
    """B = 70000 > 65535 entries of 16x16x32 on the device, against float64."""
    a = jnp.asarray(rng.standard_normal((70000, 16, 32)), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((70000, 32, 16)), jnp.bfloat16)
    out = jax.jit(jax.vmap(jtblas.matmul))(a, b)
    reference = np.einsum("bmk,bkn->bmn", np.asarray(a, np.float64), np.asarray(b, np.float64))
    assert relative_error(out, reference) < tolerance("bfloat16", "bfloat16")


@pytest.mark.gpu
def test_batched_attention_scores_on_the_gpu_match_xla(rng):
    """4096 batch x heads of 128x128x64 scores (NT): right, and planned without a split."""
    q = jnp.asarray(rng.standard_normal((4096, 128, 64)), jnp.bfloat16)
    k = jnp.asarray(rng.standard_normal((4096, 128, 64)), jnp.bfloat16)
    dims = (((2,), (2,)), ((0,), (0,)))
    out = jax.jit(lambda x, y: jtblas.dot_general(x, y, dims))(q, k)
    reference = np.einsum("bqd,bkd->bqk", np.asarray(q, np.float64), np.asarray(k, np.float64))
    assert relative_error(out, reference) < tolerance("bfloat16", "bfloat16")


def test_cli_explain_takes_a_batch_and_refuses_absurd_sizes(capsys):
    from jtblas import cli

    assert cli.main(["explain", "64", "64", "4096", "--batch", "4096", "--gpu", "h200", "--top", "1"]) == 0
    assert capsys.readouterr().out.startswith("4096 x 64x64x4096 bfloat16 NN on h200")
    size = str(2**40)
    assert cli.main(["explain", size, size, size, "--gpu", "h200"]) == 2
    assert f"M={size}, N={size}, K={size}, batch=1" in capsys.readouterr().err
