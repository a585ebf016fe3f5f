"""jtblas under `jax.jit` with sharded operands on the visible GPUs: a check, then a timing.

    python benchmarks/sharded_step.py [--batch 8192] [--width 4096] [--hidden 14336] [--steps 20]

Check: for each sharding pattern (data parallel, columns, rows with a psum, FSDP-like) a bf16
product and its gradients by `jtblas.matmul` and by `jnp.dot`, both jitted on a mesh of every
visible device: relative error, output sharding, collectives by kind, and whether the Triton call
is in the compiled program (the kernel ran per device, not a fallback).

Timing: one training step (SGD) of a two-layer MLP (width -> hidden -> width, bf16 parameters),
`jtblas.nn.Dense` against `flax.linen.Dense`, data parallel (batch split, parameters replicated)
and tensor parallel (the first kernel split by columns, the second by rows), the median of
`--steps` dispatched steps after a warm-up, through JAX. Needs two or more GPUs; prints one JSON
line per result.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import time

import flax.linen
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jtblas
import jtblas.nn

_COLLECTIVE = re.compile(r"\s(all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(")
# x [M, K] and w [K, N] placements on a one-axis mesh.
PATTERNS = {
    "data_parallel": (P("x", None), P()),
    "columns": (P(), P(None, "x")),
    "rows_psum": (P(None, "x"), P("x", None)),
    "fsdp": (P("x", None), P("x", None)),
}


def collectives(text: str) -> dict[str, int]:
    return dict(collections.Counter(_COLLECTIVE.findall(text)))


def check(mesh: Mesh, m: int, n: int, k: int) -> None:
    rng = np.random.default_rng(0)
    x0 = jnp.asarray(rng.standard_normal((m, k)), jnp.bfloat16)
    w0 = jnp.asarray(rng.standard_normal((k, n)), jnp.bfloat16)
    y64 = np.asarray(x0, np.float64) @ np.asarray(w0, np.float64)
    for pattern, (x_spec, w_spec) in PATTERNS.items():
        x = jax.device_put(x0, NamedSharding(mesh, x_spec))
        w = jax.device_put(w0, NamedSharding(mesh, w_spec))
        row = {"check": pattern, "shape": [m, n, k]}
        for name, product in (("jtblas", jtblas.matmul), ("xla", jnp.dot)):
            forward = jax.jit(product)
            grads = jax.jit(jax.grad(lambda a, b, f=product: jnp.sum(f(a, b).astype(jnp.float32) ** 2),
                                     argnums=(0, 1)))
            y = forward(x, w)
            grads(x, w)
            text = forward.lower(x, w).compile().as_text()
            grad_text = grads.lower(x, w).compile().as_text()
            error = np.linalg.norm(np.asarray(y, np.float64) - y64) / np.linalg.norm(y64)
            row[name] = {"spec": str(y.sharding.spec), "rel_error": float(error),
                         "collectives": collectives(text), "grad_collectives": collectives(grad_text),
                         "triton_call": "triton" in text.lower()}
        print(json.dumps(row), flush=True)


class MLP(flax.linen.Module):
    hidden: int
    width: int
    dense: type = flax.linen.Dense

    @flax.linen.compact
    def __call__(self, x):
        x = jax.nn.gelu(self.dense(self.hidden, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, name="up")(x))
        return self.dense(self.width, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, name="down")(x)


PARAM_SPECS = {
    "data_parallel": ({"up": {"kernel": P(), "bias": P()}, "down": {"kernel": P(), "bias": P()}}, P("x")),
    "tensor_parallel": ({"up": {"kernel": P(None, "x"), "bias": P("x")},
                         "down": {"kernel": P("x", None), "bias": P()}}, P()),
}


def time_steps(mesh: Mesh, batch: int, width: int, hidden: int, steps: int) -> None:
    x0 = jax.random.normal(jax.random.key(0), (batch, width), jnp.bfloat16)
    target0 = jax.random.normal(jax.random.key(1), (batch, width), jnp.bfloat16)
    params0 = MLP(hidden, width).init(jax.random.key(2), x0[:1])
    for pattern, (specs, data_spec) in PARAM_SPECS.items():
        params = jax.tree.map(lambda p, s: jax.device_put(p, NamedSharding(mesh, s)), params0, {"params": specs})
        x, target = (jax.device_put(a, NamedSharding(mesh, data_spec)) for a in (x0, target0))
        row = {"step": pattern, "batch": batch, "width": width, "hidden": hidden, "devices": mesh.size}
        for name, dense in (("jtblas", jtblas.nn.Dense), ("flax", flax.linen.Dense)):
            model = MLP(hidden, width, dense=dense)

            @jax.jit
            def step(params, x, target, model=model):
                def loss(weights):
                    return jnp.mean((model.apply(weights, x).astype(jnp.float32) - target) ** 2)

                value, grads = jax.value_and_grad(loss)(params)
                return jax.tree.map(lambda q, g: q - 1e-3 * g.astype(q.dtype), params, grads), value

            trained = params
            for _ in range(3):
                trained, value = step(trained, x, target)
            jax.block_until_ready(trained)
            times = []
            for _ in range(steps):
                start = time.perf_counter()
                trained, value = step(trained, x, target)
                jax.block_until_ready(trained)
                times.append(time.perf_counter() - start)
            text = step.lower(params, x, target).compile().as_text()
            flops = 6 * batch * width * hidden * 2  # forward and two backward products per layer
            median = statistics.median(times)
            row[name] = {"step_ms": median * 1e3, "tflops": flops / median / 1e12, "loss": float(value),
                         "collectives": collectives(text)}
        row["jtblas_over_flax"] = row["flax"]["step_ms"] / row["jtblas"]["step_ms"]
        print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=14336)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--check-shape", default="1024x2048x768", help="M x N x K of the check's product")
    args = parser.parse_args()
    devices = jax.devices()
    if len(devices) < 2:
        raise SystemExit(f"sharded_step.py needs two or more devices, JAX sees {len(devices)}: {devices}")
    mesh = Mesh(np.array(devices), ("x",))
    print(json.dumps({"jax": jax.__version__, "devices": [str(d) for d in devices]}), flush=True)
    check(mesh, *(int(v) for v in args.check_shape.lower().split("x")))
    time_steps(mesh, args.batch, args.width, args.hidden, args.steps)


if __name__ == "__main__":
    main()
