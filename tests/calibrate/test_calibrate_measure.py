"""`jtblas calibrate`'s measurement (`jtblas.calibrate.measure`) and command: the CLI without a
GPU, the jax.jit launch probe on the CPU backend; on a GPU, `calibrate --quick` end to end."""

import dataclasses
import json
import os
import subprocess
import sys
import warnings

import pytest

import jtblas
from jtblas import cli, hardware
from jtblas.calibrate import measure


@pytest.mark.parametrize(("tiles", "grid"), [(132, (11, 12)), (264, (12, 22)), (528, (22, 24)), (114, (6, 19)),
                                             (7, (1, 7))])
def test_tile_cost_grids_are_as_square_as_the_count_allows(tiles, grid):
    """`measure.tile_grid`: the most square rows x columns of exactly that many tiles."""
    assert measure.tile_grid(tiles) == grid


def _stubbed_run(monkeypatch, timed):
    """A `Calibration` with no GPU behind it: `torch_launch.kernel_launcher` records each
    (problem, config) it is asked for and launches nothing, torch makes no tensors, and `_time`
    returns timed(problem, config) seconds for the last product launched. Returns the run and the
    list of launched products."""
    import types

    from jtblas import torch_launch

    launched = []

    def fake_launcher(operands, problem, config):
        launched.append((problem, config))
        return lambda i: None

    monkeypatch.setattr(torch_launch, "kernel_launcher", fake_launcher)
    fake_torch = types.SimpleNamespace(bfloat16="bf16", float32="f32", randn=lambda *shape, **kw: shape,
                                       empty=lambda *shape, **kw: shape,
                                       cuda=types.SimpleNamespace(synchronize=lambda: None))
    run = measure.Calibration.__new__(measure.Calibration)
    run.torch, run.sm_count, run.base, run.measured = fake_torch, 132, hardware.H100, {}
    run.plan = measure.MeasurementPlan.make(quick=True)
    run._time = lambda launch, nbuf=1: (timed(*launched[-1]), "stub")
    return run, launched


def test_tile_cost_records_each_further_tile_against_the_model(monkeypatch):
    """`Calibration.tile_cost` without a GPU: launches and timings stubbed so that each further
    tile costs its predicted time plus 0.3 µs; the step records that slope and the model's for the
    pointer config and its TMA twin (Hopper) at each K, from products of 1, 2 and 4 tiles per SM."""
    from jtblas.config import Problem
    from jtblas.model import cost

    def timed(problem, config):
        tiles = problem.m * problem.n // (config.block_m * config.block_n) // 132
        return cost.estimate(config, problem, hardware.H100).predicted_seconds + 0.3e-6 * tiles

    run, launched = _stubbed_run(monkeypatch, timed)
    run.tile_cost()
    rows = run.measured["tile_cost"]
    assert [(row["config"], row["k"]) for row in rows] == [
        ("128x128x64 w4 s4 g8", 128), ("128x128x64 w4 s4 g8", 1024),
        ("128x128x64 w4 s4 g8 tma", 128), ("128x128x64 w4 s4 g8 tma", 1024)]
    for row in rows:
        assert row["seconds_per_tile"] - row["predicted_seconds_per_tile"] == pytest.approx(0.3e-6)
        assert [r["tiles_per_sm"] for r in row["rows"]] == [1, 2, 4]
        for timed in row["rows"]:
            assert timed["m"] * timed["n"] == timed["tiles_per_sm"] * 132 * 128 * 128
    problem = Problem(m=1408, n=1536, k=128)  # 11 x 12 tiles: one per SM
    assert launched[0] == (problem, measure.TILE_COST_CONFIG)


def test_narrow_copies_time_b_at_each_row_alignment_against_the_model(monkeypatch):
    """`Calibration.narrow_copies` without a GPU: launches stubbed, each timed at twice its
    prediction; the step runs the fixed tile with 3 and with 5 stages on fp32 products whose B rows
    are 4-, 8- and 16-byte aligned (as the model sees them), then its two contrasts on the aligned
    rows (B stored [N, K]; a 32-row mma.sync tile), and records each time over its prediction."""
    from jtblas.model import cost, resources

    run, launched = _stubbed_run(
        monkeypatch, lambda problem, config: 2 * cost.estimate(config, problem, hardware.H100).predicted_seconds)
    run.narrow_copies()
    timed = run.measured["narrow_copies"]
    assert timed["m"] == 64
    assert [(row["config"], row["b_vector_bytes"], row["b_layout"], row["mma"]) for row in timed["rows"]] == [
        (f"64x128x32 w4 s{stages} g1", width, "[K, N]", "wgmma") for stages in (3, 5) for width in (4, 8, 16)] + [
        ("64x128x32 w4 s3 g1", 16, "[N, K]", "wgmma"), ("32x128x32 w4 s3 g1", 16, "[K, N]", "mma.sync")]
    for (problem, config), row in zip(launched, timed["rows"], strict=True):
        assert config.short() == row["config"] and problem.dtype == "float32"
        assert dataclasses.replace(config, num_stages=3, block_m=64) == measure.NARROW_COPY_CONFIG
        assert (problem.m, problem.n, problem.k) == (64, row["n"], 1024)
        assert problem.transpose_b == (row["b_layout"] == "[N, K]")
        assert resources.plain_load_bytes(problem, "b", config.block_k) == row["b_vector_bytes"]
        assert row["measured_over_predicted"] == pytest.approx(2.0)
    # Under the narrow-copies limit: the tile is one the model can pick.
    problem = launched[0][0]
    config = measure.NARROW_COPY_CONFIG
    assert 0 < resources.narrow_copies_per_thread(problem, config.block_m, config.block_n, config.block_k,
                                                  config.num_warps) <= resources.MAX_NARROW_COPIES_PER_THREAD


def _read_rows(rates):
    """Read rows at 8, 16, 32, 64 and 128 KB in flight per program with these bandwidths (B/s)."""
    sizes = [8 * 1024 * 2**i for i in range(len(rates))]
    return [dict(inflight_bytes_per_program=size, bytes_per_s=rate, seconds_per_step=size * 132 / rate)
            for size, rate in zip(sizes, rates)]


def test_the_latency_is_the_step_time_at_the_knee():
    """`measure.latency_knee`: the fewest bytes in flight reaching 90% of the best bandwidth, not
    the best row itself (Little's law: beyond the knee more in flight only queues)."""
    rows = _read_rows([2e12, 6e12, 9.2e12, 10e12, 9.9e12])
    assert measure.latency_knee(rows) is rows[2]
    assert measure.latency_knee(rows[:1]) is rows[0]


def test_the_l2_latency_step_rereads_a_working_set_inside_l2():
    """`Calibration.l2_read_vs_inflight` without a GPU (`_read` stubbed): every SM one program
    re-reading its `l2_chunk_bytes` (no rotation over the buffer, so the data stays in L2) at
    each in-flight size of the plan; the knee's step time is recorded as the L2 latency."""
    run = measure.Calibration.__new__(measure.Calibration)
    run.sm_count, run.plan, run.measured = 132, measure.MeasurementPlan.make(quick=False), {}
    calls = []
    rows = iter(_read_rows([3e12, 6e12, 10e12, 11.5e12, 11.8e12]))

    def fake_read(**kwargs):
        calls.append(kwargs)
        return next(rows)

    run._read = fake_read
    run.l2_read_vs_inflight()
    assert [call["inflight_bytes"] for call in calls] == list(run.plan.inflight_bytes)
    for call in calls:
        assert call["programs"] == 132 and call["rotate"] is False
        assert call["chunk_bytes"] == run.plan.l2_chunk_bytes and call["repeats"] == run.plan.l2_repeats
        assert 132 * call["chunk_bytes"] < hardware.H100.l2_bytes // 2
    knee = run.measured["l2_read_vs_inflight"][3]  # 64 KB: the first at 90% of 11.8 TB/s
    assert run.measured["l2_loaded_latency_seconds"] == knee["seconds_per_step"]
    assert run.measured["l2_loaded_latency_inflight_bytes_per_sm"] == 64 * 1024


def test_cli_without_gpu_prints_one_line_and_exits_1(capsys, monkeypatch):
    monkeypatch.setattr(measure, "find_gpu", lambda: measure.NO_GPU)
    assert cli.main(["calibrate", "--quick"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "jtblas calibrate: no CUDA GPU found, nothing to calibrate\n"
    assert captured.out == ""


@pytest.mark.skipif(measure.find_gpu() is None, reason="this machine has a GPU")
def test_cli_without_gpu_in_a_subprocess():
    result = subprocess.run([sys.executable, "-m", "jtblas", "calibrate"], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert result.returncode == 1
    ours = [line for line in result.stderr.splitlines() if line.startswith("jtblas")]
    assert ours == ["jtblas calibrate: no CUDA GPU found, nothing to calibrate"]
    assert result.stdout == ""


@pytest.mark.gpu
def test_calibrate_quick_end_to_end(tmp_path):
    out = tmp_path / "profile.json"
    result = subprocess.run([sys.executable, "-m", "jtblas", "calibrate", "--quick", "--no-progress",
                             "--out", str(out)], capture_output=True, text=True, timeout=600)
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stderr
    profile = json.loads(out.read_text())
    assert profile["errors"] == {}
    assert profile["measured"]["seconds"] < 60
    hw = hardware.load_profile(out)
    fields = profile["hardware"]
    for name in ("dram_bytes_per_s", "l2_bytes_per_s", "fp32_flops", "launch_seconds", "tensor_flops"):
        assert name in fields
    assert fields["l2_bytes_per_s"] > fields["dram_bytes_per_s"]
    # 0.22 µs measured on the H200 (2026-12-04): kernels launched back to back in a CUDA graph.
    assert 0.05e-6 < hw.launch_seconds < 50e-6
    if "H200" in profile["device"] or "H100" in profile["device"]:
        assert 1e12 < hw.dram_bytes_per_s < 6e12
        assert 200e12 < hw.tensor_flops["bfloat16"] < 1000e12
        assert 100e12 < hw.tensor_flops["float32"] < 600e12
        assert 10e12 < hw.fp32_flops < 80e12
    busy = profile["measured"]["tensor_rate_vs_busy_sms"]
    assert busy["rows"][-1]["busy_sms"] == fields["sm_count"] and busy["rows"][-1]["rate_over_all_busy"] == 1.0
    assert [row["busy_sms"] for row in busy["rows"]] == sorted({row["busy_sms"] for row in busy["rows"]})
    # One tile per busy SM runs at the full-load rate or faster, never twice it (a wrong grid would).
    assert all(0.9 < row["rate_over_all_busy"] < 1.6 for row in busy["rows"]), busy["rows"]
    # The sum kernel alone, split 2 and 4: timed, and within a few times the model's prediction
    # (a wrong grid or a partials read from L2 would land far off).
    sums = profile["measured"]["split_sum"]
    assert [row["splits"] for row in sums] == [2, 4]
    assert all(0.3 < row["measured_over_predicted"] < 5 for row in sums), sums
    # A read that hits L2 waits less than one from DRAM; a program's start is measured and sound.
    measured = profile["measured"]
    assert 0 < measured["l2_loaded_latency_seconds"] < measured["loaded_latency_seconds"]
    assert 0 <= measured["constants"]["program_start_seconds"] < 5e-6
    assert [row["b_vector_bytes"] for row in measured["narrow_copies"]["rows"]] == [4, 8, 16] * 2 + [16, 16]
    assert f"wrote {out}" in result.stdout
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert jtblas.select(4096, 4096, 4096, hardware=str(out)) is not None


def test_launch_measurement_chains_its_launches():
    """The calibration's jax.jit launch cost chains one-element launches through jtblas.launch;
    on the CPU backend the same loop runs its kernel R times in order."""
    import jax
    import jax.numpy as jnp

    from jtblas import launch
    from jtblas.calibrate.kernels import increment_kernel

    def one(x):
        return launch.launch(increment_kernel, grid=(1,), args=[x], num_warps=1, num_stages=1,
                             out_shape=jax.ShapeDtypeStruct((1,), jnp.float32), metaparams={})

    loop = jax.jit(lambda x: jax.lax.fori_loop(0, 5, lambda _, y: one(y), x, unroll=16))
    assert float(loop(jnp.zeros((1,), jnp.float32))[0]) == 5.0
