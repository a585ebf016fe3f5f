"""The fused layer against XLA's fused dot + bias + activation (+ residual), through JAX.

    python benchmarks/fused_layer.py [--out FILE] [--max-products N] [--layers gate_up ...]

The forward products of the corpus's layers that carry an epilogue (`jtblas/bench/shapes/models.csv`,
regimes prefill, train and inference): the MLP's up projection, y = act(x·W + b) with each
family's activation (GPT-2: tanh GELU; BERT and ViT: exact GELU; T5: ReLU), the attention's qkv
projection, y = x·W + b, and its output projection with the residual, y = x·W + b + x (K = N
there, so the residual is the product's own input); then the gated families' gate-and-up
projection (`gate_up`, one [K, 2F] weight, every regime), y = act(x·W_gate) · (x·W_up) (Llama,
Mistral, Qwen, Phi-3, Mixtral: SiLU; Gemma 2: tanh GELU). Three contenders in the same jitted
slope loop (`jtblas.bench.jax_loop`, B changing every iteration), each product's rounds in turn:

  xla      the epilogue in jnp around `lax.dot_general`: what XLA fuses into its GEMM
  fused    `jtblas.matmul(x, w, bias=b, activation=..., residual=...)` (`gated=True` for
           gate_up): one launch
  unfused  `jtblas.matmul(x, w)` then the same jnp epilogue (what `jtblas.nn.Dense` ran before)

With `--tma`, a fourth where the model's plan of the bare product is the TMA kernel's (not for
gate_up, which that kernel does not run): `tma`, the fused launch forced onto that config (where
the fused pick is not the same config, what the epilogue moved the model's choice from).

Prints one line per product and writes the records (times in seconds) as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import time

import jax
import jax.numpy as jnp

import jtblas
from jtblas import hardware
from jtblas.bench import shapes, through_jax

# Each family's MLP activation, as jtblas names it (`jtblas.ACTIVATIONS`) and as jnp computes it.
FAMILY_ACTIVATIONS = {"gpt2": "gelu_tanh", "bert": "gelu", "vit": "gelu", "t5": "relu"}
JNP_ACTIVATIONS = {
    "gelu_tanh": lambda y: jax.nn.gelu(y, approximate=True),
    "gelu": lambda y: jax.nn.gelu(y, approximate=False),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
}
REGIMES = ("prefill", "train", "inference")
LAYERS = ("up", "qkv", "o", "gate_up")
# The gated families' gate activation (their config.json's hidden_act).
GATED_ACTIVATIONS = {"llama3": "silu", "mistral": "silu", "qwen": "silu", "phi3": "silu", "mixtral": "silu",
                     "gemma2": "gelu_tanh"}


def layer_products(max_products: int | None = None) -> list[tuple[shapes.Shape, str, str | None]]:
    """(shape, layer, activation) of every distinct epilogue-carrying forward product (a product
    several families share, with the same epilogue, once), the gated projections last."""
    found, seen = [], set()
    rows = shapes.load_set("models")
    for shape in rows:
        parts = shape.name.split(".")
        family = next((f for f in FAMILY_ACTIVATIONS if shape.family.startswith(f)), None)
        if family is None or shape.regime not in REGIMES or parts[2] != "fwd" or parts[1] not in ("up", "qkv", "o"):
            continue
        if parts[1] == "o" and shape.k != shape.n:
            continue
        activation = FAMILY_ACTIVATIONS[family] if parts[1] == "up" else None
        key = (shape.key(), parts[1], activation)
        if key in seen:
            continue
        seen.add(key)
        found.append((shape, parts[1], activation))
    for shape in rows:
        family = next((f for f in GATED_ACTIVATIONS if shape.family.startswith(f)), None)
        if family is None or shape.name.split(".")[1:3] != ["gate_up", "fwd"]:
            continue
        key = (shape.key(), "gate_up", GATED_ACTIVATIONS[family])
        if key not in seen:
            seen.add(key)
            found.append((shape, "gate_up", GATED_ACTIVATIONS[family]))
    return found[:max_products]


def contenders(shape: shapes.Shape, layer: str, activation: str | None, *, tma: bool = False,
                config: jtblas.Config | None = None) -> dict:
    """The contenders' `dot(a, b)` functions; with `tma`, `tma` too where `tma_twin` finds one;
    with `config`, the fused launch forced onto it."""
    if layer == "gate_up":
        return gated_contenders(activation, config=config)
    bias = jax.random.normal(jax.random.key(7), (shape.n,), jnp.dtype(shape.dtype))
    residual = layer == "o"

    def epilogue(y, x):
        y = y + bias
        if activation:
            y = JNP_ACTIVATIONS[activation](y)
        return y + x if residual else y

    def xla(a, b):
        y = jax.lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        return epilogue(y, a).astype(a.dtype)

    def fused(a, b):
        return jtblas.matmul(a, b, bias=bias, activation=activation, residual=a if residual else None,
                             config=config)

    def unfused(a, b):
        return epilogue(jtblas.matmul(a, b).astype(jnp.float32), a).astype(a.dtype)

    found = dict(xla=xla, jtblas=fused, unfused=unfused)
    twin = tma_twin(shape) if tma else None
    if twin is not None:
        found["tma"] = lambda a, b: jtblas.matmul(a, b, bias=bias, activation=activation,
                                                  residual=a if residual else None, config=twin)
    return found


def tma_twin(shape: shapes.Shape, hw=None):
    """The model's config for the bare product where it is the TMA kernel's (and nothing is
    repacked), else None: the config the fused launch would take were the TMA kernel offered."""
    from jtblas import model

    plan = model.plan_for_problem(shape.problem(), hw or hardware.detect())
    copies = plan.pad_a or plan.pad_b or plan.transpose_b
    return plan.config if plan.config.tma and not copies else None


def gated_contenders(activation: str, *, config: jtblas.Config | None = None) -> dict:
    """act(x·W[:, :F]) · (x·W[:, F:]), no bias (as in these families); with `config`, the fused
    launch forced onto it."""

    def glu(y):
        gate, up = jnp.split(y, 2, axis=-1)
        return JNP_ACTIVATIONS[activation](gate) * up

    def xla(a, b):
        y = jax.lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
        return glu(y).astype(a.dtype)

    def fused(a, b):
        return jtblas.matmul(a, b, activation=activation, gated=True, config=config)

    def unfused(a, b):
        return glu(jtblas.matmul(a, b).astype(jnp.float32)).astype(a.dtype)

    return dict(xla=xla, jtblas=fused, unfused=unfused)


def fused_problem(shape: shapes.Shape, layer: str, activation: str | None):
    """The problem the fused contender runs: the product with its epilogue."""
    if layer == "gate_up":
        return dataclasses.replace(shape.problem(), activation=activation, gated=True)
    return dataclasses.replace(shape.problem(), bias_dtype=shape.dtype, activation=activation or "",
                               residual_dtype=shape.dtype if layer == "o" else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="fused_layer.json")
    parser.add_argument("--max-products", type=int, default=None)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--time-budget", type=float, default=None, help="seconds: start no product after this")
    parser.add_argument("--layers", nargs="*", choices=LAYERS, default=LAYERS, help="time only these layers")
    parser.add_argument("--tma", action="store_true",
                        help="also the fused launch on the TMA config the model picks for the bare product")
    args = parser.parse_args()
    hw = hardware.detect()
    records = []
    start = time.perf_counter()
    products = [p for p in layer_products() if p[1] in args.layers][:args.max_products]
    for shape, layer, activation in products:
        if args.time_budget is not None and time.perf_counter() - start > args.time_budget:
            print(f"time budget spent: {len(records)} products timed")
            break
        # The plan recorded is the fused launch's: the product with its epilogue.
        record = through_jax.time_product([shape], l2_bytes=hw.l2_bytes, hardware=hw, trials=args.trials,
                                          dots=contenders(shape, layer, activation, tma=args.tma),
                                          problem=fused_problem(shape, layer, activation))
        record.update(layer=layer, activation=activation)
        records.append(record)
        seconds = {name: c.get("seconds") for name, c in record["contenders"].items()}
        errors = {name: c["error"] for name, c in record["contenders"].items() if "error" in c}
        line = f"{shape.m}x{shape.n}x{shape.k} {layer:3s} {activation or '-':9s}"
        if all(seconds.values()):
            line += (f" xla {seconds['xla'] * 1e6:8.1f} us  fused {seconds['jtblas'] * 1e6:8.1f}"
                     f" ({seconds['xla'] / seconds['jtblas']:.2f}x)  unfused {seconds['unfused'] * 1e6:8.1f}"
                     f" ({seconds['xla'] / seconds['unfused']:.2f}x)")
            if "tma" in seconds:
                line += f"  tma {seconds['tma'] * 1e6:8.1f} ({seconds['xla'] / seconds['tma']:.2f}x)"
        print(line, errors or "", flush=True)
    speedups = [r["contenders"]["xla"]["seconds"] / r["contenders"]["jtblas"]["seconds"] for r in records
                if all(c.get("seconds") for c in r["contenders"].values())]
    if speedups:
        geomean = math.exp(statistics.fmean(map(math.log, speedups)))
        print(f"fused layer / XLA's fused dot: geomean {geomean:.2f} over {len(speedups)} products "
              f"(min {min(speedups):.2f}, max {max(speedups):.2f})")
    twins = [r["contenders"]["jtblas"]["seconds"] / r["contenders"]["tma"]["seconds"] for r in records
             if "tma" in r["contenders"] and all(c.get("seconds") for c in r["contenders"].values())]
    if twins:
        geomean = math.exp(statistics.fmean(map(math.log, twins)))
        print(f"TMA twin / fused pick in speed: geomean {geomean:.3f} over {len(twins)} products "
              f"(min {min(twins):.3f}, max {max(twins):.3f})")
    with open(args.out, "w") as f:
        json.dump(dict(meta=through_jax.meta(3, args.trials), products=records), f, indent=1)


if __name__ == "__main__":
    main()
