"""K phases (`Config.k_phases`): the kernel form for operands whose rows along K are not 16-byte
aligned (an lm head over a 50257-token vocabulary). Every layout, dtype, shift and K tail against
a float64 reference under Triton's interpreter, with NaN-poisoned partials (an unwritten element
fails the finiteness check); the launch's shifts and hints; the model's choice; the CUDA lowering.
"""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jtblas
from jtblas import hardware, model
from jtblas.config import Config, Problem
from jtblas.model import candidates, cost, resources
from jtblas.launch_specs import launch_spec
from tests.reference import DTYPES, lower_for_cuda, random_operands, relative_error, stored_shapes, tolerance

LAYOUTS = list(itertools.product([False, True], repeat=2))
LAYOUT_IDS = ["NN", "NT", "TN", "TT"]
H200 = hardware.BUILTIN["h200"]
H100 = hardware.BUILTIN["h100"]


def phase_config(phases: int, block_k: int = 16, **overrides) -> Config:
    fields = dict(block_m=32, block_n=32, block_k=block_k, group_m=1, num_warps=4, num_stages=2,
                  k_phases=phases) | overrides
    return Config(**fields)


def product(a, b, config, transpose_a=False, transpose_b=False, **kwargs):
    return jax.jit(lambda x, y: jtblas.matmul(
        x, y, transpose_a=transpose_a, transpose_b=transpose_b, config=config, **kwargs))(a, b)


# Odd M and N make every layout's rows along K misaligned (A stored [K, M], B [K, N]); K = 203 is
# not a multiple of phases x block_k, and its phases hold 26 or 25 rows.
@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_every_layout_and_dtype_matches_float64_reference(transpose_a, transpose_b, dtype, rng):
    """Every phase count the model may offer (bf16: 2, 4 and 8 phases shift to 4-, 8- and 16-byte
    loads; fp32: 2 and 4), NN and NT on a phase-major copy of A."""
    m, n, k = 37, 53, 203
    problem = Problem(m=m, n=n, k=k, dtype=dtype, out_dtype=dtype, transpose_a=transpose_a,
                      transpose_b=transpose_b)
    counts = resources.k_phase_counts(problem) or (2,)
    a, b, reference = random_operands(rng, m, n, k, dtype, transpose_a=transpose_a, transpose_b=transpose_b)
    for phases in counts:
        out = product(a, b, phase_config(phases), transpose_a, transpose_b)
        assert out.dtype == DTYPES[dtype] and out.shape == (m, n)
        assert relative_error(out, reference) < tolerance(dtype, dtype), phases


def test_reads_past_an_operands_end_never_reach_the_result(rng, monkeypatch):
    """A phased tile's shifted loads read past a misaligned operand's last row, inside the 16-byte
    block that holds its last element, into lanes that are never stored (`matmul_kernel`; on a
    GPU that memory is the operand allocation's, under the interpreter `OPERAND_TAIL_ELEMENTS`
    zeros). With the dtype's largest value there instead, NumPy's products overflow (the reads
    happen) and every layout's result still matches the float64 reference."""
    import warnings

    from jtblas import interpreter

    padded = interpreter._interpreter_operand
    assert (np.frombuffer(padded(np.ones((3, 5), np.float16)).base, np.float16)[15:] == 0).all()

    def huge_tailed(array):
        operand = padded(array)
        huge = np.finfo(operand.dtype).max
        buffer = np.full(operand.size + interpreter.OPERAND_TAIL_ELEMENTS, huge, operand.dtype)
        buffer[:operand.size] = operand.reshape(-1)
        return buffer[:operand.size].reshape(operand.shape)

    monkeypatch.setattr(interpreter, "_interpreter_operand", huge_tailed)
    m, n, k = 37, 53, 203
    for (transpose_a, transpose_b), dtype in itertools.product(LAYOUTS, ["bfloat16", "float32"]):
        a, b, reference = random_operands(rng, m, n, k, dtype, transpose_a=transpose_a, transpose_b=transpose_b)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            out = product(a, b, phase_config(2), transpose_a, transpose_b)
            out.block_until_ready()
        assert relative_error(out, reference) < tolerance(dtype, dtype), (transpose_a, transpose_b, dtype)
        if (transpose_a, transpose_b) != (False, True):  # a misaligned operand stored [K, ...] is shifted
            assert any(issubclass(w.category, RuntimeWarning) for w in seen), (transpose_a, transpose_b, dtype)


@pytest.mark.parametrize("m,n,k", [(1, 50, 7), (5, 9, 1), (16, 130, 64), (3, 41, 129)])
def test_tiny_and_tail_sizes(m, n, k, rng):
    """K smaller than the phases (phases with no row write zeros), one row, a K multiple of
    phases x block_k (no mask), shifted tiles crossing a tile edge."""
    a, b, reference = random_operands(rng, m, n, k, "bfloat16")
    for phases in (2, 8):
        out = product(a, b, phase_config(phases))
        assert relative_error(out, reference) < tolerance("bfloat16", "bfloat16"), phases


def test_swapped_tile_and_fp32_output(rng):
    a, b, reference = random_operands(rng, 9, 77, 150, "bfloat16")
    config = phase_config(8, block_m=16, block_n=64, swap_ab=True)
    out = product(a, b, config, preferred_element_type=jnp.float32)
    assert out.dtype == jnp.float32
    assert relative_error(out, reference) < tolerance("bfloat16", "float32")


def test_batched_operands_with_odd_batch_strides(rng):
    """vmap over both operands: each batch element starts at an odd offset, so its shifts differ."""
    batch, m, n, k = 3, 11, 45, 70
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, k, n)).astype(np.float32)
    a16, b16 = jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16)
    reference = np.asarray(a16, np.float64) @ np.asarray(b16, np.float64)
    for phases in (2, 8):
        config = phase_config(phases)
        out = jax.jit(jax.vmap(lambda x, y, config=config: jtblas.matmul(x, y, config=config)))(a16, b16)
        assert out.shape == (batch, m, n)
        assert relative_error(out, reference) < tolerance("bfloat16", "bfloat16"), phases


def test_phase_major_copy_holds_each_phase_contiguously():
    """The copy of a K-contiguous A the phases load 16 bytes at a time: phase i's block is
    A[:, i::p], zero-padded to whole K blocks."""
    from jtblas.ops import phase_major_copy

    m, k, phases, block_k = 3, 203, 8, 16
    a = np.arange(m * k, dtype=np.float32).reshape(m, k) + 1
    problem = Problem(m=m, n=53, k=k, dtype="float32", out_dtype="float32")
    config = phase_config(phases, block_k=block_k)
    columns = resources.phase_columns(problem, phases, block_k)
    assert columns == 32 and columns % block_k == 0
    copy = np.asarray(phase_major_copy(jnp.asarray(a), problem, config))
    assert copy.shape == (m, phases * columns)
    for i in range(phases):
        block = copy[:, i * columns:(i + 1) * columns]
        rows = a[:, i::phases]
        np.testing.assert_array_equal(block[:, :rows.shape[1]], rows)
        assert not block[:, rows.shape[1]:].any()
    spec = launch_spec(problem, config, hw=H200)
    assert spec.metaparams["PHASE_MAJOR_A"]


def test_gradients_through_phased_products(rng):
    """dx (NT) and dw (TN) of x @ w with an odd N: the model plans them, phases or not."""
    x = jnp.asarray(rng.standard_normal((6, 40)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((40, 57)), jnp.float32)

    def loss(matmul, x, w):
        return (matmul(x, w) ** 2).sum()

    got = jax.jit(jax.grad(lambda x, w: loss(lambda p, q: jtblas.matmul(p, q, precision="highest"), x, w),
                           argnums=(0, 1)))(x, w)
    x64, w64 = np.asarray(x, np.float64), np.asarray(w, np.float64)
    dy = 2 * x64 @ w64
    for value, reference in zip(got, (dy @ w64.T, x64.T @ dy)):
        assert relative_error(value, reference) < tolerance("float32", "float32", "ieee")


@pytest.mark.parametrize("transpose_a,transpose_b", LAYOUTS, ids=LAYOUT_IDS)
def test_shifts_only_where_rows_along_k_are_misaligned(transpose_a, transpose_b):
    for m, n in ((37, 53), (64, 53), (37, 64), (64, 64)):
        problem = Problem(m=m, n=n, k=100, transpose_a=transpose_a, transpose_b=transpose_b)
        config = phase_config(8)
        shift_a, shift_b = resources.shifted_operands(problem, config)
        assert shift_a == (transpose_a and m % 8 != 0)
        assert shift_b == (not transpose_b and n % 8 != 0)
        spec = launch_spec(problem, config, hw=H200)
        assert (spec.metaparams["SHIFT_A"], spec.metaparams["SHIFT_B"]) == (shift_a, shift_b)
        assert spec.grid[2] == 8
        # The grid covers C widened by 7 shifted rows (columns).
        rows, cols = m + 7 * shift_a, n + 7 * shift_b
        assert spec.grid[0] == -(-rows // 32) * -(-cols // 32)
        assert spec.metaparams["PHASE_MAJOR_A"] == (not transpose_a)


def test_shifted_tiles_start_on_16_byte_boundaries():
    """What the kernel's hints claim, in numpy: within a phase every row of a misaligned operand
    starts `shift` elements past a 16-byte boundary, the same shift for every row."""
    for stride, dtype in ((50257, "bfloat16"), (1602, "bfloat16"), (57, "float32")):
        problem = Problem(m=1, n=stride, k=64, dtype=dtype, out_dtype=dtype)
        for phases in resources.k_phase_counts(problem):
            vector = resources.phase_vector_bytes(problem, phases) // problem.operand_bytes
            assert resources.phase_vector_bytes(problem, phases) >= resources.MIN_ASYNC_COPY_BYTES
            spec = launch_spec(problem, phase_config(phases), hw=H200)
            assert spec.metaparams["VECTOR"] == vector and spec.metaparams["TILE_N_UNIT"] == vector
            for phase in range(phases):
                offsets = (phase + phases * np.arange(20)) * stride
                shifts = offsets % vector
                assert np.all(shifts == shifts[0])
                assert np.all((offsets - shifts) % vector == 0)


def test_needed_phases():
    assert resources.needed_k_phases(Problem(m=1, n=50257, k=1600)) == 8
    assert resources.needed_k_phases(Problem(m=1, n=50258, k=1600)) == 4
    assert resources.needed_k_phases(Problem(m=1, n=50260, k=1600)) == 2
    assert resources.needed_k_phases(Problem(m=1, n=50264, k=1600)) == 1
    assert resources.needed_k_phases(Problem(m=1, n=57, k=16, dtype="float32", out_dtype="float32")) == 4
    # B stored [N, K]: its rows run along N, not K; an odd K there is not what phases fix.
    assert resources.needed_k_phases(Problem(m=64, n=64, k=50257, transpose_b=True)) == 1
    # The counts offered: those whose rows start 4 or more bytes apart.
    assert resources.k_phase_counts(Problem(m=1, n=50257, k=1600)) == (2, 4, 8)
    assert resources.k_phase_counts(Problem(m=1, n=50258, k=1600)) == (2, 4)
    assert resources.k_phase_counts(Problem(m=1, n=57, k=16, dtype="float32", out_dtype="float32")) == (2, 4)
    assert resources.k_phase_counts(Problem(m=1, n=50264, k=1600)) == ()
    assert [resources.phase_vector_bytes(Problem(m=1, n=50257, k=1600), p) for p in (2, 4, 8)] == [4, 8, 16]


def test_config_rules():
    with pytest.raises(ValueError, match="k_phases"):
        Config(k_phases=3)
    with pytest.raises(ValueError, match="k_phases"):
        Config(k_phases=16)
    with pytest.raises(ValueError, match="split_k"):
        Config(k_phases=8, split_k=2)
    config = Config(block_m=16, block_n=128, block_k=64, num_warps=2, group_m=1, k_phases=8)
    assert config.short() == "16x128x64 w2 s3 g1 p8"
    assert Config.from_short(config.short()) == config
    assert config.k_slices == 8


def test_candidates_offer_phases_only_where_they_align_rows():
    odd = Problem(m=1, n=50257, k=1600)
    configs = candidates.candidates_for_problem(odd, H200)
    phased = [c for c in configs if c.k_phases > 1]
    assert phased and {c.k_phases for c in phased} == {2, 4, 8}
    assert all(not candidates.rejection_reasons(c, odd, H200) for c in phased)
    aligned = Problem(m=1, n=50304, k=1600)
    assert all(c.k_phases == 1 for c in candidates.candidates_for_problem(aligned, H200))
    assert candidates.rejection_reasons(phased[0], aligned, H200)


def test_model_prices_narrow_loads_unpipelined():
    """A load narrower than cp.async's 4 bytes is not pipelined: a K step waits for its loads,
    `narrow_loads_in_flight` per thread at a time."""
    odd = Problem(m=1, n=50257, k=1600)
    plain = Config(block_m=16, block_n=128, block_k=64, num_warps=2, num_stages=4, group_m=1)
    assert cost.vector_bytes(odd, plain, "b") == 2
    assert cost.loads_in_flight(plain, odd, H200) == 1
    narrow = cost.estimate(plain, odd, H200)
    loads_per_thread = 64 * 128 // 64
    constants = H200.model_constants()
    assert narrow.step_latency == pytest.approx(
        constants.memory_latency_seconds * loads_per_thread / constants.narrow_loads_in_flight)
    phased = dataclasses.replace(plain, k_phases=8)
    assert cost.vector_bytes(odd, phased, "b") == 16
    # In NN a phase's K indices of A are 8 apart: the phases run on A's phase-major copy instead,
    # loaded 16 bytes at a time, and pay for the copy.
    assert cost.vector_bytes(odd, phased, "a") == 16
    assert cost.loads_in_flight(phased, odd, H200) == 2
    assert cost.estimate(phased, odd, H200).phase_copy > H200.launch_seconds
    assert cost.estimate(plain, odd, H200).phase_copy == 0
    # Two phases: 4-byte loads, still pipelined.
    assert cost.vector_bytes(odd, dataclasses.replace(plain, k_phases=2), "b") == 4
    assert cost.loads_in_flight(dataclasses.replace(plain, k_phases=2), odd, H200) == 2
    # In TN A's rows run along K too (aligned here): both operands load 16 bytes, pipelined.
    weight_gradient = Problem(m=64, n=50257, k=1600, transpose_a=True)
    assert [cost.vector_bytes(weight_gradient, phased, operand) for operand in "ab"] == [16, 16]
    assert cost.loads_in_flight(phased, weight_gradient, H200) == 2


@pytest.mark.parametrize("m", [1, 16, 64, 128])
def test_model_picks_phases_for_decode_of_an_odd_vocabulary(m):
    """The decode lm head of GPT-2 (50257 rows of 1600): the plain kernel's 2-byte loads are
    not pipelined; phases load 4 to 16 bytes and the plan takes them (no copy of the weight)."""
    problem = Problem(m=m, n=50257, k=1600)
    plan = model.plan_for_problem(problem, H200)
    assert plan.config.k_phases > 1 and not plan.repacks, plan


def test_phased_kernel_lowers_for_cuda():
    """jax-triton's CUDA lowering compiles the phased kernel (both shifts, the sum) to PTX."""
    config = phase_config(8, block_m=64, block_n=64, block_k=32, num_stages=3)
    for layout in ("NN", "TN"):
        a, b = stored_shapes(37, 53, 200, layout, jnp.bfloat16)
        text = lower_for_cuda(lambda x, y, layout=layout: jtblas.matmul(
            x, y, transpose_a=layout[0] == "T", config=config), a, b)
        assert "triton" in text


def test_repacking_is_weighed_against_phases():
    """Phases write k_phases fp32 partials at shifted (element-wide) stores: at a training token
    count the weight gradient of an odd vocabulary (dy's rows misaligned) weighs a padded copy of
    dy against them, and takes whichever predicts less (by the 5% repacking margin)."""
    plan = model.plan_for_problem(Problem(m=768, n=50257, k=8192, transpose_a=True), H200)
    assert plan.plain_config.k_phases > 1
    assert "copying B" in plan.reason
    assert plan.repacks == (plan.config.k_phases == 1), plan


def test_phase_tiles_whose_shifted_copies_would_spill_are_not_candidates():
    """One thread issues block_n · block_k · bytes / (phase width · threads) copies of a shifted B
    per stage; beyond `MAX_SHIFTED_COPIES_PER_THREAD` their addresses spill (tests/ops/
    test_cuda_lowering.py holds the compiler to it), so such a twin is no candidate and the rule
    says why, while narrower tiles, more warps or wider copies keep every phase count."""
    odd = Problem(m=1, n=50257, k=1280)
    spilling = Config(block_m=16, block_n=256, block_k=64, num_warps=2, num_stages=3, group_m=1, k_phases=2)
    assert resources.shifted_copies_per_thread(spilling, odd) == 64 * 256 * 2 // 4 // 64
    reasons = candidates.rejection_reasons(spilling, odd, H100)
    assert any("128 copies of the shifted operand per stage, over 32" in r for r in reasons), reasons
    space = candidates.candidates_for_problem(odd, H100)
    assert spilling not in space
    assert all(resources.shifted_copies_per_thread(c, odd) <= resources.MAX_SHIFTED_COPIES_PER_THREAD for c in space)
    assert {c.k_phases for c in space} == {1, 2, 4, 8}
    assert dataclasses.replace(spilling, k_phases=8) in space  # 16-byte copies: 32 per thread
    assert resources.shifted_copies_per_thread(Config(block_n=256, block_k=64), odd) == 0  # no phases


def test_tiles_whose_narrow_copies_would_spill_are_not_candidates():
    """Without K phases, rows 4-byte aligned load through 4-byte async copies with an address
    each: a 16x128x128 2-warp tile of 6x4858x12954 issues 144 per thread per stage (16 of A, 128 of
    B), over `MAX_NARROW_COPIES_PER_THREAD` (tests/ops/test_cuda_lowering.py holds the compiler to
    it), so neither it nor its splits are candidates and the rule says why, while its K-phase twins
    (16-byte copies) and tiles of fewer copies stay; 16-byte aligned rows count none."""
    odd = Problem(m=6, n=4858, k=12954)
    assert resources.narrow_copies_per_thread(odd, 16, 128, 128, 2) == 16 + 128
    assert resources.narrow_copies_per_thread(Problem(m=6, n=4864, k=12960), 16, 128, 128, 2) == 0
    spilling = Config(block_m=16, block_n=128, block_k=128, num_warps=2, num_stages=3, group_m=1, split_k=6)
    reasons = candidates.rejection_reasons(spilling, odd, H100)
    assert any("144 copies narrower than 16 bytes per stage" in r for r in reasons), reasons
    space = candidates.candidates_for_problem(odd, H100)
    assert spilling not in space and dataclasses.replace(spilling, split_k=1) not in space
    assert all(resources.narrow_copies_per_thread(odd, c.block_m, c.block_n, c.block_k, c.num_warps)
               <= resources.MAX_NARROW_COPIES_PER_THREAD for c in space if c.k_phases == 1 and not c.tma)
    phased = dataclasses.replace(spilling, num_warps=4, num_stages=4, split_k=1, k_phases=4)
    assert phased in space and candidates.rejection_reasons(phased, odd, H100) == []
    within = dataclasses.replace(spilling, num_warps=4, num_stages=4, split_k=1)  # 8 + 64 copies
    assert resources.narrow_copies_per_thread(odd, 16, 128, 128, 4) == 72 and within not in space
    assert dataclasses.replace(within, block_k=64) in space  # 4 + 32
