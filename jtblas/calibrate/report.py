"""Printing for `jtblas calibrate`: a profile's measured numbers against the built-in ones.

Pure Python (no torch, Triton or JAX): works on any saved profile.
"""

from __future__ import annotations

from typing import Any

from jtblas.constants import DEFAULT_CONSTANTS
from jtblas.gpus import BUILTIN


def comparison_rows(profile: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(quantity, measured, built-in, measured ÷ built-in) for the profile's measured numbers."""
    base = BUILTIN[profile["base"]]
    fields = profile["hardware"]
    constants = profile.get("measured", {}).get("constants", {})
    rows = []

    def row(label: str, value: float | None, reference: float, unit: float, fmt: str = "{:.2f}") -> None:
        if value is None:
            rows.append((label, "-", fmt.format(reference / unit), "-"))
        else:
            rows.append((label, fmt.format(value / unit), fmt.format(reference / unit), f"{value / reference:.2f}"))

    row("DRAM bandwidth, copy (TB/s)", fields.get("dram_bytes_per_s"), base.dram_bytes_per_s, 1e12)
    row("L2 bandwidth, read (TB/s)", fields.get("l2_bytes_per_s"), base.l2_bytes_per_s, 1e12)
    rates = fields.get("tensor_flops", {})
    for dtype, label in (("bfloat16", "bf16"), ("float16", "fp16"), ("float32", "tf32")):
        row(f"{label} tensor cores (TFLOP/s)", rates.get(dtype), base.tensor_flops[dtype], 1e12, "{:.0f}")
    row("fp32, no tensor cores (TFLOP/s)", fields.get("fp32_flops"), base.fp32_flops, 1e12, "{:.1f}")
    row("launch overhead (µs)", fields.get("launch_seconds"), base.launch_seconds, 1e-6)
    row("SM clock under load (GHz)", fields.get("clock_hz"), base.clock_hz, 1e9, "{:.3f}")
    row("load bytes/clock per SM (model constant)", constants.get("load_bytes_per_clock"),
        DEFAULT_CONSTANTS.load_bytes_per_clock, 1.0, "{:.1f}")
    row("loaded memory latency, µs (model constant)", constants.get("memory_latency_seconds"),
        DEFAULT_CONSTANTS.memory_latency_seconds, 1e-6)
    row("program start, µs (model constant)", constants.get("program_start_seconds"),
        DEFAULT_CONSTANTS.program_start_seconds, 1e-6)
    # Recorded only: the model has one latency for every load; the ratio is L2's share of it.
    row("loaded latency of an L2 hit, µs (recorded only)",
        profile.get("measured", {}).get("l2_loaded_latency_seconds"), DEFAULT_CONSTANTS.memory_latency_seconds, 1e-6)
    # The built-ins run every grid at the all-busy rate (1.00); the ratio column is the rate itself.
    # Applied (a hardware field, with --fit-constants) or recorded only (`measured.busy_sm_rates`).
    curve = fields.get("busy_sm_rates") or profile.get("measured", {}).get("busy_sm_rates", [])
    for fraction, rate in curve[:-1]:
        row(f"SM rate with {100 * fraction:.0f}% of the SMs busy (x all busy)", rate, 1.0, 1.0)
    # Recorded only: the split-K sum kernel's time over the model's prediction (1.00 = as priced).
    for timed in profile.get("measured", {}).get("split_sum", []):
        row(f"split-K sum of {timed['splits']} partials (x predicted, recorded only)",
            timed["measured_over_predicted"], 1.0, 1.0)
    # Recorded only: B's rows 4-, 8- or 16-byte aligned (as the model sees its copies), stored
    # [K, N] or [N, K], the time over the model's prediction.
    narrow = profile.get("measured", {}).get("narrow_copies", {})
    for timed in narrow.get("rows", []):
        how = f"{timed['b_vector_bytes']}-byte copies of B {timed.get('b_layout', '[K, N]')}"
        mma = f" {timed['mma']}" if "mma" in timed else ""
        row(f"{how}, {timed['config']}{mma} fp32 {narrow['m']}x{timed['n']}x{timed['k']} (x predicted, recorded only)",
            timed["measured_over_predicted"], 1.0, 1.0)
    # Recorded only: each further tile per SM, measured against the model's prediction (µs).
    for timed in profile.get("measured", {}).get("tile_cost", []):
        row(f"time per further tile, {timed['config']}, K {timed['k']} (µs, recorded only)",
            timed["seconds_per_tile"], timed["predicted_seconds_per_tile"], 1e-6)
    return rows


def format_table(rows: list[tuple[str, str, str, str]]) -> str:
    """`comparison_rows` as a text table under a header, columns aligned."""
    header = ("quantity", "measured", "built-in", "ratio")
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
                     for r in table)


__all__ = ["comparison_rows", "format_table"]
