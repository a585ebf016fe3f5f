"""Batched products and launch limits: batch-aware planning (waves over batch x tiles, the
split-K workspace cap), grids within CUDA's limits, 64-bit offsets, and errors for products that
cannot fit; plus the whole benchmark corpus's unbatched picks held fixed."""

import json
import pathlib

from jtblas import hardware, model
from jtblas.bench import shapes

DATA = pathlib.Path(__file__).resolve().parent / "data"


def _pick_name(plan: model.Plan) -> str:
    flags = "".join(f for f, on in ((" +A", plan.pad_a), (" +B", plan.pad_b), (" +Bt", plan.transpose_b)) if on)
    return plan.config.short() + flags


def test_corpus_picks_unchanged_without_a_batch():
    """Every unbatched row of the benchmark sets keeps the pick (config and repacked operands) it
    had before the model learned the batch: `tests/data/corpus_picks.json`, H200, 473 products."""
    expected = json.loads((DATA / "corpus_picks.json").read_text())
    h200 = hardware.get("h200")
    picks = {s.key(): _pick_name(model.plan_for_problem(s.problem(), h200))
             for s in shapes.load(shapes.SET_NAMES)}
    changed = {key: (expected.get(key), pick) for key, pick in picks.items() if expected.get(key) != pick}
    assert not changed, f"{len(changed)} picks changed (was, now): {dict(list(changed.items())[:10])}"
    assert len(picks) == len(expected)
