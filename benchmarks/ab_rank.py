"""Offline: how the model orders configs that were timed against each other through JAX.

    python benchmarks/ab_rank.py benchmarks/results/2026-12-01-h200-session15/pick_ab-*.json \
        benchmarks/results/2026-12-01-h200-session15/configs_*.json [--margin 0.03] [--gpu h200]

Reads what `benchmarks/pick_ab.py` writes (per shape, the seconds of every round of each config:
the "before" and "after" picks, or the configs named by --configs, XLA's dot left out), asks the
model (as it is now) for its order of the configs of each shape, and counts the pairs whose
measured medians differ by more than the margin: how many the model orders the same way, and
which it gets wrong, largest first. The model's order is `select.rank`'s, tie-breaks included,
for configs among its candidates; others are placed by predicted time. No GPU needed: a check of
a model change against fresh timings of the current kernels, beside `rerank.py`'s exhaustive
first passes of older ones.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from jtblas import hardware as hardware_lib
from jtblas.config import Config, Problem
from jtblas.model import cost, select

sys.path.insert(0, str(Path(__file__).parent))
from pick_ab import shape_from_key  # noqa: E402


def load_timings(paths: list[str]) -> dict[str, dict[str, float]]:
    """{shape key: {config name: median seconds}} over the files (medians of the files' medians
    where a config was timed in several)."""
    medians: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for path in paths:
        for row in json.loads(Path(path).read_text())["rows"]:
            for name, seconds in row["seconds"].items():
                if name == "xla":
                    continue
                config = row.get(name, name)  # pick_ab's "before" / "after" name a config
                medians[row["shape"]][config].append(statistics.median(seconds))
    return {key: {name: statistics.median(values) for name, values in configs.items()}
            for key, configs in medians.items()}


def model_order(problem: Problem, names: list[str], hardware) -> dict[str, tuple[float, int]]:
    """Sort key of each named config: its predicted seconds, then its place in `select.rank` (the
    model's tie-breaks); configs outside the candidates come after the ranked ones they tie with."""
    ranked = {e.config.short(): place for place, e in enumerate(select.rank(problem, hardware))}
    constants = hardware.model_constants()
    keys = {}
    for name in names:
        predicted = cost.estimate(Config.from_short(name), problem, hardware, constants).predicted_seconds
        keys[name] = (predicted, ranked.get(name, len(ranked)))
    return keys


def compare(timings: dict[str, dict[str, float]], hardware, margin: float) -> tuple[int, list[tuple]]:
    """(pairs ordered as measured, [(measured ratio, shape, faster, slower) of the pairs the model
    orders the other way])."""
    agree, wrong = 0, []
    for key, configs in timings.items():
        order = model_order(shape_from_key(key).problem(), list(configs), hardware)
        for first, second in itertools.combinations(configs, 2):
            faster, slower = sorted((first, second), key=configs.get)
            ratio = configs[slower] / configs[faster]
            if ratio < 1 + margin:
                continue
            if order[faster] < order[slower]:
                agree += 1
            else:
                wrong.append((ratio, key, faster, slower))
    return agree, sorted(wrong, reverse=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="JSON files written by benchmarks/pick_ab.py")
    parser.add_argument("--margin", type=float, default=0.03, help="pairs closer than this are left out")
    parser.add_argument("--gpu", default="h200", help="built-in hardware description, or a profile JSON")
    args = parser.parse_args(argv)
    try:
        timings = load_timings(args.files)
        hardware = hardware_lib.get(args.gpu)
    except (OSError, ValueError, KeyError) as error:
        print(f"ab_rank: {error}", file=sys.stderr)
        return 2
    agree, wrong = compare(timings, hardware, args.margin)
    total = agree + len(wrong)
    print(f"{len(timings)} shapes, {total} pairs more than {args.margin:.0%} apart: the model orders "
          f"{agree} as measured ({agree / max(total, 1):.0%}), {len(wrong)} the other way")
    for ratio, key, faster, slower in wrong:
        print(f"  {key:30s} {faster:26s} ran {ratio:.3f}x faster than {slower}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
