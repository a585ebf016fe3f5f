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


def test_busy_sm_rates_are_listed_against_the_all_busy_rate():
    profile = profiles.make(device="NVIDIA H200", driver="570.124.06", base="h200",
                            hardware=dict(busy_sm_rates=[[0.25, 1.14], [0.55, 1.12], [1.0, 1.0]]))
    rows = report.comparison_rows(profile)
    busy = [row for row in rows if row[0].startswith("SM rate with")]
    assert busy == [("SM rate with 25% of the SMs busy (x all busy)", "1.14", "1.00", "1.14"),
                    ("SM rate with 55% of the SMs busy (x all busy)", "1.12", "1.00", "1.12")]


def test_the_l2_latency_is_listed_against_the_one_latency_of_the_model():
    profile = profiles.make(device="NVIDIA H100 80GB HBM3", driver="580.159.04", base="h100", hardware={},
                            measured={"l2_loaded_latency_seconds": 0.6e-6})
    rows = {row[0]: row[1:] for row in report.comparison_rows(profile)}
    assert rows["loaded latency of an L2 hit, µs (recorded only)"] == ("0.60", "1.00", "0.60")
    unmeasured = profiles.make(device="NVIDIA H100 80GB HBM3", driver="580.159.04", base="h100", hardware={})
    rows = {row[0]: row[1:] for row in report.comparison_rows(unmeasured)}
    assert rows["loaded latency of an L2 hit, µs (recorded only)"] == ("-", "1.00", "-")


def test_narrow_copies_are_listed_over_their_prediction():
    measured = {"narrow_copies": {"m": 64, "rows": [
        {"config": "64x128x32 w4 s3 g1", "n": 32001, "k": 4096, "b_vector_bytes": 4, "b_layout": "[K, N]",
         "mma": "wgmma", "measured_over_predicted": 2.4},
        {"config": "64x128x32 w4 s3 g1", "n": 32004, "k": 4096, "b_vector_bytes": 16, "b_layout": "[N, K]",
         "mma": "wgmma", "measured_over_predicted": 1.05},
        # A profile written before rows said their layout and MMA: B [K, N], nothing more said.
        {"config": "64x128x32 w4 s5 g1", "n": 32002, "k": 4096, "b_vector_bytes": 8, "measured_over_predicted": 1.3}]}}
    profile = profiles.make(device="NVIDIA H100 80GB HBM3", driver="580.159.04", base="h100", hardware={},
                            measured=measured)
    rows = {row[0]: row[1:] for row in report.comparison_rows(profile)}
    label = "{}-byte copies of B {}, 64x128x32 w4 s{} g1{} fp32 64x{}x4096 (x predicted, recorded only)"
    assert rows[label.format(4, "[K, N]", 3, " wgmma", 32001)] == ("2.40", "1.00", "2.40")
    assert rows[label.format(16, "[N, K]", 3, " wgmma", 32004)] == ("1.05", "1.00", "1.05")
    assert rows[label.format(8, "[K, N]", 5, "", 32002)] == ("1.30", "1.00", "1.30")
