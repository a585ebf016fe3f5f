"""`jtblas calibrate`'s printing (`jtblas.calibrate.report`): measured against built-in numbers."""

from jtblas import profiles
from jtblas.calibrate import report


def test_comparison_table_of_a_profile():
    profile = profiles.make(device="NVIDIA H200", driver="570.124.06", base="h200",
                            hardware=dict(dram_bytes_per_s=4.1e12),
                            measured={"constants": {"load_bytes_per_clock": 32.0}})
    text = report.format_table(report.comparison_rows(profile))
    assert "DRAM bandwidth" in text and "4.10" in text and "4.30" in text and "0.95" in text
    assert "32.0" in text and "64.0" in text
