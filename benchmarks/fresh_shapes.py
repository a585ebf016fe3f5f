"""A seeded draw of products no change to the model was tuned on, to check one on: the "fresh" set
of `select_latency.py --dump` and `picks_ab.py`. A neighbour module of theirs, not the package's,
so that the current scripts draw the same shapes with an older checkout's package on the path."""

from __future__ import annotations

import functools
import random

from jtblas.bench import shapes

SEED = 20261206


@functools.cache
def fresh(count: int = 120, *, seed: int = SEED) -> tuple[shapes.Shape, ...]:
    """`count` bf16 products drawn at random, none a product of the corpus (`shapes.load()`), drawn
    once per process (`picks_ab.py` asks for them in several places). M is
    log-uniform over 1-16384, N and K over 256-16384, three in four rounded to a multiple of 64 and
    the rest left as drawn (odd and misaligned sizes); layouts NN, NT and TN alike. The same seed
    draws the same shapes on every machine (Python's `random`, Mersenne Twister)."""
    rng = random.Random(seed)
    taken = {shape.problem() for shape in shapes.load()}
    drawn: list[shapes.Shape] = []
    while len(drawn) < count:
        m = round(2 ** rng.uniform(0, 14))
        n, k = (round(2 ** rng.uniform(8, 14)) for _ in range(2))
        if rng.random() < 0.75:
            n, k = (max(64, 64 * round(size / 64)) for size in (n, k))
        shape = shapes.Shape(name=f"fresh.{len(drawn)}", set="fresh", family="fresh", regime="fresh", m=m, n=n, k=k,
                             layout=rng.choice(("NN", "NT", "TN")), dtype="bfloat16")
        if shape.problem() not in taken:
            taken.add(shape.problem())
            drawn.append(shape)
    return tuple(drawn)
