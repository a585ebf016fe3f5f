"""Batched corpus products: XLA's dot, the model's pick (or its best pointer plan) and the model's
best TMA plan (one persistent grid over the batch), forced, in the same jitted loop through JAX.

Usage: `python batch_ab.py OUT.json [FAMILY]` (FAMILY: only shapes whose family contains it)."""
import json
import sys

from jtblas import hardware, model
from jtblas.bench import jax_loop, shapes, through_jax
from jtblas.model import cost

hw = hardware.detect()
only = sys.argv[2] if len(sys.argv) > 2 else ""
seen, records = set(), []
for shape in sorted(shapes.load(), key=lambda s: -s.batch * s.m * s.n):
    if shape.batch == 1 or shape.key() in seen or only not in shape.family:
        continue
    seen.add(shape.key())
    problem = shape.problem()
    pick = model.plan_for_problem(problem, hw).config
    tmas = [c for c in model.candidates_for_problem(problem, hw) if c.tma and c.split_k == 1]
    if not tmas:
        continue
    best_tma = min(tmas, key=lambda c: cost.predicted_seconds(c, problem, hw))
    pointer = [c for c in model.candidates_for_problem(problem, hw) if not c.tma]
    best_ptr = pick if not pick.tma else min(pointer, key=lambda c: cost.predicted_seconds(c, problem, hw))
    dots = {"xla": jax_loop.xla_dot(shape), "pointer": jax_loop.jtblas_dot(shape, best_ptr),
            "tma": jax_loop.jtblas_dot(shape, best_tma)}
    record = through_jax.time_product([shape], l2_bytes=hw.l2_bytes, hardware=hw, rounds=3, trials=3, dots=dots)
    record.update(pointer=best_ptr.short(), tma=best_tma.short(), pick=pick.short(),
                  pred_pointer=cost.predicted_seconds(best_ptr, problem, hw),
                  pred_tma=cost.predicted_seconds(best_tma, problem, hw))
    records.append(record)
    t = {k: v.get("seconds") for k, v in record["contenders"].items()}
    if all(t.values()):
        print(f"{shape.key():34s} XLA {t['xla'] * 1e6:8.1f}  "
              f"pointer {t['pointer'] * 1e6:8.1f} ({t['xla'] / t['pointer']:.2f}x, "
              f"pred {record['pred_pointer'] * 1e6:7.1f}) {best_ptr.short():22s} "
              f"TMA {t['tma'] * 1e6:8.1f} ({t['xla'] / t['tma']:.2f}x, "
              f"pred {record['pred_tma'] * 1e6:7.1f}) {best_tma.short():24s} pick {pick.short()}", flush=True)
    else:
        print(shape.key(), "ERROR", {k: v.get("error") for k, v in record["contenders"].items()}, flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(records, f, indent=1, default=str)
