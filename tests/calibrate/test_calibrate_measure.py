"""`jtblas calibrate`'s measurement (`jtblas.calibrate.measure`) and command: the CLI without a
GPU, the jax.jit launch probe on the CPU backend; on a GPU, `calibrate --quick` end to end."""

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


def test_tile_cost_records_each_further_tile_against_the_model(monkeypatch):
    """`Calibration.tile_cost` without a GPU: launches and timings stubbed so that each further
    tile costs its predicted time plus 0.3 µs; the step records that slope and the model's for the
    pointer config and its TMA twin (Hopper) at each K, from products of 1, 2 and 4 tiles per SM."""
    import types

    from jtblas import torch_launch
    from jtblas.config import Problem
    from jtblas.model import cost

    launched = []

    def fake_launcher(operands, problem, config):
        launched.append((problem, config))
        return lambda i: None

    monkeypatch.setattr(torch_launch, "kernel_launcher", fake_launcher)
    fake_torch = types.SimpleNamespace(bfloat16="bf16", randn=lambda *shape, **kw: shape,
                                       empty=lambda *shape, **kw: shape,
                                       cuda=types.SimpleNamespace(synchronize=lambda: None))
    run = measure.Calibration.__new__(measure.Calibration)
    run.torch, run.sm_count, run.base, run.measured = fake_torch, 132, hardware.H100, {}

    def fake_time(launch, nbuf=1):
        problem, config = launched[-1]
        tiles = problem.m * problem.n // (config.block_m * config.block_n) // 132
        return cost.estimate(config, problem, hardware.H100).predicted_seconds + 0.3e-6 * tiles, "stub"

    run._time = fake_time
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
