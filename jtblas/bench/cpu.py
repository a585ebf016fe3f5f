"""`jtblas bench` on a machine without a CUDA GPU: what can run there.

No device time can be measured without a GPU, so the run does two things instead and says so:

1. the model's plan for every shape of the chosen sets, on the hardware description the model
   uses on this machine (`jtblas.hardware.detect()`: the named default on a CPU, or
   `JTBLAS_GPU`): config, split and repacking, predicted time and TFLOP/s, what bounds it, and
   how long the uncached selection took;
2. a correctness check of a few small products through the CPU backend (Triton's interpreter,
   the kernels a GPU would run), every layout, against a float64 product.

It prints both tables, writes them (`cpu_plan.md`) and the raw rows (`cpu_plan.json`) to the
output directory, and returns 0 when every check passes (1 otherwise).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
import time
from pathlib import Path

# (M, N, K): a tail of 1 and primes, and sizes that are not multiples of any block.
CHECK_SHAPES = ((7, 13, 37), (65, 33, 129))
CHECK_LAYOUTS = ("NN", "NT", "TN", "TT")
# Relative Frobenius error allowed against float64, per operand dtype (fp32 runs as tf32).
TOLERANCE = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 2e-3}


def plan_rows(shapes, hardware) -> list[dict]:
    """The model's plan for each shape on `hardware` (a `jtblas.hardware.Hardware`)."""
    from jtblas.model import cost, plan_for_problem

    rows = []
    for shape in _progress(shapes, "model plans"):
        problem = shape.problem()
        start = time.perf_counter()
        plan = plan_for_problem(problem, hardware)
        select_s = time.perf_counter() - start
        estimate = cost.estimate(plan.config, plan.kernel_problem, hardware, hardware.model_constants())
        rows.append(dict(
            name=shape.name, set=shape.set, shape=shape.key().replace(f" {shape.dtype}", ""),
            dtype=shape.dtype, config=plan.config.short(), config_fields=dataclasses.asdict(plan.config),
            repacked=plan.copies,
            predicted_seconds=plan.predicted_seconds, tflops=shape.flops / plan.predicted_seconds / 1e12,
            bound=estimate.bound, select_s=select_s,
        ))
    return rows


def correctness_rows(seed: int = 0) -> list[dict]:
    """Small products through `jtblas.matmul` on the CPU backend against float64."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jtblas

    rng = np.random.default_rng(seed)
    cases = [(shape, layout, "bfloat16") for shape in CHECK_SHAPES for layout in CHECK_LAYOUTS]
    cases.append((CHECK_SHAPES[-1], "NN", "float32"))
    rows = []
    for (m, n, k), layout, dtype in _progress(cases, "CPU checks"):
        transpose_a, transpose_b = layout[0] == "T", layout[1] == "T"
        a = jnp.asarray(rng.standard_normal((k, m) if transpose_a else (m, k)), dtype)
        b = jnp.asarray(rng.standard_normal((n, k) if transpose_b else (k, n)), dtype)
        product = functools.partial(jtblas.matmul, transpose_a=transpose_a, transpose_b=transpose_b)
        out = jax.jit(product)(a, b)
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        reference = (a64.T if transpose_a else a64) @ (b64.T if transpose_b else b64)
        result = np.asarray(out, np.float64)
        error = float(np.linalg.norm(result - reference) / np.linalg.norm(reference))
        rows.append(dict(shape=f"{m}x{n}x{k} {layout}", dtype=dtype, relative_error=error,
                         tolerance=TOLERANCE[dtype], ok=bool(np.isfinite(error) and error < TOLERANCE[dtype])))
    return rows


def run(shapes, out_dir: str | Path, reason: str) -> int:
    """The CPU run: plans for `shapes`, the correctness checks, the two output files."""
    from jtblas import hardware as hardware_lib

    hardware = hardware_lib.detect()
    print(f"jtblas bench: {reason}: no device time can be measured here. Running what a CPU can: the "
          f"model's plans for {len(shapes)} shapes on the '{hardware.name}' description, and "
          f"{len(CHECK_SHAPES) * len(CHECK_LAYOUTS) + 1} small products through Triton's interpreter "
          "against float64.", flush=True)
    plans = plan_rows(shapes, hardware)
    checks = correctness_rows()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = dict(reason=reason, hardware=hardware.name, plans=plans, checks=checks)
    (out / "cpu_plan.json").write_text(json.dumps(payload, indent=1))
    text = markdown(payload)
    (out / "cpu_plan.md").write_text(text)
    # The tables are the result of this run: on the terminal too, not only in the file.
    print(text.split("\n", 4)[-1], flush=True)
    failed = [row for row in checks if not row["ok"]]
    print(f"jtblas bench: wrote {out / 'cpu_plan.md'} and {out / 'cpu_plan.json'}; "
          f"{len(checks) - len(failed)} of {len(checks)} CPU checks passed", flush=True)
    for row in failed:
        print(f"jtblas bench: CPU check failed: {row['shape']} {row['dtype']}: relative error "
              f"{row['relative_error']:.2e} (tolerance {row['tolerance']:.0e})", file=sys.stderr)
    return 1 if failed else 0


def markdown(payload: dict) -> str:
    lines = [
        "# jtblas bench without a GPU", "",
        f"{payload['reason']}: no device time was measured. Predicted times are the model's, on the "
        f"'{payload['hardware']}' description.", "",
        "## The model's plans", "",
        "| shape | M×N×K layout | dtype | config | repacked | predicted µs | TFLOP/s | bound | select ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in payload["plans"]:
        lines.append(f"| {row['name']} | {row['shape']} | {row['dtype']} | {row['config']} | "
                     f"{row['repacked'] or '–'} | {row['predicted_seconds'] * 1e6:.1f} | {row['tflops']:.0f} | "
                     f"{row['bound']} | {row['select_s'] * 1e3:.1f} |")
    lines += ["", "## Correctness through the CPU backend (relative error vs float64)", "",
              "| M×N×K layout | dtype | relative error | tolerance | ok |", "|---|---|---|---|---|"]
    for row in payload["checks"]:
        lines.append(f"| {row['shape']} | {row['dtype']} | {row['relative_error']:.2e} | "
                     f"{row['tolerance']:.0e} | {'yes' if row['ok'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def _progress(items, label: str):
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=f"jtblas bench: {label}", leave=False, file=sys.stderr)
