"""`jtblas calibrate`'s derivation (`jtblas.calibrate.derive`) on any machine: from the numbers a
run records to the profile's fields and model constants, the profile validated and loaded. That it
imports no device library: tests/test_structure.py."""

import math

import pytest

from jtblas import gpus, profiles
from jtblas.calibrate import derive, report
from jtblas.calibrate.derive import measured_launch_seconds

# The numbers `Calibration.measured` holds after a run, with the keys the derivation reads (a run
# records more: methods, sizes, the per-grid rows). Values: the H200 profile of docs/calibrate.md,
# an L2 read below the GEMM-based L2 rate (7.4-8.0 against 11.2-12.6 TB/s measured there), and a
# per-SM load rate of 61 bytes per clock at 1.755 GHz.
H200_RUN = {
    "dram_copy": {"bytes_per_s": 4.31e12},
    "gemm": {"bfloat16": {"flops_per_s": 7.8e14}, "float16": {"flops_per_s": 7.8e14},
             "tf32": {"flops_per_s": 3.9e14}, "fp32": {"flops_per_s": 5.1e13}},
    "launch": {"seconds": 0.22e-6},
    "jax_launch": {"seconds": 2.1e-6},
    "l2_read": {"bytes_per_s": 7.8e12},
    "l2_gemm": {"bytes_per_s": 1.1e13},
    "sm_clock_hz_samples": [1.74e9, 1.755e9, 1.755e9],
    "per_sm_load_bytes_per_s": 61.0 * 1.755e9,
    "loaded_latency_seconds": 1.2e-6,
    "seconds": 18.2,
}


def _profile(measured, *, fit_constants=False, base=gpus.H200, sm_count=132, described=None):
    return derive.profile(measured, device="NVIDIA H200", driver="570.124.06", base=base, sm_count=sm_count,
                          described=described or {}, fit_constants=fit_constants, quick=True, errors={},
                          software={"torch": "2.11.0"}, date="2026-12-01T00:00:00+00:00")


def test_fields_and_constants_of_a_run():
    fields, constants = derive.derive(H200_RUN, sm_count=132, base=gpus.H200)
    assert fields == {
        "sm_count": 132,
        "dram_bytes_per_s": 4.31e12,
        "l2_bytes_per_s": 1.1e13,  # the larger of the two lower bounds
        "tensor_flops": {"bfloat16": 7.8e14, "float16": 7.8e14, "float32": 3.9e14},  # float32 = tf32
        "fp32_flops": 5.1e13,
        "launch_seconds": 2.1e-6,  # through jax.jit, not the CUDA-graph launch
        "clock_hz": 1.755e9,  # the median sample
    }
    assert constants == {"load_bytes_per_clock": pytest.approx(61.0), "memory_latency_seconds": 1.2e-6}


def test_implausible_or_missing_numbers_leave_their_fields_out():
    run = dict(H200_RUN, dram_copy={"bytes_per_s": math.nan}, sm_clock_hz_samples=[5e9],
               loaded_latency_seconds=30e-6, jax_launch={"seconds": -0.2e-6})
    del run["l2_gemm"], run["gemm"]
    fields, constants = derive.derive(run, sm_count=132, base=gpus.H200)
    assert fields == {"sm_count": 132, "l2_bytes_per_s": 7.8e12, "launch_seconds": 0.22e-6}
    # No clock measured: the per-SM load rate is converted at the built-in clock.
    assert constants == {"load_bytes_per_clock": pytest.approx(61.0 * 1.755e9 / gpus.H200.clock_hz)}
    assert derive.derive({}, sm_count=132, base=gpus.H200) == ({"sm_count": 132}, {})


def test_profile_records_the_constants_and_applies_them_only_when_fitted():
    recorded = _profile(H200_RUN)
    assert recorded["constants"] == {} and recorded["base"] == "h200"
    assert recorded["measured"]["constants"]["memory_latency_seconds"] == 1.2e-6
    assert recorded["measured"]["seconds"] == 18.2 and "constants" not in H200_RUN
    hw = profiles.to_hardware(recorded, origin="recorded")
    assert hw.dram_bytes_per_s == 4.31e12 and hw.launch_seconds == 2.1e-6 and hw.l2_bytes == gpus.H200.l2_bytes
    assert hw.tensor_flops["float8"] == gpus.H200.tensor_flops["float8"]  # not measured: the built-in's
    assert hw.model_constants() == gpus.H200.model_constants()
    fitted = profiles.to_hardware(_profile(H200_RUN, fit_constants=True), origin="fitted")
    assert fitted.model_constants().load_bytes_per_clock == pytest.approx(61.0)
    assert fitted.model_constants().memory_latency_seconds == 1.2e-6


def test_a_gpu_without_a_built_in_keeps_what_the_driver_described():
    described = {"name": "nvidia-l4", "full_name": "NVIDIA L4", "compute_capability": [8, 9], "wgmma": False,
                 "l2_bytes": 48 * 2**20, "smem_per_sm": 100 * 2**10, "smem_per_block": 99 * 2**10}
    fields, _ = derive.derive({"dram_copy": {"bytes_per_s": 0.25e12}}, sm_count=58, base=gpus.A100,
                              described=described)
    assert list(fields) == ["sm_count", *described, "dram_bytes_per_s"]
    hw = profiles.to_hardware(_profile({"dram_copy": {"bytes_per_s": 0.25e12}}, base=gpus.A100, sm_count=58,
                                       described=described), origin="l4")
    assert (hw.name, hw.sm_count, hw.compute_capability, hw.l2_bytes) == ("nvidia-l4", 58, (8, 9), 48 * 2**20)


@pytest.mark.parametrize("measured,expected", [
    ({"jax_launch": {"seconds": 1.1e-6}, "launch": {"seconds": 0.8e-6}}, 1.1e-6),
    ({"jax_launch": {"seconds": -0.2e-6}, "launch": {"seconds": 0.8e-6}}, 0.8e-6),
    ({"jax_launch": {"seconds": 0.0}}, None),
    ({"launch": {"seconds": float("nan")}}, None),
    ({}, None),
])
def test_launch_seconds_falls_back_when_the_jit_slope_measures_nothing(measured, expected):
    """The profile's launch_seconds is jax-triton's launch under jax.jit when its slope is
    positive, else the CUDA-graph launch, else absent (never a zero or negative cost)."""
    assert measured_launch_seconds(measured) == expected


def test_the_table_shows_the_split_sum_over_its_prediction():
    """The split-K sum step is recorded, not applied: its rows in the calibrate table compare the
    measured time with the model's prediction, and no hardware field or constant comes of it."""
    run = dict(H200_RUN, split_sum=[{"splits": 2, "measured_over_predicted": 1.42},
                                    {"splits": 4, "measured_over_predicted": 1.31}])
    profile = _profile(run)
    rows = {row[0]: row[1:] for row in report.comparison_rows(profile)}
    assert rows["split-K sum of 2 partials (x predicted, recorded only)"] == ("1.42", "1.00", "1.42")
    assert rows["split-K sum of 4 partials (x predicted, recorded only)"] == ("1.31", "1.00", "1.31")
    assert _profile(H200_RUN)["hardware"] == profile["hardware"]


def test_the_time_per_further_tile_gives_the_program_start_cost():
    """The tile-cost step's rows show each further tile's measured time per SM beside the model's
    (µs); the pointer kernel's row at the shortest K gives `program_start_seconds` (its excess
    over the model's slope, the built-in start cost added back), applied only when fitted; no
    hardware field comes of it, and a start cost outside [0, 5 µs] is left out."""
    built_in = gpus.H200.model_constants().program_start_seconds
    tiles = [
        {"config": "128x128x64 w4 s4 g8", "k": 1024, "seconds_per_tile": 8.0e-6, "predicted_seconds_per_tile": 9.0e-6},
        {"config": "128x128x64 w4 s4 g8", "k": 128, "seconds_per_tile": 3.0e-6, "predicted_seconds_per_tile": 2.5e-6},
        {"config": "128x128x64 w4 s4 g8 tma", "k": 128, "seconds_per_tile": 1.0e-6,
         "predicted_seconds_per_tile": 2.0e-6},
        {"config": "128x128x64 w4 s4 g8 tma", "k": 1024, "seconds_per_tile": 6.0e-6,
         "predicted_seconds_per_tile": 7.5e-6}]
    run = dict(H200_RUN, tile_cost=tiles)
    profile = _profile(run)
    rows = {row[0]: row[1:] for row in report.comparison_rows(profile)}
    label = "time per further tile, 128x128x64 w4 s4 g8{}, K {} (µs, recorded only)"
    assert rows[label.format("", 128)] == ("3.00", "2.50", "1.20")
    assert rows[label.format(" tma", 1024)] == ("6.00", "7.50", "0.80")
    start = 0.5e-6 + built_in
    assert profile["measured"]["constants"]["program_start_seconds"] == pytest.approx(start)
    assert rows["program start, µs (model constant)"][0] == f"{start * 1e6:.2f}"
    assert _profile(H200_RUN)["hardware"] == profile["hardware"]
    assert profiles.to_hardware(profile, origin="recorded").model_constants() == gpus.H200.model_constants()
    fitted = profiles.to_hardware(_profile(run, fit_constants=True), origin="fitted")
    assert fitted.model_constants().program_start_seconds == pytest.approx(start)
    slower = dict(tiles[1], seconds_per_tile=9.0e-6)
    assert "program_start_seconds" not in derive.derive(dict(H200_RUN, tile_cost=[slower]), sm_count=132,
                                                        base=gpus.H200)[1]
    tma_only = [row for row in tiles if row["config"].endswith(" tma")]
    assert "program_start_seconds" not in derive.derive(dict(H200_RUN, tile_cost=tma_only), sm_count=132,
                                                        base=gpus.H200)[1]


def _busy_rows(*pairs):
    return {"tensor_rate_vs_busy_sms": {"rows": [{"busy_sms": busy, "rate_over_all_busy": rate}
                                                 for busy, rate in pairs]}}


def test_busy_sm_rates_from_the_busy_sm_step():
    """Busy SMs over the SM count against the rate over the all-busy one; the profile loads it as
    `Hardware.busy_sm_rates`."""
    run = dict(H200_RUN, **_busy_rows((33, 1.14), (73, 1.12), (132, 1.0)))
    fields, _ = derive.derive(run, sm_count=132, base=gpus.H200)
    assert fields["busy_sm_rates"] == [[0.25, 1.14], [73 / 132, 1.12], [1.0, 1.0]]
    hw = profiles.to_hardware(_profile(run, fit_constants=True), origin="a test")
    assert hw.busy_sm_rates == ((0.25, 1.14), (73 / 132, 1.12), (1.0, 1.0))
    # Without --fit-constants the curve is recorded, not applied (it misranked on an H100), and
    # the calibrate table still prints it.
    recorded = _profile(run)
    assert "busy_sm_rates" not in recorded["hardware"]
    assert recorded["measured"]["busy_sm_rates"] == [[0.25, 1.14], [73 / 132, 1.12], [1.0, 1.0]]
    assert profiles.to_hardware(recorded, origin="a test").busy_sm_rates == ()
    rows = {row[0]: row[1:] for row in report.comparison_rows(recorded)}
    assert rows["SM rate with 25% of the SMs busy (x all busy)"] == ("1.14", "1.00", "1.14")


@pytest.mark.parametrize("pairs", [
    ((33, 1.14), (73, 1.12)),             # no all-busy row
    ((33, math.nan), (132, 1.0)),         # not a number
    ((33, 3.0), (132, 1.0)),              # outside BUSY_SM_RATE_RANGE
    ((73, 1.1), (33, 1.1), (132, 1.0)),   # not ascending
    ((0, 1.1), (132, 1.0)),               # no SM busy
])
def test_busy_sm_rates_need_every_row_sound(pairs):
    fields, _ = derive.derive(dict(H200_RUN, **_busy_rows(*pairs)), sm_count=132, base=gpus.H200)
    assert "busy_sm_rates" not in fields
