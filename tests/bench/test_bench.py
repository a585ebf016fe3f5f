"""CPU tests of `jtblas bench`: shape sets and their sources, the through-JAX slope loop and its
records, statistics and report, the command line without a GPU (and without torch), and the torch
runner's oracle search and cache; the gpu-marked smoke test runs the real benchmark on tiny shapes."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jtblas import timing
from jtblas.bench import (
    cli, contenders, jax_loop, jax_report, make_shapes, oracle, report, shapes, through_jax, torch_runner,
)
from jtblas.config import Config, Problem
from tests.reference import relative_error

REPO = Path(__file__).resolve().parents[2]


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


# ------------------------------------------------------------------------------ shape sets


def test_shape_sets_parse_and_are_valid():
    total = 0
    for name in shapes.SET_NAMES:
        rows = shapes.load_set(name)
        assert rows, name
        total += len(rows)
        for s in rows:
            assert all(isinstance(x, int) and x > 0 for x in (s.m, s.n, s.k)), s
            assert s.layout in shapes.LAYOUTS, s
            assert s.dtype in ("bfloat16", "float16", "float32"), s
            assert name == "models" or s.flops <= 3.0e12, s  # the synthetic sets stay short
            s.problem()  # a valid Problem
    assert total >= 500


def test_quick_subset_comes_first_and_covers_every_set():
    quick = shapes.load(quick=True)
    assert 8 <= len(quick) <= 30
    assert {s.set for s in quick} == set(shapes.SET_NAMES)
    full = shapes.load()
    assert full[: len(quick)] == quick
    assert len(full) == sum(len(shapes.load_set(n)) for n in shapes.SET_NAMES)


def test_every_family_cites_its_config_and_has_every_regime():
    families = shapes.load_families()
    rows = shapes.load_set("models")
    assert {r.family for r in rows} == set(families) and len(families) >= 17
    for name, row in families.items():
        assert re.fullmatch(r"https://huggingface\.co/[\w.-]+/[\w.-]+/blob/main/config\.json", row["source"]), name
        mine = [r for r in rows if r.family == name]
        regimes = {r.regime for r in mine}
        expected = {"decoder": {"decode", "prefill", "train"}, "encoder": {"inference", "train"},
                    "experts": {"expert", "train"}}[row["kind"]]
        assert regimes == expected, name
        assert {r.layout for r in mine if r.regime == "train"} == {"NN", "NT", "TN"}, name
        if row["kind"] == "decoder":
            assert {r.m for r in mine if r.regime == "decode"} == {1, 4, 16, 64}, name
            assert {r.m for r in mine if r.regime == "prefill"} == {2048, 8192}, name
            assert any(r.name.startswith(f"{name}.lm_head.") and r.n == int(row["vocab"]) for r in mine), name
    by_name = {r.name: r for r in rows}
    # dx of W[in, out]: M = tokens, N = in, K = out, B read transposed; dw: A read transposed.
    dx, dw = by_name["llama3-8b.down.dx.T8192"], by_name["llama3-8b.down.dw.T8192"]
    assert (dx.m, dx.n, dx.k, dx.layout) == (8192, 14336, 4096, "NT")
    assert (dw.m, dw.n, dw.k, dw.layout) == (14336, 4096, 8192, "TN")
    assert (by_name["gpt2-xl.lm_head.fwd.M1"].n, by_name["gemma2-9b.o.fwd.M1"].k) == (50257, 4096)


def test_the_committed_sets_are_what_make_shapes_writes(tmp_path):
    make_shapes.main(tmp_path)
    for path in sorted(shapes.SHAPES_DIR.glob("*.csv")):
        assert (tmp_path / path.name).read_text() == path.read_text(), path.name
    odd = shapes.load_set("odd")
    assert len(odd) >= 20 and all(x % 8 and 500 <= x <= 16000 for s in odd for x in (s.m, s.n, s.k))


def test_parse_row_rejects_bad_rows():
    good = dict(name="x", M="4", N="5", K="6", layout="nt", dtype="bf16")
    s = shapes.parse_row(good, "t")
    assert (s.layout, s.dtype, s.transpose_b) == ("NT", "bfloat16", True)
    for bad in (dict(good, M="0"), dict(good, K="x"), dict(good, layout="NX"), dict(good, dtype="int8")):
        with pytest.raises(ValueError):
            shapes.parse_row(bad, "t")


# ------------------------------------------------------------------------------ timing arithmetic


class FakeClock:
    """A clock that advances only when the fake device 'runs': fixed + per-iteration cost."""

    def __init__(self, fixed: float, per_iteration: float, jitter=()):
        self.now, self.fixed, self.per = 0.0, fixed, per_iteration
        self.jitter = list(jitter)

    def __call__(self):
        return self.now

    def run(self, repeats):
        self.now += self.fixed + self.per * repeats + (self.jitter.pop(0) if self.jitter else 0.0)


def test_slope_cancels_the_fixed_cost():
    clock = FakeClock(fixed=250e-6, per_iteration=7e-6)
    result = timing.measure_slope(clock.run, 100, trials=5, clock=clock)
    assert result["seconds"] == pytest.approx(7e-6, rel=1e-9)
    assert result["fixed_s"] == pytest.approx(250e-6, rel=1e-9)
    # Dividing one call by R, the biased method the slope replaces, is off by fixed / R.
    assert result["t_short_s"] / 100 == pytest.approx(7e-6 + 2.5e-6)


def test_slope_medians_ignore_one_outlier():
    jitter = [0, 0, 5e-3, 0, 0, 0, 0, 0, 0, 0]  # one slow t(R) sample
    clock = FakeClock(fixed=100e-6, per_iteration=2e-6, jitter=jitter)
    result = timing.measure_slope(clock.run, 500, trials=5, clock=clock)
    assert result["seconds"] == pytest.approx(2e-6, rel=1e-9)


def test_slope_seconds_and_repeats_for():
    assert timing.slope_seconds(1.0, 3.0, 4) == 0.5
    with pytest.raises(ValueError):
        timing.slope_seconds(1.0, 2.0, 0)
    assert timing.repeats_for(1e-3, 1e-5) == 100
    assert timing.repeats_for(1e-3, 1.0) == 2
    assert timing.repeats_for(1e-3, 0.0) == 4096


def test_operand_sets_cover_l2():
    l2 = 50 * 2**20
    assert contenders.operand_sets(400 * 2**20, l2) == 1
    assert contenders.operand_sets(32 * 2**20, l2) == 4
    assert contenders.operand_sets(1, l2) == contenders.MAX_OPERAND_SETS


# ------------------------------------------------------------------------------ XLA loop (CPU jax)


def test_jax_timings_run_in_turn_and_keep_the_median_of_the_rounds(tmp_path):
    """The runner's XLA column and JAX spot check: each loop compiled once, timed in rounds in
    turn, the median kept; a dot that fails gets its own error and the others still run."""
    shape = shapes.Shape(name="t", set="t", family="t", regime="t", m=16, n=24, k=32, layout="NN", dtype="float32")
    args = cli.build_parser().parse_args(["--out", str(tmp_path), "--jax-rounds", "3"])
    runner = torch_runner.Runner(args)
    runner.C = contenders

    def broken(a, b):
        raise ValueError("no such kernel")

    results = runner._jax(shape, {"xla": contenders.xla_dot(shape), "broken": broken}, 2, 1e-5)
    assert "no such kernel" in results["broken"]["error"]
    xla = results["xla"]
    assert len(xla["round_seconds"]) == 3 and xla["seconds"] == statistics.median(xla["round_seconds"])
    assert xla["compile_s"] > 0 and "median of 3 rounds" in xla["method"]
    # A timer is measured again without recompiling: the second sample reuses the same loops.
    measure, facts = contenders.slope_timer_jax(contenders.xla_dot(shape), *contenders.jax_operands(shape, 1),
                                                estimate_s=1e-5, target_s=1e-4)
    first, second = measure(1), measure(2)
    assert facts["sets"] == 1 and "median of 1" in first["method"] and "median of 2" in second["method"]


def test_compile_key_dedupes_by_specialisation():
    c = Config(block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=3)
    a = oracle.compile_key(Problem(m=1024, n=2048, k=4096), c)
    b = oracle.compile_key(Problem(m=2048, n=4096, k=1024), c)  # same pattern: all % 16 == 0
    assert a == b
    assert oracle.compile_key(Problem(m=1, n=2048, k=4096), c) != a  # M == 1 specialises
    assert oracle.compile_key(Problem(m=1000, n=2048, k=4096), c) != a  # 1000 % 16 != 0
    assert oracle.compile_key(Problem(m=1024, n=2048, k=4096, transpose_b=True), c) != a


class FakeTimer:
    """Times are a table lookup: launch(i) is the config itself."""

    def __init__(self, times):
        self.times, self.last_method = times, "fake"

    def estimate(self, launch, nbuf, warmup=2, count=3):
        return self.times[launch]

    def time(self, launch, nbuf=1, *, target_s=1e-3, replays=5, estimate_s=None):
        return self.times[launch] * 0.99


def test_search_finds_the_best_and_skips_failures():
    configs = [Config(block_m=bm, num_warps=4) for bm in (16, 32, 64, 128, 256)]
    times = {c: t for c, t in zip(configs, (5e-3, 3e-3, 1e-3, 2e-3, 4e-3))}
    failed = configs[3]
    found = oracle.search(
        configs, launcher=lambda c: c, timer=FakeTimer(times), nbuf=1, top=2,
        compiled=lambda c: dict(ok=c is not failed, error="boom"),
    )
    assert found["best"] == configs[2] and found["best_s"] == pytest.approx(0.99e-3)
    assert found["errors"] == 1 and found["complete"]
    assert set(found["careful"]) == {configs[2], configs[1]}
    assert oracle.rank_of(configs[1], found["first"]) == 2
    cut = oracle.search(configs, launcher=lambda c: c, timer=FakeTimer(times), nbuf=1,
                        compiled=lambda c: dict(ok=True), deadline=0.0)
    assert not cut["complete"] and cut["best"] is None


def test_first_pass_looks_twice_before_ruling_a_config_out():
    """A single launch that reads far above the best so far is measured once more: a one-off
    glitch (0.2 ms for a 19 µs product on the H200) must not keep a fast config from the careful
    re-timing; a config slow on both launches keeps its first-pass number."""

    class Readings:
        last_method = "fake"

        def __init__(self, singles, graph):
            self.singles, self.graph, self.calls = list(singles), graph, []

        def estimate(self, launch, nbuf, warmup=2, count=3):
            self.calls.append(("estimate", count))
            return self.singles.pop(0)

        def time(self, launch, nbuf=1, *, target_s=1e-3, replays=5, estimate_s=None):
            self.calls.append(("graph", estimate_s))
            return self.graph

    glitch = Readings([201e-6, 19e-6], graph=19.5e-6)
    assert oracle.first_pass_time(glitch, None, 1, best_so_far=20e-6) == 19.5e-6
    assert glitch.calls == [("estimate", 1), ("estimate", 1), ("graph", 19e-6)]
    slow = Readings([300e-6, 290e-6], graph=None)
    assert oracle.first_pass_time(slow, None, 1, best_so_far=20e-6) == 290e-6
    long_ok = Readings([300e-6, 280e-6], graph=None)  # long but in the race: two more launches
    assert oracle.first_pass_time(long_ok, None, 1, best_so_far=200e-6) == 280e-6
    assert long_ok.calls == [("estimate", 1), ("estimate", 2)]


def test_search_extends_an_earlier_first_pass():
    configs = [Config(block_m=bm, num_warps=4) for bm in (16, 32, 64, 128)]
    times = {c: t for c, t in zip(configs, (5e-3, 1e-3, 3e-3, 2e-3))}
    timed = []

    def launcher(config):
        timed.append(config)
        return config

    # The earlier search covered the first two; its best (block_m 32) must still win and be
    # re-timed carefully, and only the two new configs get a first pass.
    known = [(configs[0], 5e-3, None), (configs[1], 1e-3, None)]
    found = oracle.search(configs[2:], launcher=launcher, timer=FakeTimer(times), nbuf=1, top=2,
                          compiled=lambda c: dict(ok=True), known=known)
    assert found["best"] == configs[1] and len(found["first"]) == 4
    assert timed.count(configs[0]) == 0 and timed.count(configs[2]) == 1


def test_oracle_cache_finds_an_earlier_search_over_other_candidates(tmp_path):
    old, new = [Config(), Config(block_k=32)], [Config(), Config(block_k=32), Config(split_k=2)]
    cache = oracle.OracleCache(tmp_path / "cache.json")
    shape_key = "64x64x64 bfloat16 NN"
    first = [[c.short(), 1e-4, None] for c in old]
    cache.put(oracle.cache_key(shape_key, "NVIDIA H200", oracle.candidates_hash(old)), dict(first=first))
    assert cache.earlier(shape_key, "NVIDIA H200", new)["first"] == first
    assert cache.earlier(shape_key, "NVIDIA H100", new) is None  # another GPU
    # A smaller space keeps the rows of the configs still in it.
    assert cache.earlier(shape_key, "NVIDIA H200", new[:1])["first"] == first[:1]
    assert cache.earlier(shape_key, "NVIDIA H200", [Config(split_k=4)]) is None  # no overlap


def test_oracle_cache_round_trip(tmp_path):
    path = tmp_path / "cache.json"
    configs = [Config(), Config(block_k=32)]
    h = oracle.candidates_hash(configs)
    assert h == oracle.candidates_hash(list(reversed(configs)))  # order-independent
    assert h != oracle.candidates_hash(configs[:1])
    key = oracle.cache_key("64x64x64 bfloat16 NN", "NVIDIA H200", h)
    cache = oracle.OracleCache(path)
    assert cache.get(key) is None

    cache.put(key, dict(best=dataclasses.asdict(configs[1]), best_s=1e-4, top=[dataclasses.asdict(configs[1])]))
    again = oracle.OracleCache(path)
    entry = again.get(key)
    assert contenders.config_from_dict(entry["best"]) == configs[1]
    assert again.get(oracle.cache_key("64x64x64 bfloat16 NN", "NVIDIA H100", h)) is None


# ------------------------------------------------------------------------------ peers' configs


def test_tutorial_configs_are_the_tutorials():
    assert len(contenders.TUTORIAL_CONFIGS) == 8
    assert contenders.TUTORIAL_CONFIGS[0] == Config(block_m=128, block_n=256, block_k=64, group_m=8,
                                                    num_stages=3, num_warps=8)


def test_nvmmh_mapping_clamps_to_the_kernel():
    from jtblas import hardware
    from jtblas.model import resources

    problem = Problem(m=4096, n=4096, k=4096)
    raw = dict(cta=(256, 128, 128), warp=(64, 64, 128), stages=4, split_k=2, swizzle=8)
    fits = lambda c: not resources.fit_errors(c, problem, hardware.H200)
    config = contenders.config_from_nvmmh(raw, problem, fits=fits, split_k_ok=False)
    assert (config.block_m, config.block_n, config.block_k, config.num_warps) == (256, 128, 128, 8)
    assert config.split_k == 1 and config.group_m == 8 and fits(config) and config.num_stages < 4
    small = contenders.config_from_nvmmh(dict(cta=(16, 32, 128), warp=(16, 8, 128), stages=8, split_k=1,
                                               swizzle=1), problem, fits=fits, split_k_ok=True)
    assert small.num_warps == 4 and small.block_m == 16 and fits(small)


# ------------------------------------------------------------------------------ the slope loop through JAX (CPU)


def _chain(as_, bs, products_per_set):
    """float64 reference of the loop: each product's C[0, 0] written back into A[0, 0] and B[0, 0]
    as tanh."""
    current_as = [np.asarray(a, np.float64) for a in as_]
    current_bs = [np.asarray(b, np.float64) for b in bs]
    last = []
    for _ in range(products_per_set):
        last = []
        for i in range(len(bs)):
            c = current_as[i] @ current_bs[i]
            last.append(c)
            for current in (current_as, current_bs):
                current[i] = current[i].copy()
                current[i][0, 0] = np.tanh(np.float32(c[0, 0]))
    return last


def test_slope_loop_keeps_every_dot_inside_and_runs_the_chained_products():
    import jax
    import jax.numpy as jnp

    shape = shapes.Shape(name="t", set="t", family="t", regime="t", m=8, n=16, k=24, layout="NN", dtype="float32")
    as_, bs = jax_loop.operands(shape, 3)
    unroll = jax_loop.loop_unroll(3)
    assert unroll == 6 and jax_loop.loop_unroll(16) == 1 and jax_loop.loop_unroll(1) == jax_loop.LOOP_UNROLL
    # products of milliseconds are not unrolled: one 5 ms product already is a 2.5 ms body
    assert jax_loop.loop_unroll(1, 5e-3) == 1 and jax_loop.loop_unroll(2, 0.5e-3) == 3
    assert jax_loop.loop_unroll(1, 1e-6) == jax_loop.LOOP_UNROLL and jax_loop.loop_unroll(3, 1e-6) == 6
    f = jax.jit(jax_loop.loop_function(jax_loop.xla_dot(shape), unroll))
    for trips in (1, 2):  # one compiled program, a traced trip count
        out = f(as_, bs, jnp.int32(trips))
        assert len(out) == unroll and all(len(cs) == 3 for cs in out)  # every C of the body is an output
        for got, want in zip(out[-1], _chain(as_, bs, trips * unroll)):
            assert np.linalg.norm(np.asarray(got, np.float64) - want) <= 1e-5 * np.linalg.norm(want)
    hlo = f.lower(as_, bs, jnp.int32(1)).compile().as_text()
    entry = hlo[hlo.index("ENTRY"):]
    assert "while(" in entry and "dot_general" not in entry  # no dot hoisted out of the loop
    assert len(re.findall(r'op_name="[^"]*dot_general"', hlo)) >= 3 * unroll


def test_slope_loop_copies_a_repacked_b_in_every_iteration():
    """B changes in every iteration, so XLA cannot hoist jtblas's padded copy of B (nor any
    preparation of B of XLA's own) out of the loop: each product pays for it, as in training."""
    import jax
    import jax.numpy as jnp

    from jtblas import ops

    shape = shapes.Shape(name="t", set="t", family="t", regime="t", m=40, n=37, k=50, layout="NN", dtype="float32")
    as_, bs = jax_loop.operands(shape, 1)
    with ops.repack_mode("always"):
        f = jax.jit(jax_loop.loop_function(jax_loop.jtblas_dot(shape), 1))
        hlo = f.lower(as_, bs, jnp.int32(1)).compile().as_text()
        out = f(as_, bs, jnp.int32(2))
    entry = hlo[hlo.index("ENTRY"):]
    assert "while(" in entry and " pad(" in hlo
    assert "pad" not in entry.split("while(")[0].lower()  # no pad computed before the loop
    want = _chain(as_, bs, 2)[0]
    assert np.linalg.norm(np.asarray(out[-1][0], np.float64) - want) <= 1e-5 * np.linalg.norm(want)


def test_slope_timer_times_two_lengths_of_one_compiled_loop():
    shape = shapes.Shape(name="t", set="t", family="t", regime="t", m=16, n=24, k=32, layout="NT", dtype="float32")
    as_, bs = jax_loop.operands(shape, 2)
    timer = jax_loop.SlopeTimer(jax_loop.xla_dot(shape), as_, bs, estimate_s=1e-6, target_s=2e-4)
    assert timer.sets == 2 and timer.products == timer.trips * timer.unroll * 2 and timer.compile_s > 0
    first, second = timer.measure(1), timer.measure(2)
    assert first["products"] == second["products"] == timer.products
    assert "median of 2" in timer.method(2) and "traced trip count" in timer.method(2)


def test_unique_products_are_timed_once_quick_first_families_in_turn():
    row = lambda name, family, m, quick=False: shapes.Shape(
        name=name, set="models", family=family, regime="decode", m=m, n=64, k=64, layout="NN", dtype="bfloat16",
        quick=quick)
    rows = [row("a1", "a", 1), row("a2", "a", 2), row("a3", "a", 3), row("b1", "b", 1), row("b5", "b", 5),
            row("c9", "c", 9, quick=True)]
    groups = through_jax.unique_products(rows)
    assert [[r.name for r in g] for g in groups] == [["c9"], ["a1", "b1"], ["b5"], ["a2"], ["a3"]]


def test_a_product_record_through_jax_on_the_cpu():
    """jtblas.matmul (the interpreter here) beside XLA in the same loop: the rounds, the plan, the
    rows it stands for, the relative difference; a contender that fails keeps its own error."""
    from jtblas import hardware

    shape = shapes.Shape(name="x.o.fwd.M5", set="models", family="x", regime="decode", m=5, n=24, k=40,
                         layout="TN", dtype="bfloat16")
    twin = dataclasses.replace(shape, name="y.o.fwd.M5", family="y")
    record = through_jax.time_product([shape, twin], l2_bytes=1, hardware=hardware.H200, rounds=2, trials=1,
                                      target_s=1e-9)
    assert record["rows"] == [dict(name="x.o.fwd.M5", family="x", regime="decode"),
                              dict(name="y.o.fwd.M5", family="y", regime="decode")]
    assert record["families"] == ["x", "y"] and record["plan"]["config"] and "error" not in record
    assert record["rel_diff"] < 1e-2
    for name in ("jtblas", "xla"):
        entry = record["contenders"][name]
        assert len(entry["round_seconds"]) == 2 and entry["seconds"] == statistics.median(entry["round_seconds"])
        assert entry["first_call_s"] >= entry["compile_s"] > 0 and "slope" in entry["method"]

    def broken(a, b):
        raise ValueError("no such kernel")

    record = through_jax.time_product([shape], l2_bytes=1, hardware=hardware.H200, rounds=1, trials=1,
                                      target_s=1e-9, dots=dict(jtblas=broken, xla=jax_loop.xla_dot(shape)))
    assert "no such kernel" in record["contenders"]["jtblas"]["error"] and "speedup" not in record
    assert record["contenders"]["xla"]["round_seconds"]


def test_the_recorded_plan_is_the_problem_the_contender_runs():
    """A record's plan is the shape's product unless the contender runs another problem (an
    epilogue): then that problem's, which the model may tile differently."""
    from jtblas import hardware, model

    shape = shapes.Shape(name="x.up.fwd.M512", set="models", family="x", regime="inference", m=512, n=3072,
                         k=768, layout="NN", dtype="bfloat16")
    fused = dataclasses.replace(shape.problem(), bias_dtype="bfloat16", activation="gelu")
    bare_plan, fused_plan = (model.plan_for_problem(p, hardware.H100) for p in (shape.problem(), fused))
    assert bare_plan.config != fused_plan.config  # on this shape the epilogue changes the pick
    assert through_jax.plan_of(shape, hardware.H100)["config"] == bare_plan.config.short()
    recorded = through_jax.plan_of(shape, hardware.H100, fused)
    assert (recorded["config"], recorded["predicted_s"]) == (fused_plan.config.short(), fused_plan.predicted_seconds)


@pytest.mark.parametrize("layout", ["NT", "NN"])
def test_a_batched_product_record_through_jax_on_the_cpu(layout):
    """A batched row (attention-like, batch x heads = 3) runs jtblas.dot_general against
    lax.dot_general with batch dimensions, in the same loop; the record carries the batch."""
    from jtblas import hardware

    shape = shapes.Shape(name="attention.scores.t", set="batched", family="attention", regime="scores", m=8,
                         n=24, k=16, layout=layout, dtype="bfloat16", batch=3)
    as_, bs = jax_loop.operands(shape, 1)
    assert as_[0].shape == (3, 8, 16) and bs[0].shape == ((3, 24, 16) if layout == "NT" else (3, 16, 24))
    assert jax_loop.jtblas_dot(shape)(as_[0], bs[0]).shape == (3, 8, 24)
    # A forced config runs under vmap (one launch over the batch), as picks_ab.py times it.
    config = Config(block_m=16, block_n=32, block_k=16, group_m=1, num_warps=4, num_stages=2)
    forced = jax_loop.jtblas_dot(shape, config)(as_[0], bs[0])
    xla = jax_loop.xla_dot(shape)(as_[0], bs[0])
    assert forced.shape == (3, 8, 24) and relative_error(forced, np.asarray(xla, np.float64)) < 1e-2
    record = through_jax.time_product([shape], l2_bytes=1, hardware=hardware.H200, rounds=1, trials=1,
                                      target_s=1e-9)
    assert "error" not in record and record["batch"] == 3 and record["key"] == f"3 x 8x24x16 bfloat16 {layout}"
    assert record["rel_diff"] < 1e-2 and record["flops"] == 2 * 3 * 8 * 24 * 16
    assert {"seconds", "round_seconds"} <= set(record["contenders"]["jtblas"])


def test_the_batched_set_adds_rows_without_changing_the_others():
    """The unbatched sets keep their rows (676; 20 quick); batched.csv adds 30 (2 quick), each with
    its batch (attention's batch x heads 32-4096, 8 MoE experts)."""
    unbatched = ("models", "odd", "deepk", "square")
    assert sum(len(shapes.load_set(name)) for name in unbatched) == 676
    assert len(shapes.load(unbatched, quick=True)) == 20
    rows = shapes.load_set("batched")
    assert len(rows) == 30 and sum(r.quick for r in rows) == 2
    assert {r.batch for r in rows if r.family == "attention"} == {32, 512, 4096}
    assert {r.batch for r in rows if r.family == "moe"} == {8}
    assert all(r.batch == 1 for name in unbatched for r in shapes.load_set(name))
    assert len(shapes.load((*unbatched, "batched"), quick=True)) == 22
    assert len(shapes.load((*unbatched, "batched"))) == 706


def test_the_misaligned_set_is_every_pass_of_odd_vocabularies_at_every_token_count():
    """misaligned.csv: forward (NN), dx (NT) and dw (TN) of three output layers whose vocabulary is
    not a multiple of 8 (bf16 rows not 16-byte aligned), at 1-8192 tokens; 45 rows, 1 quick."""
    rows = shapes.load_set("misaligned")
    assert len(rows) == 45 and sum(r.quick for r in rows) == 1
    for vocab, hidden in make_shapes.MISALIGNED_VOCABULARIES:
        assert vocab % 8 and not hidden % 8
        mine = [r for r in rows if f".v{vocab}." in r.name]
        assert {(r.m, r.n, r.k, r.layout) for r in mine} == {
            shape for t in make_shapes.MISALIGNED_TOKENS
            for shape in ((t, vocab, hidden, "NN"), (t, hidden, vocab, "NT"), (hidden, vocab, t, "TN"))}
    before_fp32 = shapes.SET_NAMES[:-1]
    assert len(shapes.load(before_fp32, quick=True)) == 23 and len(shapes.load(before_fp32)) == 751


def test_the_fp32_set_is_models_products_in_float32():
    """fp32.csv: what a Flax model with no `dtype` runs (fp32 parameters and inputs, tf32 at JAX's
    default precision): GPT-2's decode at 1 and 64 tokens and training step, BERT-large's training
    step, ViT-B/16's inference batch; each row a models.csv row in float32; 41 rows, 1 quick."""
    rows = shapes.load_set("fp32")
    assert len(rows) == 41 and sum(r.quick for r in rows) == 1
    assert {(r.dtype, r.precision, r.regime) for r in rows} == {("float32", "tf32", "fp32")}
    models = {r.name: r for r in shapes.load_set("models")}
    for row in rows:
        twin = models[row.name.removeprefix("fp32.")]
        assert (row.m, row.n, row.k, row.layout, row.family) == (twin.m, twin.n, twin.k, twin.layout,
                                                                 f"fp32-{twin.family}")
        assert twin.regime in make_shapes.FP32_FAMILIES[twin.family]
    assert {r.m for r in rows if r.name.rsplit(".", 1)[1].startswith("M") and r.family == "fp32-gpt2"} == {1, 64}
    assert len(shapes.load(quick=True)) == 24 and len(shapes.load()) == 792


# ------------------------------------------------------------------------------ the report of record


def _products(speedups):
    """Synthetic through-JAX records: product i is shared by families[i] with the given speedup."""
    records = []
    for i, (families, speedup) in enumerate(speedups):
        xla = 1e-4
        rows = [dict(name=f"{f}.o.fwd.M{i}", family=f, regime="decode" if i % 2 else "train") for f in families]
        records.append(dict(
            key=f"{i + 1}x64x64 bfloat16 NN", names=[r["name"] for r in rows], rows=rows, families=sorted(families),
            regimes=sorted({r["regime"] for r in rows}), M=i + 1, N=64, K=64, layout="NN", dtype="bfloat16",
            flops=2 * (i + 1) * 64 * 64, bytes=1, plan=dict(config="16x64x64 w4 s3 g1", repack=None),
            contenders=dict(jtblas=dict(seconds=xla / speedup, first_call_s=1.0),
                            xla=dict(seconds=xla, first_call_s=2.0)),
            speedup=speedup))
    meta = dict(date="2026-12-01", device="NVIDIA H200", versions=dict(jax="0.11.2"), method="slope")
    return dict(meta=meta, products=records)


def test_report_statistics_on_known_inputs():
    results = _products([(["a"], 0.5), (["a", "b"], 2.0), (["b"], 1.0), (["b"], 0.8)])
    results["products"].append(dict(results["products"][0], key="9x9x9 bfloat16 NN", speedup=None,
                                    error="jtblas and XLA results differ by 0.5"))
    s = jax_report.summary(results)
    assert s["all"]["count"] == 4 and s["all"]["geomean"] == pytest.approx((0.5 * 2.0 * 1.0 * 0.8) ** 0.25)
    assert s["all"]["below_0_9"] == 0.5 and s["all"]["below_1_0"] == 0.5 and s["all"]["min"] == 0.5
    # The shared product counts once overall and once in each of its families.
    assert s["families"]["a"]["count"] == 2 and s["families"]["b"]["count"] == 3
    assert s["families"]["a"]["geomean"] == pytest.approx(1.0)
    assert s["family_regimes"]["b decode"]["count"] == 2 and s["family_regimes"]["a train"]["count"] == 1
    assert [w["speedup"] for w in s["worst"]] == [0.5, 0.8, 1.0, 2.0] and s["worst"][0]["plan"]
    assert len(s["errors"]) == 1 and "differ" in s["errors"][0]["error"]
    text = jax_report.summary_text(results)
    assert "geomean 0.95 over 4 products (50% below 0.9, 50% below 1.0" in text


def test_model_accuracy_by_plan_kind_grid_and_length():
    """Measured ÷ predicted by plan kind, by whether the grid fills the 132 SMs of an H200, and by
    predicted length; the markdown shows the table."""
    def record(key, m, n, config, repack, predicted_us, measured_us):
        return dict(key=key, names=[key], families=["f"], regimes=["r"], M=m, N=n, K=64, batch=1, flops=2 * m * n * 64,
                    plan=dict(config=config, repack=repack, predicted_s=predicted_us * 1e-6),
                    contenders=dict(jtblas=dict(seconds=measured_us * 1e-6), xla=dict(seconds=1e-5)), speedup=1.0)
    timed = [
        record("a", 3072, 768, "128x256x64 w8 s4 g8", None, 100.0, 86.0),           # 72 tiles: partial
        record("b", 4096, 4096, "128x256x64 w8 s4 g8 tma", None, 100.0, 104.0),     # 512 tiles
        record("c", 768, 768, "128x128x64 w4 s5 g8 k3", None, 25.0, 27.5),          # 108 programs
        record("d", 768, 768, "128x128x64 w4 s5 g8 k3", None, 10.0, 15.0),          # short
        record("e", 1, 50257, "16x256x64 w4 s3 g1 p4", None, 30.0, 45.0),           # 197 tiles x 4
        record("f", 2048, 50257, "128x256x64 w8 s4 g8", "B", 500.0, 550.0),         # repacked
        record("g", 3072, 768, "128x256x64 w8 s4 g8", None, 100.0, 90.0),
    ]
    rows = {row["plans"]: row for row in jax_report.model_accuracy(timed, "h200")}
    assert list(rows) == ["pointer, one partial wave, 20 µs or more", "TMA, fills the GPU, 20 µs or more",
                          "split-K, one partial wave, 20 µs or more", "split-K, one partial wave, under 20 µs",
                          "K phases, fills the GPU, 20 µs or more", "repacked, fills the GPU, 20 µs or more"]
    partial = rows["pointer, one partial wave, 20 µs or more"]
    assert partial["count"] == 2 and partial["median"] == pytest.approx(0.88)
    assert (partial["p10"], partial["p90"]) == (pytest.approx(0.864), pytest.approx(0.896))
    assert rows["K phases, fills the GPU, 20 µs or more"]["median"] == pytest.approx(1.5)
    unknown = jax_report.model_accuracy(timed, None)
    assert {row["plans"] for row in unknown} >= {"pointer, 20 µs or more", "repacked, 20 µs or more"}
    text = jax_report.markdown(dict(meta=dict(hardware_model="h200"), products=timed))
    assert "## How the model's predictions held" in text
    assert "| K phases, fills the GPU, 20 µs or more | 1 | 1.50 |" in text


def test_bench_drops_a_blank_triton_cache_dir(tmp_path, monkeypatch):
    """A parent process that imported jax-triton 0.3.1 (a pytest session) passes TRITON_CACHE_DIR=""
    on; `jtblas bench` drops it first, or its torch-launch contenders fail to compile ("Could not
    create or locate cache dir": the GPU smoke test inside the whole gpu suite, 2026-12-06)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", "")
    assert cli.main(["--report-only", str(tmp_path / "missing.json"), "--out", str(tmp_path / "out")]) == 2
    assert "TRITON_CACHE_DIR" not in os.environ


def test_report_only_merges_parts_with_model_steps(tmp_path):
    whole = _products([(["a"], 0.5), (["b"], 2.0), (["b"], 1.25)])
    parts = []
    for index in range(2):
        folder = tmp_path / f"part{index}"
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps(dict(whole, products=whole["products"][index::2])))
        parts.append(str(folder / "results.json"))
    steps = dict(meta={}, results=[dict(model="tiny", param_dtype="float32", steps=dict(train=dict(
        flax=dict(seconds=2e-3, first_call_s=3.0), jtblas=dict(seconds=1e-3, first_call_s=4.0),
        speedup_jtblas_over_flax=2.0, loss_rel_diff=1e-6)))])
    (tmp_path / "part0" / "model_steps.json").write_text(json.dumps(steps))
    out = tmp_path / "report"
    assert cli.main(["--report-only", ",".join(parts), "--out", str(out)]) == 0
    merged = json.loads((out / "results.json").read_text())
    assert sorted(r["key"] for r in merged["products"]) == sorted(r["key"] for r in whole["products"])
    text = (out / "report.md").read_text()
    assert "## By family" in text and "## Whole model steps" in text and "| tiny | float32 | train |" in text
    assert "2.00×" in text and "Torch launches" not in text
    for png in ("vs_xla_by_family.png", "tflops_vs_size.png"):
        assert (out / png).stat().st_size > 0
    (tmp_path / "torch.json").write_text(json.dumps(dict(meta={}, shapes=[])))
    assert cli.main(["--report-only", str(tmp_path / "torch.json"), "--out", str(out)]) == 2
    assert cli.main(["--report-only", str(tmp_path / "missing.json"), "--out", str(out)]) == 2


def test_bench_with_jax_only_takes_its_cpu_path_and_says_what_it_skipped(tmp_path):
    """No torch importable and no GPU: `jtblas bench --torch --models` says what it skips, runs
    the model's plans and the CPU checks, and exits 0 without a traceback."""
    # A finder that refuses torch, as an environment without it does; `sys.modules['torch'] = None`
    # breaks Triton 3.9's argument specializer ("'NoneType' object has no attribute 'Tensor'",
    # triton/runtime/jit.py mangle_type), which no machine without torch sees.
    code = ("import importlib.abc, sys\n"
            "class NoTorch(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name.partition('.')[0] == 'torch':\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, NoTorch())\n"
            "from jtblas.bench import cli\n"
            "assert 'torch is not installed' in cli.torch_problem()\n"
            "sys.exit(cli.main(['--shapes', 'deepk', '--max-shapes', '2', '--torch', '--models', "
            f"'--out', {str(tmp_path)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=REPO,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "skipping the products through JAX, the model steps, the torch-launch contenders" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(json.loads((tmp_path / "cpu_plan.json").read_text())["plans"]) == 2


# ------------------------------------------------------------------------------ torch runner's report


def _synthetic_results():
    records = []
    for i, (name, set_, m, n, k) in enumerate([
        ("sq1024", "square", 1024, 1024, 1024), ("sq4096", "square", 4096, 4096, 4096),
        ("llama.qkv.fwd.M1", "llm", 1, 6144, 4096), ("odd1", "odd", 1001, 999, 3003),
    ]):
        flops = 2 * m * n * k
        base = flops / 700e12
        contenders_ = {
            "jtblas": dict(seconds=base * (1.0 + 0.05 * i), config_short="128x128x64 w8 s3 g8", first_call_s=0.5),
            "oracle": dict(seconds=base, config_short="128x256x64 w8 s3 g8", search_s=30.0, first_call_s=30.0),
            "xla": dict(seconds=base * 1.02, first_call_s=1.2),
            "cublas": dict(seconds=base * 0.98),
            "tutorial": dict(seconds=base * 1.1),
            "nvmmh": dict(error="not installed"),
        }
        if i == 1:
            contenders_["jtblas_jax"] = dict(seconds=base * 1.01, config_short="128x128x64 w8 s3 g8")
        records.append(dict(name=name, set=set_, group=set_, M=m, N=n, K=k, layout="NN", dtype="bfloat16",
                            flops=flops, bytes=2 * (m * k + k * n + m * n), contenders=contenders_))
    meta = dict(gpu="NVIDIA H200", date="2026-11-05", copy_bandwidth=dict(bytes_per_s=4.3e12),
                versions=dict(jax="0.11.2"), methods=dict(torch="graph"))
    return dict(meta=meta, shapes=records)


def test_report_writes_table_summary_and_plots(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_synthetic_results()))
    paths = report.write_report(path, tmp_path / "rep")
    for key in ("table", "summary", "square", "pick_vs_oracle", "vs_xla_by_group"):
        assert paths[key].exists() and paths[key].stat().st_size > 0, key
    for key in ("square", "pick_vs_oracle", "vs_xla_by_group"):
        assert paths[key].read_bytes()[:4] == b"\x89PNG"
    text = paths["table"].read_text()
    assert "| sq4096 |" in text and "pick ÷ oracle, geomean" in text and "Worst ten" in text
    s = json.loads(paths["summary"].read_text())
    assert s["shapes"] == 4
    p = s["pick_over_oracle"]
    assert p["min"] == pytest.approx(1 / 1.15) and p["worst"][0]["name"] == "odd1"
    assert p["geomean"] == pytest.approx(math.exp(-sum(math.log(1 + 0.05 * i) for i in range(4)) / 4))
    assert s["groups"]["square"]["jtblas_over_xla"] == pytest.approx(math.sqrt(1.02 * 1.02 / 1.05))
    assert s["errors"] == {"nvmmh": 4}
    assert s["repacked"] == 0 and s["geomeans"]["repack_over_oracle"] is None
    # Like for like through JAX: only the spot-checked shape (XLA 1.02 x base, JAX 1.01 x base).
    assert s["geomeans"]["jtblas_jax_over_xla"] == pytest.approx(1.02 / 1.01)
    assert s["groups"]["square"]["jtblas_jax_over_xla"] == pytest.approx(1.02 / 1.01)
    assert s["groups"]["llm"]["jtblas_jax_over_xla"] is None
    assert "same jitted loop" in text and "| square | 2 | " in text and "| 1.010 |" in text


def test_small_m_rows_compare_with_a_copy_of_the_weight(tmp_path):
    data = _synthetic_results()
    decode = data["shapes"][2]  # 1 x 6144 x 4096: a 50 MB weight
    weight = 6144 * 4096 * 2
    decode["copy_same_bytes"] = dict(bytes=weight, bytes_per_s=3.4e12)
    decode["contenders"]["jtblas"]["seconds"] = weight / 3.06e12
    rows = report.decode_rows(data["shapes"])
    assert [r["name"] for r in rows] == ["llama.qkv.fwd.M1"]  # only M <= 16 with a copy measured
    assert rows[0]["jtblas"]["copy_ratio"] == pytest.approx(0.9)
    s = report.summary(data)
    assert s["decode"]["weight >= 50 MB"]["shapes"] == 1
    assert s["decode"]["weight >= 50 MB"]["geomean"] == pytest.approx(0.9)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    text = report.write_report(path, tmp_path / "rep")["table"].read_text()
    assert "a copy of the same bytes" in text and "3060 (90%)" in text


def test_repacked_picks_leave_the_pick_over_oracle_statistic():
    """The oracle searches the caller's operands; a repacked pick is reported on its own."""
    data = _synthetic_results()
    odd = data["shapes"][3]["contenders"]
    odd["jtblas"].update(repacked="AB", seconds=odd["oracle"]["seconds"] / 2)
    s = report.summary(data)
    assert s["pick_over_oracle"]["count"] == 3 and s["repacked"] == 1
    assert s["geomeans"]["repack_over_oracle"] == pytest.approx(2.0)
    assert s["groups"]["odd"]["repacked"] == 1 and s["groups"]["odd"]["pick_over_oracle"] is None


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda(), reason="needs a CUDA GPU and torch")
def test_bench_smoke_through_jax_and_torch_on_tiny_shapes(tmp_path):
    shapes_dir = tmp_path / "shapes"
    shapes_dir.mkdir()
    (shapes_dir / "tiny.csv").write_text(
        "name,family,regime,M,N,K,layout,dtype,quick\n"
        "t256,tiny,decode,256,256,256,NN,bfloat16,1\n"
        "t100,tiny,train,100,200,300,NT,bfloat16,1\n"
        "t1025,tiny,train,1025,2001,1551,NN,bfloat16,1\n"  # the model repacks A and B: copies + kernel
    )
    out = tmp_path / "out"
    # In a subprocess: the CLI leaves through os._exit when nvMatmulHeuristics is installed.
    proc = subprocess.run(
        [sys.executable, "-m", "jtblas.bench", "--shapes", "tiny", "--shapes-dir", str(shapes_dir), "--torch",
         "--max-candidates", "3", "--workers", "4", "--jax-checks", "1", "--out", str(out), "--time-budget", "400"],
        check=False, capture_output=True, text=True, cwd=REPO, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    assert sorted(n for r in data["products"] for n in r["names"]) == ["t100", "t1025", "t256"]
    for record in data["products"]:
        assert record["speedup"] > 0 and record["rel_diff"] < 2e-2 and "error" not in record, record
    repacked = next(r for r in data["products"] if r["names"] == ["t1025"])
    assert repacked["plan"]["repack"] == "AB"
    torch_data = json.loads((out / "torch" / "results.json").read_text())
    for record in torch_data["shapes"]:
        for name in ("jtblas", "oracle", "cublas", "tutorial"):
            # The message as text: pytest abbreviates a dict's repr, which hid the entry's error (2026-12-06).
            assert record["contenders"][name].get("seconds", 0) > 0, json.dumps(
                [record["name"], name, record["contenders"][name]], default=str)
    assert "Torch launches" in (out / "report.md").read_text()
    for png in ("vs_xla_by_family.png", "tflops_vs_size.png"):
        assert (out / png).stat().st_size > 0


@pytest.mark.skipif(_has_cuda(), reason="this machine has a GPU")
def test_bench_without_gpu_runs_what_a_cpu_can(tmp_path):
    """The README's main command on a machine without a GPU: a plain statement, the model's
    plans for the quick set and the CPU checks, status 0, no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "jtblas.bench", "--quick", "--out", str(tmp_path)],
        check=False, capture_output=True, text=True, cwd=REPO, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "no device time can be measured here" in proc.stdout
    assert "9 of 9 CPU checks passed" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "cpu_plan.md").exists() and not (tmp_path / "results.json").exists()
    assert len(json.loads((tmp_path / "cpu_plan.json").read_text())["plans"]) == len(shapes.load(quick=True))


# ------------------------------------------------------------------------------ GPU smoke test


def test_cli_without_a_gpu_plans_and_checks_on_the_cpu(tmp_path, monkeypatch, capsys):
    """No GPU: the CLI says so, writes the model's plans for the set and the CPU backend's
    correctness checks, and exits 0 — never a traceback."""
    from jtblas.bench import cli

    monkeypatch.setattr(cli, "gpu_problem", lambda: "JAX sees no GPU")
    monkeypatch.setenv("JTBLAS_GPU", "h200")
    (tmp_path / "tiny.csv").write_text(
        "name,group,M,N,K,layout,dtype,quick\n"
        "t1,tiny,1,4096,4096,NN,bfloat16,1\n"
        "t2,tiny,1500,4501,3399,NN,bfloat16,1\n"
        "t3,tiny,4096,4096,14336,NT,bfloat16,0\n"
    )
    out = tmp_path / "out"
    rc = cli.main(["--shapes", "tiny", "--shapes-dir", str(tmp_path), "--out", str(out)])
    assert rc == 0
    said = capsys.readouterr().out
    assert "JAX sees no GPU: no device time can be measured here" in said
    assert "| t2 | 1500x4501x3399 NN |" in said and "| 7x13x37 NN | bfloat16 |" in said  # the tables, printed
    payload = json.loads((out / "cpu_plan.json").read_text())
    assert payload["hardware"] == "h200" and [row["name"] for row in payload["plans"]] == ["t1", "t2", "t3"]
    by_name = {row["name"]: row for row in payload["plans"]}
    # NT: the TMA kernel reads B's [N, K] rows as they are (no transposed copy).
    assert by_name["t2"]["repacked"] == "AB" and by_name["t3"]["repacked"] == "" and "tma" in by_name["t3"]["config"]
    assert all(row["predicted_seconds"] > 0 and row["config"] for row in payload["plans"])
    assert len(payload["checks"]) == 9 and all(row["ok"] for row in payload["checks"])
    text = (out / "cpu_plan.md").read_text()
    assert "| t2 | 1500x4501x3399 NN |" in text and "relative error" in text
    # --quick keeps only the quick rows; a missing set is a clear error, not a traceback.
    assert cli.main(["--shapes", "tiny", "--shapes-dir", str(tmp_path), "--out", str(out), "--quick"]) == 0
    assert len(json.loads((out / "cpu_plan.json").read_text())["plans"]) == 2
    assert cli.main(["--shapes", "nope", "--shapes-dir", str(tmp_path), "--out", str(out)]) == 2
    assert "nope.csv" in capsys.readouterr().err
    (tmp_path / "bad.csv").write_text("name,group,M,N,K,layout,dtype,quick\nb1,bad,1,x,4,NN,bfloat16,1\n")
    assert cli.main(["--shapes", "bad", "--shapes-dir", str(tmp_path), "--out", str(out)]) == 2
    assert "bad.csv: bad M/N/K" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["2/2", "-1/2", "1", "a/b", "1/0"])
def test_shard_argument_is_checked(text, capsys):
    from jtblas.bench import cli

    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--shard", text])
    assert "--shard" in capsys.readouterr().err


def test_shard_parses():
    from jtblas.bench import cli

    assert cli.build_parser().parse_args(["--shard", "1/3"]).shard == (1, 3)


@pytest.mark.parametrize("argv,sets,quick", [
    ([], None, True),  # the README's `jtblas bench`: every set's quick rows, a few minutes
    (["--all"], None, False),
    (["--shapes", "odd,square"], ["odd", "square"], False),
    (["--shapes", "odd", "--quick"], ["odd"], True),
])
def test_shape_selection_defaults_to_the_quick_rows(argv, sets, quick):
    from jtblas.bench import cli
    from jtblas.bench import shapes as shapes_mod

    chosen = cli.shape_selection(cli.build_parser().parse_args(argv))
    assert chosen == (sets or list(shapes_mod.SET_NAMES), quick)


def test_quick_and_all_exclude_each_other():
    from jtblas.bench import cli

    with pytest.raises(SystemExit, match="--quick and --all"):
        cli.shape_selection(cli.build_parser().parse_args(["--quick", "--all"]))


def test_max_m_keeps_the_decode_rows():
    from jtblas.bench import cli
    from jtblas.bench import shapes as shapes_mod

    rows = shapes_mod.load(["models"])
    args = cli.build_parser().parse_args(["--shapes", "models", "--max-m", "16"])
    decode = cli.rows_up_to_max_m(rows, args)
    assert decode and all(shape.m <= 16 for shape in decode)
    assert len(decode) == sum(1 for shape in rows if shape.m <= 16) < len(rows)
    assert cli.rows_up_to_max_m(rows, cli.build_parser().parse_args([])) == rows
    with pytest.raises(SystemExit, match="--max-m must be >= 1, got 0"):
        cli.rows_up_to_max_m(rows, cli.build_parser().parse_args(["--max-m", "0"]))




def test_source_digest_names_the_package_files(tmp_path):
    """The digest is the package's files': a copy has the same, one changed byte another."""
    import shutil

    from jtblas.bench.through_jax import source_digest

    copy = tmp_path / "jtblas"
    shutil.copytree(REPO / "jtblas", copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert re.fullmatch(r"[0-9a-f]{16}", source_digest()) and source_digest(copy) == source_digest()
    (copy / "config.py").write_text((copy / "config.py").read_text() + "\n")
    assert source_digest(copy) != source_digest()


def test_results_name_the_source_commit():
    """A checkout's run records which commit it measured (CI runs in a fresh clone)."""
    from jtblas.bench.through_jax import source_commit

    commit = source_commit()
    assert commit is not None and re.fullmatch(r"[0-9a-f]{4,40}(\+dirty)?", commit), commit
