"""Swapped tiles (`Config.swap_ab`): the kernel accumulates Cᵀ = Bᵀ·Aᵀ so that a 16-row tile runs
wgmma on Hopper. Against float64 in the interpreter (and on the GPU under the `gpu` mark), compiled
for sm_90, and where the model offers them."""

import dataclasses

import pytest

import jtblas
from jtblas import hardware
from jtblas.config import Problem
from jtblas.kernels.matmul import matmul_kernel
from jtblas.model import candidates, cost, resources
from jtblas.launch_specs import launch_spec
from tests.reference import compile_for_sm90, random_operands, relative_error, tolerance
from tests.ops.test_matmul import BACKENDS, LAYOUTS, check_config, on_backend

# Small swapped tiles (the interpreter's time grows with the tile): 16 and 32 rows, a split.
CONFIGS = [
    jtblas.Config(block_m=16, block_n=64, block_k=32, group_m=1, num_warps=4, num_stages=3, swap_ab=True),
    jtblas.Config(block_m=32, block_n=64, block_k=16, group_m=2, num_warps=4, num_stages=3, swap_ab=True),
    jtblas.Config(block_m=16, block_n=128, block_k=16, group_m=1, num_warps=8, num_stages=3, split_k=2,
                  swap_ab=True),
]
# M = 1 and 3 (A shorter than a tile: masked rows), primes, K not a multiple of any block_k.
SHAPES = [(1, 70, 45), (3, 129, 16), (37, 53, 71)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_swapped_tiles_match_float64(backend, dtype, transpose_a, transpose_b, m, n, k, rng):
    config = CONFIGS[(m + n + k) % len(CONFIGS)]
    check_config(config, backend, rng, m, n, k, dtype, transpose_a, transpose_b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_swapped_atomic_split_matches_float64(backend, rng):
    config = dataclasses.replace(CONFIGS[2], split_k=4)
    a, b, reference = random_operands(rng, 5, 130, 200, "bfloat16")
    a, b = on_backend(backend, a, b)
    out = jtblas.matmul(a, b, config=config, deterministic=False)
    assert relative_error(out, reference) < tolerance("bfloat16", "bfloat16")


@pytest.mark.parametrize("swap_ab", [False, True])
def test_swapped_decode_tile_compiles_to_wgmma_for_sm90(swap_ab):
    """Compiled for sm_90 (no GPU needed), the model's decode tile 16x64x256 w4 runs warpgroup
    MMAs when swapped and mma.sync when not, as `resources.uses_wgmma` says."""
    problem = Problem(m=1, n=4096, k=4096)
    config = jtblas.Config(block_m=16, block_n=64, block_k=256, group_m=1, num_warps=4, num_stages=5,
                           swap_ab=swap_ab)
    compiled = compile_for_sm90(matmul_kernel, launch_spec(problem, config).metaparams,
                                num_warps=config.num_warps, num_stages=config.num_stages)
    wgmma = resources.uses_wgmma(config, problem, hardware.H200)
    assert wgmma == swap_ab
    assert ("warp_group_dot" in compiled.asm["ttgir"]) == wgmma
    assert ("wgmma.mma_async" in compiled.asm["ptx"]) == wgmma
    assert compiled.metadata.shared <= resources.shared_memory_bytes(config, problem) + 64


def test_model_swaps_only_where_wgmma_replaces_mma_sync():
    """Swapped twins exist on Hopper for tiles under 64 rows, 64+ columns wide, 4 or 8 warps; none
    on the A100 (no wgmma) nor where every tile is a wgmma tile (M ≥ 128); a swapped tile does not
    wait on ldmatrix as its mma.sync twin does."""
    decode = Problem(m=16, n=4096, k=4096)
    space = candidates.candidates_for_problem(decode, hardware.H200)
    swapped = [c for c in space if c.swap_ab]
    assert swapped and all(c.block_m < 64 <= c.block_n and c.num_warps in (4, 8) for c in swapped)
    for config in swapped:
        twin = dataclasses.replace(config, swap_ab=False)
        assert twin in space
        assert resources.uses_wgmma(config, decode, hardware.H200)
        assert not resources.uses_wgmma(twin, decode, hardware.H200)
        assert not cost.mma_and_smem_take_turns(config, decode, hardware.H200)
    assert cost.mma_and_smem_take_turns(dataclasses.replace(swapped[0], swap_ab=False), decode, hardware.H200)
    assert not any(c.swap_ab for c in candidates.candidates_for_problem(decode, hardware.A100))
    big = Problem(m=4096, n=4096, k=4096)
    assert not any(c.swap_ab for c in candidates.candidates_for_problem(big, hardware.H200))
    narrow = jtblas.Config(block_m=16, block_n=32, block_k=256, group_m=1, num_warps=4, num_stages=4, swap_ab=True)
    assert any("swap_ab" in r for r in candidates.rejection_reasons(narrow, decode, hardware.H200))


def test_swapped_tile_reads_the_same_shared_memory_in_the_dots_terms():
    """The shared-memory reads per K step of a swapped tile are its twin's with the roles of A and
    B exchanged where the MMA is the same (an FMA tile on the A100, fp32 'ieee')."""
    problem = Problem(m=16, n=4096, k=4096, dtype="float32", input_precision="ieee")
    config = jtblas.Config(block_m=32, block_n=64, block_k=32, group_m=1, num_warps=4, num_stages=3)
    transposed = dataclasses.replace(config, block_m=64, block_n=32, swap_ab=True)
    a_reads, b_reads = resources.shared_memory_reads_per_step(config, problem, hardware.A100, split=True)
    assert resources.shared_memory_reads_per_step(transposed, problem, hardware.A100, split=True) == (b_reads, a_reads)


def test_explain_says_why_a_tile_is_swapped_or_not():
    """The explanation names the swapped winner's MMA and its unswapped twin's prediction, and for
    an unswapped winner with a swapped twin, what that twin predicts."""
    swapped = jtblas.explain(1, 3584, 3584, hardware="h200")
    twin = next(e for e in swapped.ranked if e.config == dataclasses.replace(swapped.config, swap_ab=False))
    assert swapped.config.swap_ab and twin.predicted_seconds > swapped.ranked[0].predicted_seconds
    assert "Swapped (Cᵀ = Bᵀ·Aᵀ)" in swapped.why() and f"{twin.predicted_seconds * 1e6:.2f} µs" in swapped.why()
    assert "KB of partials" in swapped.why() and "0.0 MB" not in swapped.why()  # a decode split's are small
    plain = jtblas.explain(32, 11008, 14336, hardware="h200")
    swapped_twin = next(e for e in plain.ranked if e.config == dataclasses.replace(plain.config, swap_ab=True))
    assert not plain.config.swap_ab
    words = f"Not swapped: the swapped twin (wgmma) predicts {swapped_twin.predicted_seconds * 1e6:.2f} µs"
    assert words in plain.why()
    tma = jtblas.explain(4096, 4096, 4096, hardware="h200")
    assert "wapped" not in tma.why()  # no swapped tile among wgmma tiles, the TMA kernel's or not
