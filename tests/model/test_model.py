"""The analytical model on synthetic hardware (no GPU): feasibility, determinism, monotonicity,
explanations, anchors on known shapes, speed, the CLI, and one CPU-interpreter matmul."""

import ast
import collections
import dataclasses
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jtblas
from jtblas import cli, hardware, model
from jtblas.config import OPERAND_DTYPE_BYTES, Config, Problem
from jtblas.model import candidates, cost, resources
from jtblas.model.select import rank

ROOT = pathlib.Path(__file__).resolve().parents[2]
HARDWARE = sorted(hardware.BUILTIN)
DTYPES = sorted(OPERAND_DTYPE_BYTES)
# Growth that keeps every operand's row alignment and the K-tail class (K mod block_k) of every
# candidate: multiples of the largest block_k. Monotonicity is promised at equal alignment only:
# an odd K really is slower than the next multiple of 8 (seen 2026-11).
ALIGNED_STEP = max(candidates.BLOCK_K_SIZES)

sizes = st.one_of(st.integers(1, 64), st.integers(1, 20000))


@st.composite
def problems(draw) -> tuple[Problem, hardware.Hardware]:
    dtype = draw(st.sampled_from(DTYPES))
    problem = Problem(
        m=draw(sizes), n=draw(sizes), k=draw(sizes), dtype=dtype,
        out_dtype=draw(st.sampled_from(DTYPES)),
        transpose_a=draw(st.booleans()), transpose_b=draw(st.booleans()),
        input_precision=draw(st.sampled_from(["tf32", "ieee"])),
    )
    return problem, hardware.BUILTIN[draw(st.sampled_from(HARDWARE))]


@settings(max_examples=60, deadline=None)
@given(problems())
def test_pick_is_feasible_and_among_candidates(case):
    problem, hw = case
    space = model.candidates_for_problem(problem, hw)
    pick = model.select_for_problem(problem, hw)
    assert pick in space
    assert len(space) == len(set(space))
    # The space stays small enough to rank in milliseconds: ≤ ~470 plain configs (A100, 2-warp
    # 16-row tiles since 2026-12-01), each with at most six split-K variants (the factors whose
    # grid fits while four times it does not, `_split_arrays`: at most 3 to 8, or 2 to 7), one
    # TMA twin, and where rows along K are misaligned a K-phase twin per phase count that loads
    # them 4 bytes or more at a time (at most 2, 4 and 8). A tile whose narrow copies would spill
    # without phases (`resources.narrow_copies_per_thread`) keeps only its K-phase twins.
    plain = [config for config in space if config.split_k == 1 and not config.tma and config.k_phases == 1]
    assert len(plain) <= 500
    variants = collections.Counter(dataclasses.replace(config, split_k=1, tma=False, k_phases=1) for config in space)
    assert set(plain) <= set(variants)
    for base in set(variants) - set(plain):
        assert all(config.k_phases > 1 for config in space
                   if dataclasses.replace(config, split_k=1, tma=False, k_phases=1) == base)
        assert resources.narrow_copies_per_thread(problem, base.block_m, base.block_n, base.block_k,
                                                  base.num_warps) > resources.max_narrow_copies_per_thread(problem)
    assert max(variants.values()) <= 1 + 6 + 1 + len(resources.k_phase_counts(problem))
    assert {config.k_phases for config in space} <= {1, *resources.k_phase_counts(problem)}
    assert model.rejection_reasons(pick, problem, hw) == []
    assert resources.fit_errors(pick, problem, hw) == []
    assert resources.registers_per_thread(pick) <= hw.max_regs_per_thread
    assert resources.programs_per_sm(pick, problem, hw) >= 1
    assert pick.split_k == 1 or candidates.split_k_searched(problem, hw)
    if problem.m <= 16:
        assert pick.block_m <= 64


@settings(max_examples=40, deadline=None)
@given(problems())
def test_selection_is_deterministic(case):
    problem, hw = case
    first = model.select_for_problem(problem, hw)
    assert model.select_for_problem(problem, hw) == first
    model.clear_cache()
    assert model.select_for_problem(problem, hw) == first
    assert model.candidates_for_problem(problem, hw) == model.candidates_for_problem(problem, hw)


@settings(max_examples=30, deadline=None)
@given(problems(), st.sampled_from("mnk"), st.integers(1, 8))
def test_predicted_time_grows_with_every_dimension(case, dim, steps):
    """The best predicted time over a fixed candidate list, and each config's own time, never fall
    as a dimension grows. (The list itself may grow with the problem: split-K variants need two
    K blocks per split, so a larger K can admit a config the smaller problem was not offered.)"""
    problem, hw = case
    bigger = Problem(**{**_fields(problem), dim: getattr(problem, dim) + steps * ALIGNED_STEP})
    offered = model.candidates_for_problem(problem, hw)
    before = min(model.estimate(c, problem, hw).predicted_seconds for c in offered)
    after = min(model.estimate(c, bigger, hw).predicted_seconds for c in offered)
    assert before == rank(problem, hw)[0].predicted_seconds
    assert 0 < before <= after
    for config in offered[::7]:  # per fixed config, too
        small = model.estimate(config, problem, hw).predicted_seconds
        large = model.estimate(config, bigger, hw).predicted_seconds
        assert 0 < small <= large, config.short()


def _fields(problem: Problem) -> dict:
    return {name: getattr(problem, name) for name in Problem.__dataclass_fields__}


@pytest.mark.parametrize("name", HARDWARE)
def test_hardware_descriptions_are_consistent(name):
    hw = hardware.BUILTIN[name]
    assert hw.name == name and hardware.get(name.upper()) is hw
    assert hw.smem_per_block <= hw.smem_per_sm
    assert hw.max_regs_per_thread == 255 and hw.regs_per_sm == 65536
    assert hw.l2_bytes_per_s > hw.dram_bytes_per_s
    assert hw.wgmma == (hw.compute_capability >= (9, 0))
    assert hw.tensor_flops["bfloat16"] == hw.tensor_flops["float16"] > hw.tensor_flops["float32"]
    assert hw.tensor_flops["float32"] > hw.fp32_flops
    # Sustained tensor rate per SM per clock stays under the dense datasheet peak
    # (4096 FLOP/clock/SM on Hopper, 2048 on Ampere, for 16-bit operands).
    per_clock = hw.tensor_flops["bfloat16"] / hw.sm_count / hw.clock_hz
    assert per_clock <= (4096 if hw.wgmma else 2048)
    assert 1e-6 <= hw.launch_seconds <= 2e-5


def test_candidates_match_the_rules():
    """The fast enumeration equals the full product filtered by `rejection_reasons`."""
    rng = np.random.default_rng(0)
    # Three random shapes, and three with M < 128 (mma.sync tiles, their swapped and TMA twins).
    for index in range(6):
        m, n, k = (int(x) for x in rng.integers(1, 5000, size=3))
        m = m if index < 3 else 1 + m % 127
        problem = Problem(m=m, n=n, k=k, dtype=str(rng.choice(DTYPES)))
        hw = hardware.BUILTIN[str(rng.choice(HARDWARE))] if index < 3 else hardware.BUILTIN[HARDWARE[index % 3]]
        assert _kept_by_the_rules(problem, hw) == model.candidates_for_problem(problem, hw)


def _kept_by_the_rules(problem: Problem, hw) -> list[Config]:
    """Every config of the search's grid that `rejection_reasons` keeps, in the search's order."""
    everything = [
        Config(block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=s, group_m=g, split_k=sk,
               swap_ab=swap, tma=tma, k_phases=phases)
        for bm in candidates.BLOCK_SIZES for bn in candidates.BLOCK_SIZES
        for bk in candidates.BLOCK_K_SIZES for w in candidates.NUM_WARPS
        for s in candidates.NUM_STAGES for g in candidates.GROUP_SIZES
        for sk in (1, *candidates.SPLIT_K_FACTORS) for swap in (False, True) for tma in (False, True)
        for phases in (1, *resources.k_phase_counts(problem))
        if not (tma and (sk > 1 or swap)) and not (phases > 1 and (sk > 1 or tma))
    ]
    return sorted((c for c in everything if not model.rejection_reasons(c, problem, hw)), key=candidates._order)


@pytest.mark.parametrize("gpu", ["h100", "a100"])
def test_fma_tiles_keep_their_registers_within_what_ptxas_holds(gpu):
    """fp32 with input_precision "ieee" runs on the FMA units, whose tiles hold about twice their
    accumulators in registers (`resources.fma_tile_spills`; the compiler side is held in
    tests/ops/test_cuda_lowering.py): no FMA candidate has more than 64 accumulators per thread or
    2048 multiply-adds per thread per K step, the fast enumeration still equals the rules, and
    tf32 keeps the 128-accumulator tiles. Misaligned rows' narrow copies keep to the FMA tile's
    lower limit (`resources.MAX_FMA_NARROW_COPIES_PER_THREAD`)."""
    hw = hardware.get(gpu)
    ieee = Problem(m=3000, n=2000, k=1000, dtype="float32", out_dtype="float32", input_precision="ieee")
    found = model.candidates_for_problem(ieee, hw)
    assert _kept_by_the_rules(ieee, hw) == found
    accumulators = [resources.accumulator_registers_per_thread(c) for c in found]
    assert max(accumulators) == resources.MAX_FMA_ACCUMULATORS_PER_THREAD
    assert max(count * c.block_k for count, c in zip(accumulators, found)) == resources.MAX_FMA_PRODUCTS_PER_THREAD
    spilling = Config(block_m=128, block_n=128, block_k=32, num_warps=4, num_stages=2)
    assert any("FMA" in reason for reason in model.rejection_reasons(spilling, ieee, hw))
    tf32 = dataclasses.replace(ieee, input_precision="tf32")
    assert max(resources.accumulator_registers_per_thread(c) for c in model.candidates_for_problem(tf32, hw)) == 128
    misaligned = dataclasses.replace(ieee, n=2001)
    found = model.candidates_for_problem(misaligned, hw)
    assert _kept_by_the_rules(misaligned, hw) == found
    copies = [resources.narrow_copies_per_thread(misaligned, c.block_m, c.block_n, c.block_k, c.num_warps)
              for c in found if c.k_phases == 1]
    assert max(copies) == resources.MAX_FMA_NARROW_COPIES_PER_THREAD


@pytest.mark.parametrize("transpose_a", [False, True], ids=["NN", "TN"])
def test_tf32_wgmma_tiles_copy_transposed_operands_within_the_limit_and_without_k_phases(transpose_a):
    """A tf32 product's fp32 operands stored M- or N-major are copied one element at a time by the
    pointer kernel's wgmma tiles (`resources.transposed_operands`; the compiler side is held in
    tests/ops/test_cuda_lowering.py): no such candidate issues more than
    `MAX_TRANSPOSED_COPIES_PER_THREAD` per thread per stage or has K phases (rows misaligned here,
    so the phases are searched), and the fast enumeration still equals the rules. bf16 keeps both."""
    hw = hardware.H100
    tf32 = Problem(m=96, n=3001, k=2000, dtype="float32", out_dtype="float32", transpose_a=transpose_a)
    assert resources.k_phase_counts(tf32)
    found = model.candidates_for_problem(tf32, hw)
    assert _kept_by_the_rules(tf32, hw) == found
    transposing = [c for c in found if resources.uses_wgmma(c, tf32, hw) and not c.tma]
    assert transposing and all(c.k_phases == 1 for c in transposing)
    assert max(resources.transposed_copies_per_thread(tf32, c.block_m, c.block_n, c.block_k, c.num_warps)
               for c in transposing) <= resources.MAX_TRANSPOSED_COPIES_PER_THREAD
    over = Config(block_m=64, block_n=256, block_k=32, num_warps=4, num_stages=4, group_m=8)
    assert any("transposed" in reason for reason in model.rejection_reasons(over, tf32, hw))
    assert any(c.k_phases > 1 and not resources.uses_wgmma(c, tf32, hw) for c in found)  # mma.sync keeps them
    bf16 = dataclasses.replace(tf32, dtype="bfloat16", out_dtype="bfloat16", input_precision="tf32")
    kept = model.candidates_for_problem(bf16, hw)
    assert over in kept and any(c.k_phases > 1 and resources.uses_wgmma(c, bf16, hw) for c in kept)


@pytest.mark.parametrize("problem,gpu", [
    (Problem(m=4096, n=4096, k=4096), "h200"),  # TMA twins
    (Problem(m=1, n=3584, k=18944), "h200"),  # swapped twins, split-K
    (Problem(m=768, n=50257, k=1600), "h200"),  # K phases (B's rows along K misaligned)
    (Problem(m=255, n=333, k=65536, dtype="float32", out_dtype="float32", input_precision="ieee"), "a100"),
    (Problem(m=128, n=128, k=64, transpose_b=True, batch=32), "h100"),
])
def test_ranking_all_at_once_equals_one_config_at_a_time(problem, gpu):
    """`select` ranks every candidate at once (`cost.estimate_arrays` on `candidate_arrays`, whose
    programs per SM and wgmma come from the search): each candidate's terms equal `cost.estimate`
    of its Config alone, and `winner` is `rank`'s first."""
    hw = hardware.get(gpu)
    ranked = rank(problem, hw)
    for estimate in ranked:
        assert estimate == cost.estimate(estimate.config, problem, hw, hw.model_constants())
    assert model.select.winner(problem, hw) == ranked[0]


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_compute_bound_ties_go_to_the_tile_reading_less_shared_memory(gpu):
    """256x128x64 and 128x256x64 on 8 warps tie when the tensor cores bind; the first reads B once
    per 64-row MMA block (20% more shared-memory traffic per step) and ran 1.14x its prediction
    over 30 H200 products where its twin ran 1.04-1.06x: a compute-bound tie goes to the smaller
    shared-memory time. `cost.compute_bound_arrays` is `Estimate.bound == "compute"`."""
    hw = hardware.get(gpu)
    for problem in (Problem(m=2048, n=1600, k=6400), Problem(m=2048, n=50257, k=1280, ldb=50304)):
        ranked = rank(problem, hw)
        wide = next(e for e in ranked if e.config.short() == "128x256x64 w8 s4 g8")
        tall = next(e for e in ranked if e.config.short() == "256x128x64 w8 s4 g8")
        assert wide.predicted_seconds == tall.predicted_seconds and tall.step_smem > wide.step_smem
        assert wide.bound == tall.bound == "compute"
        assert ranked.index(wide) < ranked.index(tall) and model.select.winner(problem, hw) == ranked[0]
        found = candidates.candidate_arrays(problem, hw)
        terms = cost.estimate_arrays(found, problem, hw, hw.model_constants())
        flags = cost.compute_bound_arrays(terms)
        for index, estimate in enumerate(cost.estimates_of(found, terms)):
            assert flags[index] == (estimate.bound == "compute"), estimate.config.short()


def test_busy_sm_rates_speed_up_only_grids_smaller_than_the_gpu():
    """`Hardware.busy_sm_rates` (what `jtblas calibrate` measures): a one-wave grid on 72 of 132
    SMs runs its clocked SM-side rates faster by the interpolated rate; a grid that fills the GPU,
    and the memory side, are unchanged; the built-ins have no curve."""
    assert all(hw.busy_sm_rates == () for hw in (hardware.H200, hardware.H100, hardware.A100))
    curve = ((0.25, 1.2), (0.5, 1.15), (1.0, 1.0))
    fast = dataclasses.replace(hardware.H200, busy_sm_rates=curve, source="a test")
    config = jtblas.Config(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4)
    partial = Problem(m=3072, n=768, k=8192, transpose_a=True)  # 72 tiles
    full = Problem(m=4096, n=4096, k=4096)  # 512 tiles
    rate = 1.15 + (72 / 132 - 0.5) / 0.5 * (1.0 - 1.15)
    before, after = (cost.estimate(config, partial, hw) for hw in (hardware.H200, fast))
    assert after.active_sms == 72 and after.step_mma == pytest.approx(before.step_mma / rate, rel=1e-12)
    assert after.step_smem == pytest.approx(before.step_smem / rate, rel=1e-12)
    assert after.sm < before.sm and (after.dram, after.l2) == (before.dram, before.l2)
    assert cost.estimate(config, full, fast) == cost.estimate(config, full, hardware.H200)
    with pytest.raises(ValueError, match="busy_sm_rates"):
        dataclasses.replace(hardware.H200, busy_sm_rates=((1.0, 1.0), (0.5, 1.1)))


def test_hopper_rules():
    hw = hardware.H200
    problem = Problem(m=4096, n=4096, k=4096)
    space = model.candidates_for_problem(problem, hw)
    assert all(c.block_m >= 64 and c.num_warps % 4 == 0 and c.num_stages >= 3 for c in space)
    assert all(resources.uses_wgmma(c, problem, hw) for c in space)
    assert Config(block_m=256, block_n=256, block_k=64, num_warps=8, num_stages=3) not in space
    spill = Config(block_m=256, block_n=256, block_k=32, num_warps=8, num_stages=2)
    assert any("spill" in reason for reason in model.rejection_reasons(spill, problem, hw))
    # Small M may use mma.sync tiles (block_m 16/32), never a tile taller than 64 rows.
    decode = model.candidates_for_problem(Problem(m=16, n=12288, k=4096), hw)
    assert {c.block_m for c in decode} == {16, 32, 64}


def test_explain_ranks_and_composes():
    result = jtblas.explain(1500, 4501, 3399, hardware="h200")
    assert result.config == jtblas.select(1500, 4501, 3399, hardware="h200")
    # Ranked: the candidates of the problem the kernel runs (repacked: aligned rows, so the TMA
    # kernel's twins too).
    assert len(result.ranked) == len(model.candidates_for_problem(result.plan.kernel_problem, hardware.H200))
    times = [e.predicted_seconds for e in result.ranked]
    assert times == sorted(times) and times[0] > 0
    for e in result.ranked[:20]:
        assert e.compose() == pytest.approx(e.predicted_seconds, rel=1e-12)
        assert e.sm == max(e.sm_throughput, e.sm_latency)
        assert e.memory == pytest.approx(max(e.dram, e.l2) + e.memory_latency)
        assert e.tile_throughput == pytest.approx(e.k_steps * e.step + e.epilogue)
        assert e.step == pytest.approx(max(e.step_mma, e.step_smem, e.step_load) + e.step_overhead)
        assert e.waves == -(-e.tiles // (hardware.H200.sm_count * e.programs_per_sm))
        assert 0 <= e.padding_waste < 1 and 0 <= e.l2_hit_rate <= 1
    text = result.format(top=3)
    assert result.config.short() in text and "wins" in text
    assert len(text.splitlines()) == 1 + 1 + 1 + 3 + 1  # problem, hardware source, header, rows, why
    assert text.splitlines()[1] == f"hardware: {hardware.H200.source}"
    assert str(result) == result.format(top=10)


@pytest.mark.parametrize("name", HARDWARE)
@pytest.mark.parametrize("m", [1, 8, 16])
def test_small_m_gets_short_tiles(name, m):
    config = jtblas.select(m, 12288, 4096, hardware=name)
    assert config.block_m <= 64
    assert config.block_m <= 16 or hardware.BUILTIN[name].wgmma


@pytest.mark.parametrize("size", [2048, 4096, 8192, 16384])
def test_large_square_bf16_gets_a_big_tile(size):
    config = jtblas.select(size, size, size, dtype="bf16", hardware="h200")
    assert config.block_m * config.block_n >= 128 * 128
    assert config.num_stages >= 3 and config.block_k >= 32


def test_anchor_shapes_on_h200():
    big = jtblas.select(4096, 4096, 4096, hardware="h200")
    assert (big.block_m, big.block_n) in {(128, 256), (256, 128)} and big.num_warps == 8
    decode = jtblas.select(16, 12288, 4096, hardware="h200")
    assert decode.block_m in (16, 64) and decode.block_n * decode.block_k >= 64 * 64
    # Deep K, few tiles: split-K keeps many SMs busy (tests/ops/test_split_k.py checks more).
    deep = jtblas.select(256, 256, 65536, hardware="h200")
    assert (256 // deep.block_m) * (256 // deep.block_n) * deep.split_k >= 32


def test_api_accepts_dtypes_and_names():
    import jax.numpy as jnp

    by_type = jtblas.select(512, 512, 512, dtype=jnp.bfloat16, hardware="h100")
    assert by_type == jtblas.select(512, 512, 512, dtype="bf16", hardware=hardware.H100)
    highest = jtblas.select(512, 512, 512, dtype=np.float32, precision="highest", hardware="a100")
    assert highest in jtblas.candidates(512, 512, 512, dtype=np.float32, precision="highest", hardware="a100")
    with pytest.raises(TypeError):
        jtblas.select(8, 8, 8, dtype="int8", hardware="h200")
    with pytest.raises(ValueError):
        jtblas.select(0, 8, 8, hardware="h200")
    with pytest.raises(ValueError):
        jtblas.select(8, 8, 8, hardware="b200")


def test_uncached_select_is_fast():
    rng = np.random.default_rng(1)
    shapes = [tuple(int(x) for x in rng.integers(1, 20000, size=3)) for _ in range(50)]
    elapsed = []
    for m, n, k in shapes:
        model.clear_cache()
        start = time.perf_counter()
        model.select_for_problem(Problem(m=m, n=n, k=k), hardware.H200)
        elapsed.append(time.perf_counter() - start)
    median_us = statistics.median(elapsed) * 1e6
    print(f"uncached select: median {median_us:.0f} µs, max {max(elapsed) * 1e6:.0f} µs over 50 shapes")
    assert median_us < 50_000


def test_model_package_imports_neither_jax_nor_triton():
    for path in sorted((ROOT / "jtblas" / "model").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for name in names:
                assert name.split(".")[0] not in ("jax", "jaxlib", "triton", "jax_triton"), (path, name)


def test_cli_explain_prints_the_winner(capsys):
    assert cli.main(["explain", "4096", "4096", "4096", "--gpu", "h200", "--top", "3"]) == 0
    out = capsys.readouterr().out
    winner = jtblas.select(4096, 4096, 4096, hardware="h200")
    assert winner.short() in out and "wins" in out
    assert cli.main(["explain", "16", "12288", "4096", "--dtype", "fp16", "--layout", "nt",
                     "--gpu", "a100"]) == 0
    assert "16x12288x4096 float16 NT on a100" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["explain", "0", "1", "1"], ["explain", "4", "4"],
                                  ["explain", "4", "4", "4", "--dtype", "int8"],
                                  ["explain", "4", "4", "4", "--gpu", "v100"], ["frobnicate"]])
def test_cli_rejects_bad_input(argv):
    with pytest.raises(SystemExit) as error:
        cli.main(argv)
    assert error.value.code == 2


def test_cli_calibrate_without_gpu(capsys):
    from tests.conftest import cuda_available

    if cuda_available():
        pytest.skip("a GPU is present")
    assert cli.main(["calibrate"]) == 1
    assert "no CUDA GPU found, nothing to calibrate" in capsys.readouterr().err


def test_python_dash_m_jtblas():
    run = subprocess.run([sys.executable, "-m", "jtblas", "explain", "64", "64", "64", "--top", "2",
                          "--gpu", "h200"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "wins" in run.stdout


def test_matmul_with_model_config_on_cpu(rng):
    m, n, k = 96, 80, 112
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    config = jtblas.select(m, n, k, dtype=np.float32)
    assert config.block_m <= 128 and config.block_n <= 128 and config.block_k <= 128
    assert resources.fit_errors(config, Problem(m=m, n=n, k=k, dtype="float32"), hardware.detect()) == []
    out = np.asarray(jtblas.matmul(a, b))
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(out - want) / np.linalg.norm(want) < 1e-5


def test_cost_terms_respond_to_their_causes():
    hw = hardware.H200
    config = Config(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3)
    aligned = cost.estimate(config, Problem(m=4096, n=4096, k=4096), hw)
    odd = cost.estimate(config, Problem(m=4096, n=4096, k=4095), hw)
    # NN: A is read along K; a masked K tail makes its loads one element wide (8x the cost for
    # bf16); B, two thirds of the bytes of a 128x256 tile, stays 16 bytes wide.
    assert odd.step_load == pytest.approx(aligned.step_load * (128 * 8 + 256) / (128 + 256))
    few = cost.estimate(config, Problem(m=128, n=256, k=4096), hw)
    assert few.tiles == 1 and few.active_sms == 1
    deeper = Config(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4)
    assert cost.estimate(deeper, Problem(m=4096, n=4096, k=4096), hw).step_latency < aligned.step_latency
    mma_sync = Config(block_m=32, block_n=64, block_k=64, num_warps=4, num_stages=3)
    wgmma = Config(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=3)
    decode = Problem(m=16, n=4096, k=4096)
    per_flop = cost.mma_seconds_per_flop
    assert per_flop(mma_sync, decode, hw) > per_flop(wgmma, decode, hw)
    assert per_flop(mma_sync, decode, hardware.A100) == per_flop(wgmma, decode, hardware.A100)


def test_the_persistent_tma_kernel_fills_its_pipeline_once_per_program():
    hw = hardware.H100
    pointer = Config(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=4)
    tma = dataclasses.replace(pointer, tma=True)
    for m, tiles_per_sm in ((128 * 22, 1), (128 * 22 * 3, 3)):  # 768 columns: 6 tiles a row, 132 SMs
        problem = Problem(m=m, n=768, k=768)
        plain, persistent = cost.estimate(pointer, problem, hw), cost.estimate(tma, problem, hw)
        assert plain.tiles_per_sm == persistent.tiles_per_sm == tiles_per_sm
        assert plain.programs_per_sm == persistent.programs_per_sm == 1
        loop = plain.tile_latency - plain.fill - plain.epilogue
        # The pointer kernel's programs each start cold; the TMA kernel's one program per SM runs
        # its tiles in one flattened loop, so fill and epilogue sit once on its chain.
        assert plain.sm_latency == pytest.approx(tiles_per_sm * plain.tile_latency)
        expected = persistent.fill + persistent.epilogue + tiles_per_sm * (
            persistent.tile_latency - persistent.fill - persistent.epilogue)
        assert persistent.sm_latency == pytest.approx(expected)
        assert loop > 0 and persistent.fill > 0
    assert persistent.sm_latency < plain.sm_latency - 2 * (plain.fill + plain.epilogue) + 1e-9
    # A batch of 132 products of one tile row each: one grid of min(tiles, resident) programs over the
    # whole batch, so each program walks 6 tiles and starts cold once, as for one product of 792 tiles.
    batched = cost.estimate(tma, Problem(m=128, n=768, k=768, batch=132), hw)
    assert batched.tiles_per_sm == 6
    assert batched.sm_latency == pytest.approx(batched.fill + batched.epilogue + 6 * (
        batched.tile_latency - batched.fill - batched.epilogue))
    assert batched.sm_latency < 6 * batched.tile_latency - 5 * (batched.fill + batched.epilogue) + 1e-9


def test_an_activation_runs_at_the_rate_its_resident_warps_can_issue():
    hw, constants = hardware.H100, cost.DEFAULT_CONSTANTS
    problem = Problem(m=2048, n=3072, k=768, bias_dtype="bfloat16", activation="gelu_tanh")
    relu = dataclasses.replace(problem, activation="relu")
    extra = {}
    for warps in (4, 8):
        config = Config(block_m=128, block_n=128, block_k=64, num_warps=warps, num_stages=5, tma=True)
        gelu, plain = cost.estimate(config, problem, hw), cost.estimate(config, relu, hw)
        assert gelu.programs_per_sm == 1
        extra[warps] = gelu.epilogue - plain.epilogue
    # tanh GELU over relu at the SM's fp32 rate, 128x128 elements a tile: with 8 warps (two per
    # scheduler) the full rate, with 4 (one per scheduler) half of it.
    flops = (cost.ACTIVATION_FLOPS["gelu_tanh"] - cost.ACTIVATION_FLOPS["relu"]) * 128 * 128
    full_rate = hw.fp32_flops / hw.sm_count
    assert constants.epilogue_warps_per_scheduler == 2
    assert extra[8] == pytest.approx(flops / full_rate)
    assert extra[4] == pytest.approx(2 * flops / full_rate)
    # explain names the epilogue, its work per tile and the winner's issue rate.
    explanation = model.explain_problem(problem, hw)
    win = explanation.winner
    resident = win.config.num_warps * min(win.programs_per_sm, win.tiles_per_sm)
    assert win.activation_issue_rate == min(1.0, resident / 8)
    assert win.epilogue_work > 0
    words = (f"fused epilogue (bias, gelu_tanh): {win.epilogue_work * 1e6:.2f} µs of reads and activation per "
             f"tile, the activation at {100 * win.activation_issue_rate:.0f}% of the SM's fp32 rate")
    assert words in explanation.why()
    split = model.explain_problem(dataclasses.replace(problem, m=64, n=768, k=6304, residual_dtype="bfloat16"), hw)
    assert split.config.k_slices > 1
    assert "Its epilogue (bias, gelu_tanh, residual) runs in the kernel that sums the partials." in split.why()
    plain = model.explain_problem(Problem(m=2048, n=3072, k=768), hw).why()
    assert "fused epilogue" not in plain and "Its epilogue" not in plain


def test_model_reads_back_the_partial_sectors_of_a_misaligned_c():
    """C's rows not 16-byte aligned (bf16 over 50257 columns): each tile row's run of block_n
    columns starts and ends inside a 32-byte sector the neighbouring tile writes too, and DRAM reads
    those two back: C costs (1 + 64 / run bytes) of its size. So the weight gradient of an odd
    vocabulary at few tokens, which writes C and reads almost nothing, takes 256-column tiles
    (measured on an H100 through JAX, 2026-12-06: 88 µs against 115 with 64 columns)."""
    hw = hardware.H100
    narrow = Config(block_m=256, block_n=64, block_k=16, num_warps=4, num_stages=3, group_m=8)
    wide = Config(block_m=64, block_n=256, block_k=16, num_warps=4, num_stages=3, group_m=8)
    odd, aligned = Problem(m=1280, n=50257, k=16, transpose_a=True), Problem(m=1280, n=50304, k=16, transpose_a=True)
    c_bytes = 1280 * 50257 * 2
    gap = cost.estimate(narrow, odd, hw).dram_bytes - cost.estimate(wide, odd, hw).dram_bytes
    aligned_gap = cost.estimate(narrow, aligned, hw).dram_bytes - cost.estimate(wide, aligned, hw).dram_bytes
    assert gap - aligned_gap == pytest.approx(c_bytes * (64 / 128 - 64 / 512), rel=0.01)
    assert abs(aligned_gap) < 0.05 * c_bytes  # the operands, not C
    assert jtblas.select(1280, 50257, 16, transpose_a=True, hardware=hw).block_n == 256


def test_two_warps_only_for_16_row_tiles():
    """2-warp candidates exist for decode products and are all 16 rows tall; a 32-row 2-warp tile
    is rejected with the reason (it ran 0.63x the 4-warp pick at 64x4096x4096 on the H200)."""
    decode = jtblas.candidates(16, 4096, 4096, dtype="bf16", hardware="h200")
    two = [c for c in decode if c.num_warps == 2]
    assert two and all(c.block_m == 16 for c in two)
    assert all(c.block_m == 16 for c in jtblas.candidates(64, 4096, 4096, dtype="bf16", hardware="h200")
               if c.num_warps == 2)
    reasons = model.rejection_reasons(jtblas.Config(block_m=32, block_n=64, block_k=256, num_warps=2, num_stages=4),
                                      jtblas.Problem(m=64, n=4096, k=4096), hardware.H200)
    assert any("2 warps" in reason for reason in reasons)


def test_one_mma_tall_warps_alone_take_turns():
    """A 16-row mma.sync tile of at most 4 warps runs its MMAs and shared-memory reads one after
    the other in its own K step (the latency chain), not in the SM's resource step; wgmma tiles
    and taller warp tiles overlap them. A long-K decode product either splits, so that more SMs
    stream, or runs a swapped tile (wgmma: no turns)."""
    hw = hardware.H200
    decode = Problem(m=1, n=3584, k=18944)
    lone = cost.estimate(Config(block_m=16, block_n=64, block_k=256, num_warps=2, num_stages=5), decode, hw)
    assert lone.step == pytest.approx(max(lone.step_mma, lone.step_smem, lone.step_load) + lone.step_overhead)
    assert lone.step_chain == pytest.approx(max(lone.step_mma + lone.step_smem, lone.step_load)
                                            + lone.step_overhead)
    assert lone.step_chain > lone.step and lone.bound == "mma+smem"
    assert lone.sm_latency > lone.k_steps * lone.step_chain
    wgmma = cost.estimate(Config(block_m=64, block_n=64, block_k=128, num_warps=4, num_stages=5), decode, hw)
    assert wgmma.step_chain == wgmma.step
    tall = Config(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3)
    assert not cost.mma_and_smem_take_turns(tall, Problem(m=4096, n=4096, k=4096), hardware.A100)
    eight = Config(block_m=16, block_n=256, block_k=64, num_warps=8, num_stages=3)
    assert not cost.mma_and_smem_take_turns(eight, decode, hw)
    long_k = jtblas.select(1, 3584, 18944, dtype="bf16", hardware="h200")
    assert long_k.split_k > 1 or not cost.mma_and_smem_take_turns(long_k, decode, hw)
    assert jtblas.select(16, 4096, 4096, dtype="bf16", hardware="h200").split_k == 1
