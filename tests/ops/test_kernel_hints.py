"""The facts the kernel's compiler hints claim, checked in numpy over random sizes.

`tile_bases` tells Triton that the wrapped tile offsets `(pid·BLOCK + arange(BLOCK)) % N` come
in runs of N_UNIT contiguous values, each run starting at a multiple of N_UNIT, where N_UNIT is
the power of two (≤ 16 bytes' worth) that `launch_specs.launch_spec` found dividing N. A false
claim makes the GPU issue vector loads at misaligned addresses (it did, with tutorial 03's runs of
BLOCK, on the H200); the interpreter cannot notice, so the arithmetic is checked here.
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jtblas.config import Config, Problem
from jtblas.launch_specs import divisibility_unit, launch_spec


def wrapped_offsets(pid: int, block: int, extent: int) -> np.ndarray:
    return (pid * block + np.arange(block)) % extent


@settings(max_examples=300, deadline=None)
@given(extent=st.integers(1, 5000), block=st.sampled_from([16, 32, 64, 128, 256]),
       limit=st.sampled_from([4, 8]), data=st.data())
def test_wrapped_offsets_come_in_aligned_runs_of_the_unit(extent, block, limit, data):
    unit = divisibility_unit(extent, limit)
    pid = data.draw(st.integers(0, -(-extent // block) - 1))
    offsets = wrapped_offsets(pid, block, extent)
    runs = offsets.reshape(-1, unit)  # unit ≤ 8 ≤ block: whole runs
    assert np.all(runs[:, 0] % unit == 0)  # tl.multiple_of(offs, UNIT)
    assert np.all(np.diff(runs, axis=1) == 1)  # tl.max_contiguous(offs, UNIT)


@settings(max_examples=100, deadline=None)
@given(m=st.integers(1, 3000), n=st.integers(1, 3000), k=st.integers(1, 3000),
       transpose_a=st.booleans(), transpose_b=st.booleans(), dtype=st.sampled_from(["bfloat16", "float32"]))
def test_launch_units_divide_what_they_claim_to(m, n, k, transpose_a, transpose_b, dtype):
    """Every size and stride reaches the kernel divided by its *_UNIT, a power of two ≤ 16 that
    divides it: the kernel's multiplication restores the value exactly."""
    problem = Problem(m=m, n=n, k=k, dtype=dtype, out_dtype=dtype, transpose_a=transpose_a, transpose_b=transpose_b)
    spec = launch_spec(problem, Config(block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=3))
    lda, ldb = problem.a_row_stride, problem.b_row_stride
    expected = dict(
        M=m, N=n, K=k,
        STRIDE_AM=1 if transpose_a else lda, STRIDE_AK=lda if transpose_a else 1,
        STRIDE_BK=1 if transpose_b else ldb, STRIDE_BN=ldb if transpose_b else 1,
        STRIDE_CM=n,
    )
    for (name, value), reduced in zip(expected.items(), spec.scalars):
        unit = spec.metaparams[f"{name}_UNIT"]
        assert unit & (unit - 1) == 0 and unit <= 16, (name, unit)
        assert reduced * unit == value, (name, reduced, unit, value)


def test_only_nt_products_address_k_steps_from_their_indices():
    """The two K-addressing forms compute the same values (the interpreter tests of every layout
    run both); which one a layout gets is the measured choice of `resources.k_from_indices`."""
    config = Config(block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=3)
    for transpose_a, transpose_b, expected in ((False, False, False), (False, True, True),
                                               (True, False, False), (True, True, False)):
        problem = Problem(m=100, n=80, k=96, dtype="bfloat16", out_dtype="bfloat16",
                          transpose_a=transpose_a, transpose_b=transpose_b)
        assert launch_spec(problem, config).metaparams["K_FROM_INDICES"] is expected


@settings(max_examples=200, deadline=None)
@given(extent=st.integers(1, 5000), block=st.sampled_from([16, 32, 64, 128, 256]), transpose_a=st.booleans(),
       data=st.data())
def test_rows_padded_past_the_extent_wrap_at_the_row_stride_in_aligned_runs(extent, block, transpose_a, data):
    """A copy whose rows are padded past N (B [K, N]) or M (A stored [K, M]) without growing them
    (`repack.padded_problem(pad_c=False)`): the kernel wraps that operand's offsets at the row
    stride, told in runs of its unit (PADDED_N with STRIDE_BK_UNIT, PADDED_M with STRIDE_AK_UNIT),
    and every offset stays inside the row."""
    stride = -(-extent // 64) * 64 + 64 * data.draw(st.integers(0, 1))
    if stride == extent:
        stride += 64
    if transpose_a:
        problem = Problem(m=extent, n=96, k=80, transpose_a=True, lda=stride)
        flag, unit_name = "PADDED_M", "STRIDE_AK_UNIT"
    else:
        problem = Problem(m=96, n=extent, k=80, ldb=stride)
        flag, unit_name = "PADDED_N", "STRIDE_BK_UNIT"
    spec = launch_spec(problem, Config(block_m=block, block_n=block, block_k=32, num_warps=4, num_stages=3))
    assert spec.metaparams[flag] and not spec.metaparams["PADDED_M" if flag == "PADDED_N" else "PADDED_N"]
    unit = spec.metaparams[unit_name]
    assert unit == 8  # 16 bytes of bf16: the padded stride is a multiple of 64 elements
    pid = data.draw(st.integers(0, -(-extent // block) - 1))
    offsets = wrapped_offsets(pid, block, stride)
    runs = offsets.reshape(-1, min(unit, block))
    assert np.all(runs[:, 0] % unit == 0) and np.all(np.diff(runs, axis=1) == 1)
    assert offsets.max() < stride
    plain = launch_spec(Problem(m=96, n=extent, k=80), Config(block_m=block, block_n=block, block_k=32, num_warps=4,
                                                               num_stages=3))
    assert not plain.metaparams["PADDED_N"] and not plain.metaparams["PADDED_M"]
