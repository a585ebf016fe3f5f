"""Derivation for `jtblas calibrate`: from the numbers a run measured to the profile's fields.

Pure Python (no torch, Triton or JAX), so it runs on any machine with recorded numbers: `measured`
is the dict `jtblas.calibrate.measure.Calibration` fills (and the profile keeps under
`measured`). A number that is missing, non-finite or not positive leaves its field out, so the
field keeps the built-in value.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from jtblas import profiles
from jtblas.gpus import Hardware


def profile(measured: Mapping[str, Any], *, device: str, driver: str, base: Hardware, sm_count: int,
            described: Mapping[str, Any], fit_constants: bool, quick: bool, errors: Mapping[str, str],
            software: Mapping[str, str], date: str | None = None) -> dict[str, Any]:
    """The profile (validated, `jtblas.profiles.make`) of one run: the Hardware fields measured,
    over the built-in `base`; the model constants and the busy-SM curve measured, applied only
    with `fit_constants` and always recorded under `measured.constants` and
    `measured.busy_sm_rates` (scaling the model's SM-side rates by the curve made 11 of 12 moved
    picks slower on an H100, 2026-12-06, docs/decisions.md)."""
    fields, constants = derive(measured, sm_count=sm_count, base=base, described=described)
    recorded = {"constants": constants}
    if "busy_sm_rates" in fields:
        recorded["busy_sm_rates"] = fields["busy_sm_rates"] if fit_constants else fields.pop("busy_sm_rates")
    return profiles.make(
        device=device, driver=driver, base=base.name, hardware=fields,
        constants=constants if fit_constants else {},
        measured={**measured, **recorded}, date=date,
        quick=quick, errors=dict(errors), software=dict(software),
    )


def derive(measured: Mapping[str, Any], *, sm_count: int, base: Hardware,
           described: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, float]]:
    """The Hardware fields and model constants the measurements give (only those measured).

    Args:
      measured: the run's raw numbers (`Calibration.measured`).
      sm_count: the GPU's SM count (always a field).
      base: the built-in description the profile overrides; its clock converts the per-SM load
        rate to bytes per clock when the clock was not measured.
      described: the fields the driver gives for a GPU without a built-in description
        (`Calibration.described`), kept as they are.
    """
    m = measured
    fields: dict[str, Any] = {"sm_count": sm_count, **(described or {})}

    def put(field: str, value: Any) -> None:
        if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
            fields[field] = float(value)

    if "dram_copy" in m:
        put("dram_bytes_per_s", m["dram_copy"]["bytes_per_s"])
    l2_rates = [m[key]["bytes_per_s"] for key in ("l2_read", "l2_gemm") if key in m]
    if l2_rates:  # each is a lower bound of what L2 delivers
        put("l2_bytes_per_s", max(l2_rates))
    gemm = m.get("gemm", {})
    rates = {dtype: gemm[key]["flops_per_s"]
             for dtype, key in (("bfloat16", "bfloat16"), ("float16", "float16"), ("float32", "tf32"))
             if key in gemm}
    if rates:
        fields["tensor_flops"] = rates
    if "fp32" in gemm:
        put("fp32_flops", gemm["fp32"]["flops_per_s"])
    launch = measured_launch_seconds(m)
    if launch is not None:
        put("launch_seconds", launch)
    busy = busy_sm_rates(m, sm_count)
    if busy:
        fields["busy_sm_rates"] = busy
    clocks = m.get("sm_clock_hz_samples") or []
    if clocks and 0.2e9 <= statistics.median(clocks) <= 4e9:
        put("clock_hz", statistics.median(clocks))

    constants: dict[str, float] = {}
    clock = fields.get("clock_hz", base.clock_hz)
    per_sm = m.get("per_sm_load_bytes_per_s")
    if per_sm and math.isfinite(per_sm) and per_sm > 0:
        constants["load_bytes_per_clock"] = per_sm / clock
    latency = m.get("loaded_latency_seconds")
    if latency and math.isfinite(latency) and 50e-9 <= latency <= 20e-6:
        constants["memory_latency_seconds"] = latency
    start = program_start_seconds(m, base)
    if start is not None:
        constants["program_start_seconds"] = start
    return fields, constants


def program_start_seconds(measured: Mapping[str, Any], base: Hardware) -> float | None:
    """`Constants.program_start_seconds` from the tile-cost step (`Calibration.tile_cost`): the
    pointer kernel's time per further tile at the step's shortest K, where each tile is a cold
    program and the K loop is two steps, less the model's slope on `base` with its own start cost
    taken out; None unless that row was measured and the result lies in [0, 5 µs]."""
    pointer = [row for row in measured.get("tile_cost", []) if not row["config"].endswith(" tma")]
    if not pointer:
        return None
    row = min(pointer, key=lambda row: row["k"])
    built_in = base.model_constants().program_start_seconds
    start = row["seconds_per_tile"] - row["predicted_seconds_per_tile"] + built_in
    return start if math.isfinite(start) and 0.0 <= start <= 5e-6 else None


def busy_sm_rates(measured: Mapping[str, Any], sm_count: int) -> list[list[float]]:
    """`Hardware.busy_sm_rates` from the busy-SM step (`Calibration.tensor_rate_vs_busy_sms`):
    [[busy SMs / sm_count, rate per busy SM / the all-busy rate], ...]; empty unless every row has
    a busy count in [1, sm_count], the last row every SM busy, and the points pass the profile's
    own check (`profiles.checked_busy_sm_rates`: finite rates in range, ascending fractions)."""
    rows = measured.get("tensor_rate_vs_busy_sms", {}).get("rows") or []
    if not rows or any(not isinstance(row.get("busy_sms"), int) or not 0 < row["busy_sms"] <= sm_count
                       for row in rows) or rows[-1]["busy_sms"] != sm_count:
        return []
    points = [[row["busy_sms"] / sm_count, row.get("rate_over_all_busy")] for row in rows]
    try:
        profiles.checked_busy_sm_rates(points)
    except ValueError:
        return []
    return [[fraction, float(rate)] for fraction, rate in points]


def measured_launch_seconds(measured: Mapping[str, Any]) -> float | None:
    """The launch cost (s) the measurements give: jax-triton's inside jax.jit (what jtblas.matmul
    pays), else the CUDA-graph launch. A slope of chained launches at or below zero (launches
    inside one of XLA's CUDA graphs cost less than the slope's noise; seen in a --quick run on the
    H200) measures nothing, so the CUDA-graph launch stands in for it."""
    for key in ("jax_launch", "launch"):
        seconds = measured.get(key, {}).get("seconds")
        if isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0:
            return float(seconds)
    return None


__all__ = ["busy_sm_rates", "derive", "measured_launch_seconds", "profile"]
