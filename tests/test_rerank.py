"""benchmarks/rerank.py: the model re-ranked offline against cached exhaustive timings."""

import json
import math
import sys
from pathlib import Path

import pytest

import jtblas
from jtblas import hardware, model
from jtblas.config import Problem

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import rerank  # noqa: E402


def write_cache(path: Path, shapes) -> dict:
    """A cache in jtblas bench's format: per shape, first-pass times of some candidates. The
    model's pick (what `jtblas.select` returns, ties broken as it breaks them) gets 2 ms, the
    others 1 ms apart from one slowest; returns each shape's pick."""
    entries, picks = {}, {}
    for m, n, k, layout in shapes:
        ta, tb = layout[0] == "T", layout[1] == "T"
        problem = Problem(m=m, n=n, k=k, transpose_a=ta, transpose_b=tb)
        space = jtblas.candidates(m, n, k, transpose_a=ta, transpose_b=tb, hardware="h200")
        pick = model.select_for_problem(problem, hardware.H200)
        others = [c for c in space if c != pick][:5]
        first = [[pick.short(), 2e-3, None]] + [[c.short(), 1e-3, None] for c in others]
        first.append(["not-a-candidate w9", 1e-9, None])  # gone from the space: ignored
        first.append([others[0].short() + " x", None, "compile failed"])
        key = f"{m}x{n}x{k} bfloat16 {layout}"
        entries[f"{key}|NVIDIA H200|abc"] = dict(first=first)
        entries[f"{key}|NVIDIA H200|old"] = dict(first=first[:2])  # a less complete entry
        picks[key] = pick.short()
    path.write_text(json.dumps(entries))
    return picks


def test_rerank_reports_pick_over_best(tmp_path, capsys):
    picks = write_cache(tmp_path / "cache.json", [(1024, 1024, 1024, "NN"), (1, 4096, 4096, "NN"),
                                                  (4096, 4096, 4096, "NT")])
    entries = rerank.load_cache(tmp_path / "cache.json")
    assert len(entries) == 3 and all(len(times) == 7 for times in entries.values())
    ranked = rerank.rank(entries, hardware.H200)
    assert {r.key: r.pick for r in ranked} == picks
    assert all(r.ratio == pytest.approx(0.5) for r in ranked)
    assert {r.group for r in ranked} == {"small-NN", "decode-NN", "large-NT"}
    s = rerank.statistics([r.ratio for r in ranked])
    assert s["count"] == 3 and s["geomean"] == pytest.approx(0.5) and s["min"] == pytest.approx(0.5)
    assert rerank.main(["--cache", str(tmp_path / "cache.json"), "--halves", "--worst", "2"]) == 0
    text = capsys.readouterr().out
    assert "geomean 0.500" in text and "even:" in text and "worst 2:" in text
    assert rerank.main(["--cache", str(tmp_path / "missing.json")]) == 2


def test_statistics_on_known_values():
    s = rerank.statistics([1.0, 0.5, 0.25] + [1.0] * 7)
    assert s["geomean"] == pytest.approx(math.exp((math.log(0.5) + math.log(0.25)) / 10))
    assert s["p10"] == 0.5 and s["min"] == 0.25
    assert rerank.statistics([])["geomean"] is None


def test_glitched_readings_are_left_out(tmp_path):
    """A reading over GLITCH_RATIO times every other stage count of its tile is dropped (a
    572 µs first pass of a 13 µs config was in session 3's cache); a tile slow at every stage
    count, or alone, is kept."""
    times = {"64x64x128 w4 s4 g8": 13e-6, "64x64x128 w4 s5 g8": 13.1e-6, "64x64x128 w4 s6 g8": 572e-6,
             "128x128x64 w4 s3 g8": 90e-6, "128x128x64 w4 s4 g8": 95e-6, "16x16x32 w4 s3 g1": 1e-3}
    assert rerank.glitches(times) == {"64x64x128 w4 s6 g8"}
    (tmp_path / "cache.json").write_text(json.dumps(
        {"64x64x4096 bfloat16 NN|NVIDIA H200|abc": dict(first=[[n, t, None] for n, t in times.items()])}))
    kept = rerank.load_cache(tmp_path / "cache.json")["64x64x4096 bfloat16 NN"]
    assert set(kept) == set(times) - {"64x64x128 w4 s6 g8"}
