"""What the standalone GPU probes in benchmarks/ (`gemv_probe.py`, `stream_k_probe.py`) share:
one NN bf16 product's rotating operands and careful timer, the model's plan as a launch, and the
command line that runs a probe over a list of shapes. Needs torch with CUDA when called.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from collections.abc import Callable
from typing import Any, NamedTuple

from jtblas.bench import contenders, shapes


class Product(NamedTuple):
    """One M x N x K product (NN, bf16) on the GPU, as `jtblas bench` sets it up."""

    shape: shapes.Shape
    nbuf: int  # operand sets rotated through, enough to cover the L2 (contenders.operand_sets)
    ops: contenders.TorchOperands
    careful: Callable[[Callable[[int], object]], float]  # launch -> seconds, the bench's careful timing


def product(torch, timer, text: str, l2_bytes: int) -> Product:
    """Operands for the product named `text` ("MxNxK") and its careful timer."""
    m, n, k = (int(v) for v in text.lower().split("x"))
    shape = shapes.Shape(name=text, set="probe", group="probe", m=m, n=n, k=k, layout="NN", dtype="bfloat16")
    nbuf = contenders.operand_sets(shape.bytes_moved, l2_bytes)
    ops = contenders.TorchOperands(torch, shape, nbuf)
    return Product(shape, nbuf, ops, lambda launch: timer.time(launch, nbuf, target_s=2e-3, replays=7))


def plan_launch(ops: contenders.TorchOperands, shape: shapes.Shape) -> tuple[Any, Callable[[int], object]]:
    """(plan, launch): the model's plan for `shape` on this GPU, as `jtblas.matmul` would run it
    (copies included when it repacks)."""
    from jtblas import hardware, model

    plan = model.plan_for_problem(shape.problem(), hardware.detect())
    launch = (contenders.repacked_launcher(ops, plan) if plan.repacks
              else contenders.kernel_launcher(ops, plan.kernel_problem, plan.config))
    return plan, launch


def baselines(ops: contenders.TorchOperands, shape: shapes.Shape, careful: Callable) -> dict:
    """What a probe's row starts with: cuBLAS's time, the model's plan (config, time, max
    relative error against fp32) on the product, timed by `careful`."""
    row = dict(cublas_s=careful(contenders.cublas_launcher(ops)))
    plan, launch = plan_launch(ops, shape)
    row.update(plan_config=plan.config.short(), plan_s=careful(launch), plan_err=ops.error(launch))
    return row


def measure_entry(entry: dict, measure: Callable[[], dict]) -> dict:
    """`entry` updated with what `measure()` returns, or with its error (e.g. a config out of
    shared memory): a probe records it and goes on."""
    try:
        entry.update(measure())
    except Exception as error:  # noqa: BLE001 - one config failing must not end the probe
        entry["error"] = str(error)[:200]
    return entry


def baseline_line(row: dict, plan_label: str = "plan") -> str:
    """The start of a probe's summary line: the shape, cuBLAS's and the plan's TFLOP/s."""
    tflops = row["flops"] / 1e12
    return (f"{row['shape']:>16}  cuBLAS {tflops / row['cublas_s']:5.0f}  {plan_label} {tflops / row['plan_s']:5.0f} "
            f"({row['plan_config']})")


def main(doc: str, default_shapes: str, probe_shape: Callable[..., dict], summary_line: Callable[[dict], str],
         argv: list[str] | None = None) -> None:
    """`--shapes` (comma-separated MxNxK) and `--json FILE`: runs `probe_shape(torch, timer, text,
    sms, l2_bytes)` on each shape, prints `summary_line(row)` and writes the rows so far to the
    JSON file after every shape."""
    import torch

    from jtblas.bench import timing

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--shapes", default=default_shapes)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    props = torch.cuda.get_device_properties(0)
    timer = timing.GraphTimer()
    results = []
    for text in args.shapes.split(","):
        row = probe_shape(torch, timer, text, props.multi_processor_count, props.L2_cache_size)
        print(summary_line(row), flush=True)
        results.append(row)
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(results, indent=1))
