"""benchmarks/ncu_check.py's parser: kernels between marker kernels are summed per contender."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import ncu_check  # noqa: E402

HEADER = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'


def row(i, name, value, unit="ns"):
    return f'"{i}","{name}","gpu__time_duration.sum","{unit}","{value}"\n'


def test_segments_sum_per_contender(tmp_path):
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
    lines = ["==PROF== noise\n", HEADER]
    durations = {"jtblas_torch": [100, 110, 90], "jtblas_jax": [120, 120, 120],
                 "xla": [50, 20, 50, 20, 50, 20], "cublas": [1, 1, 1]}
    i = 0
    for name, values in durations.items():
        lines.append(row(i, fill, "1,024"))
        i += 1
        for value in values:
            lines.append(row(i, f"{name}_kernel(int)", value))
            i += 1
    lines.append(row(i, fill, 2))
    csv_path = tmp_path / "ncu.csv"
    csv_path.write_text("".join(lines))
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"shapes": [{"M": 64, "N": 64, "K": 64, "layout": "NN", "dtype": "bfloat16",
                                               "contenders": {"xla": {"seconds": 77e-9}}}]}))
    table = ncu_check.parse(str(csv_path), [(64, 64, 64)], 3, str(results))
    seconds = {r["contender"]: r["ncu_seconds"] for r in table}
    assert abs(seconds["jtblas_torch"] - 100e-9) < 1e-15
    assert abs(seconds["xla"] - 70e-9) < 1e-15  # a GEMM plus its reduction, both counted
    assert abs(table[2]["bench_over_ncu"] - 1.1) < 1e-9
