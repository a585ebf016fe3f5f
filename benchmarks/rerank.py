"""Offline: how well the model ranks, against the exhaustive timings an oracle cache holds.

    python benchmarks/rerank.py --cache benchmarks/results/2026-11-30-h200-session2/oracle_cache.json \
        [--gpu h200 | --profile FILE] [--worst 10] [--halves]

`jtblas bench` caches, per shape, the first-pass time of every config of `jtblas.candidates()`
it searched. This script asks the model (as it is now, on the hardware description given) for
its pick among the cached configs that are still candidates — the ranking on the caller's
operands; repacking is outside the oracle's space — and reports pick ÷ best first-pass
time: geometric mean, 10th percentile, minimum, by group and the worst shapes. No GPU needed.
It is how a change of the equations or of a profile is checked before a GPU run; the numbers
run ~0.02 below the benchmark's, whose pick and leaders are re-timed carefully (first-pass times
are single measurements). `--halves` reports even and odd shapes apart, a check that a change is
not fitted to some of them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from jtblas.bench.report import geomean


@dataclass(frozen=True)
class Ranked:
    """One shape: the model's pick among the timed candidates, and the fastest of them."""

    key: str
    layout: str
    m: int
    n: int
    k: int
    pick: str
    best: str
    ratio: float  # best time / pick time (≤ 1)
    repacked: bool = False  # the model's plan copies operands first (the bench reports it apart)

    @property
    def group(self) -> str:
        size = "decode" if self.m <= 16 else ("small" if self.m * self.n * self.k < 2**33 else "large")
        return f"{size}-{self.layout}"


# A first-pass reading this many times above every other stage count of the same tile is taken
# for a glitch (one-off single-launch readings of 10x the kernel were seen on the H200; before
# session 4's `oracle.first_pass_time` a config could be ruled out on one) and left out.
GLITCH_RATIO = 4.0


def load_cache(path: str | Path) -> dict[str, dict[str, float]]:
    """{shape key ("MxNxK dtype layout"): {config name: first-pass seconds}}, the most complete
    entry per shape when the cache holds several (other candidate lists, other GPUs), without
    readings that `glitches` flags."""
    entries: dict[str, dict[str, float]] = {}
    for key, entry in json.loads(Path(path).read_text()).items():
        shape_key = key.split("|")[0]
        times = {name: t for name, t, error in entry.get("first", []) if t and not error}
        if len(times) > len(entries.get(shape_key, {})):
            entries[shape_key] = times
    return {key: {name: t for name, t in times.items() if name not in glitches(times)}
            for key, times in entries.items()}


def glitches(times: dict[str, float]) -> set[str]:
    """Configs whose time is over GLITCH_RATIO times that of every other stage count of the same
    tile, warps, group and split (names differing only in " sN"; needs at least one sibling)."""
    siblings: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for name, t in times.items():
        siblings[re.sub(r" s\d+", " s*", name)].append((name, t))
    flagged = set()
    for family in siblings.values():
        for name, t in family:
            others = [u for other, u in family if other != name]
            if others and t > GLITCH_RATIO * max(others):
                flagged.add(name)
    return flagged


def rank(entries: dict[str, dict[str, float]], hardware) -> list[Ranked]:
    """The model's pick per shape among the timed configs that are still candidates."""
    from jtblas import model
    from jtblas.config import Problem
    from jtblas.model import select

    out = []
    for key, times in sorted(entries.items()):
        dims, dtype, layout = key.split()
        m, n, k = (int(v) for v in dims.split("x"))
        ta, tb = layout[0] == "T", layout[1] == "T"
        problem = Problem(m=m, n=n, k=k, dtype=dtype, out_dtype=dtype, transpose_a=ta, transpose_b=tb)
        # The model's own order (select.rank: its tie-breaks too), restricted to the timed configs.
        timed = [e.config for e in select.rank(problem, hardware) if e.config.short() in times]
        if not timed:
            continue
        pick = timed[0]
        best = min((c.short() for c in timed), key=times.get)
        plan = model.plan_for_problem(problem, hardware)
        out.append(Ranked(key=key, layout=layout, m=m, n=n, k=k, pick=pick.short(), best=best,
                          ratio=times[best] / times[pick.short()],
                          repacked=bool(plan.pad_a or plan.pad_b or plan.transpose_b)))
    return out


def statistics(ratios: list[float]) -> dict:
    """Geometric mean, 10th percentile (nearest rank below) and minimum of pick ÷ best."""
    values = sorted(ratios)
    if not values:
        return dict(count=0, geomean=None, p10=None, min=None)
    return dict(count=len(values), geomean=geomean(values), p10=values[len(values) // 10], min=values[0])


def report(ranked: list[Ranked], *, worst: int = 10, halves: bool = False) -> str:
    def line(label: str, s: dict) -> str:
        if not s["count"]:
            return f"{label:>12}: no shapes"
        return f"{label:>12}: geomean {s['geomean']:.3f}  p10 {s['p10']:.3f}  min {s['min']:.3f}  ({s['count']} shapes)"

    repacked = [r for r in ranked if r.repacked]
    lines = [line("all", statistics([r.ratio for r in ranked])),
             line("not repacked", statistics([r.ratio for r in ranked if not r.repacked])),
             line("repacked", statistics([r.ratio for r in repacked])) + "  (their plain pick; the "
             "model runs a copy + kernel instead)"]
    if halves:
        lines += [line("even", statistics([r.ratio for r in ranked[0::2]])),
                  line("odd", statistics([r.ratio for r in ranked[1::2]]))]
    groups = defaultdict(list)
    for r in ranked:
        groups[r.group].append(r.ratio)
    lines += [line(name, statistics(values)) for name, values in sorted(groups.items())]
    lines.append(f"worst {worst}:")
    for r in sorted(ranked, key=lambda r: r.ratio)[:worst]:
        lines.append(f"  {r.ratio:.3f}  {r.key:34s} pick {r.pick:24s} best {r.best:24s}"
                     + ("  (repacked)" if r.repacked else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from jtblas import hardware as hardware_lib

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, help="an oracle_cache.json written by jtblas bench")
    parser.add_argument("--gpu", default="h200", help="built-in hardware description (default h200)")
    parser.add_argument("--profile", default=None, help="a calibrated profile JSON instead of --gpu")
    parser.add_argument("--worst", type=int, default=10)
    parser.add_argument("--halves", action="store_true", help="also even and odd shapes apart")
    args = parser.parse_args(argv)
    try:
        entries = load_cache(args.cache)
        hardware = hardware_lib.get(args.profile or args.gpu)
    except (OSError, ValueError, KeyError) as error:
        print(f"rerank: {error}", file=sys.stderr)
        return 2
    print(f"{len(entries)} cached shapes, {hardware.name} ({hardware.source})")
    print(report(rank(entries, hardware), worst=args.worst, halves=args.halves))
    return 0


if __name__ == "__main__":
    sys.exit(main())
