"""Forward+backward step of an MLP block with jtblas.nn.Dense vs flax.linen.Dense, on the GPU.

The block is Dense(ffn) -> gelu -> Dense(hidden) on [tokens, hidden] bf16 activations; the step
is `jax.value_and_grad` of a scalar loss with respect to the parameters and the input (the six
GEMMs of training: two forward, two dx, two dw). Both variants share parameters and inputs and
are timed in the same run by the slope method of `matmul_vs_xla.slope_timer`.

    python benchmarks/mlp_block.py [--tokens 8192 --hidden 4096 --ffn 14336] [--repack-modes auto,never]
                                   [--no-bias] [--activation gelu|none] [--rounds 5]

`--no-bias` and `--activation none` strip the block down to its GEMMs (what XLA can fuse into
its GEMMs' epilogues, bias and GELU, a jax-triton custom call cannot take in).

`--repack-modes` times jtblas once per repack mode (`jtblas.ops.repack_mode`, read at trace time):
"auto" is the model's plan (which may copy a weight transposed for the dx GEMMs), "never" keeps
every GEMM on the caller's operands.

`--rounds N` compiles every variant once, then times them N times in turn (the order reversed every
other round): one run of the block moves by ±2-3% with the GPU's power-limited clock, so the
ratio reported is the median of the N rounds' ratios, with their range.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp

import jtblas
import jtblas.nn

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from matmul_vs_xla import slope_timer  # noqa: E402


ACTIVATIONS = {"gelu": nn.gelu, "none": lambda h: h}


class Block(nn.Module):
    hidden: int
    ffn: int
    dense: type = nn.Dense
    use_bias: bool = True
    activation: str = "gelu"

    @nn.compact
    def __call__(self, x):
        dense = dict(dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, use_bias=self.use_bias)
        h = self.dense(self.ffn, **dense)(x)
        return self.dense(self.hidden, **dense)(ACTIVATIONS[self.activation](h))


def step_function(block: Block, params):
    def loss(params, x):
        return jnp.mean(jnp.square(block.apply(params, x).astype(jnp.float32)))

    grad = jax.value_and_grad(loss, argnums=(0, 1))

    def step(x, _unused):
        value, (grads, dx) = grad(params, x)
        # One scalar from every gradient keeps all six GEMMs live; the product shape is x's.
        total = value + sum(g.reshape(-1)[0].astype(jnp.float32) for g in jax.tree.leaves(grads))
        return dx + total.astype(dx.dtype) * 0

    return step


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--ffn", type=int, default=14336)
    parser.add_argument("--repack-modes", default="auto")
    parser.add_argument("--no-bias", action="store_true", help="Dense layers without bias")
    parser.add_argument("--activation", choices=sorted(ACTIVATIONS), default="gelu")
    parser.add_argument("--rounds", type=int, default=1, help="times each variant this many times, in turn")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.repack_modes.split(",") if m.strip()]
    x = jax.random.normal(jax.random.key(0), (args.tokens, args.hidden), jnp.bfloat16)
    options = dict(use_bias=not args.no_bias, activation=args.activation)
    flax_block = Block(args.hidden, args.ffn, nn.Dense, **options)
    ours_block = Block(args.hidden, args.ffn, jtblas.nn.Dense, **options)
    params = flax_block.init(jax.random.key(1), x)
    # The same parameter tree serves both (jtblas.nn.Dense keeps Flax's names and shapes).
    flops = 6 * 2 * args.tokens * args.hidden * args.ffn
    print(f"MLP block fwd+bwd, {args.tokens} tokens, {args.hidden}->{args.ffn}->{args.hidden} bf16, "
          f"bias {options['use_bias']}, activation {args.activation}:", flush=True)
    timers = {"flax": slope_timer(step_function(flax_block, params), x, None, repeats=4)}
    for mode in modes:
        with jtblas.ops.repack_mode(mode):  # read while the step is traced (inside slope_timer)
            timers[mode] = slope_timer(step_function(ours_block, params), x, None, repeats=4)
    rounds = []
    for index in range(args.rounds):
        order = list(timers) if index % 2 == 0 else list(reversed(timers))
        rounds.append({name: timers[name](3) for name in order})
    flax_seconds = statistics.median(r["flax"] for r in rounds)
    print(f"  flax.linen.Dense           {flax_seconds * 1e3:8.3f} ms  ({flops / flax_seconds / 1e12:.0f} TFLOP/s)",
          flush=True)
    ours, ratios = {}, {}
    for mode in modes:
        ours[mode] = statistics.median(r[mode] for r in rounds)
        ratios[mode] = sorted(r["flax"] / r[mode] for r in rounds)
        spread = ""
        if len(rounds) > 1:
            spread = f" (median of {len(rounds)} rounds, {ratios[mode][0]:.3f}-{ratios[mode][-1]:.3f})"
        print(f"  jtblas.nn.Dense ({mode:9s}) {ours[mode] * 1e3:8.3f} ms  ({flops / ours[mode] / 1e12:.0f} TFLOP/s)"
              f"  speed-up (flax time / jtblas time): {statistics.median(ratios[mode]):.3f}{spread}", flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(dict(
            device=jax.devices()[0].device_kind, jax=jax.__version__, tokens=args.tokens,
            hidden=args.hidden, ffn=args.ffn, **options, flax_seconds=flax_seconds, jtblas_seconds=ours,
            speedup_median={mode: statistics.median(r) for mode, r in ratios.items()}, rounds=rounds,
        ), indent=1))


if __name__ == "__main__":
    main()
