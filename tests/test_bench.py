"""CPU tests of `jtblas bench` (shape sets, timing arithmetic, oracle search and cache, report);
the gpu-marked smoke test runs the real benchmark on two tiny shapes."""

from __future__ import annotations

import dataclasses
import json
import re
import math
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jtblas.bench import cli, contenders, oracle, report, shapes, timing
from jtblas.config import Config, Problem

REPO = Path(__file__).resolve().parents[1]


def benchmark_module(name: str):
    """benchmarks/<name>.py loaded as a module (the benchmarks folder on sys.path while it loads,
    for the scripts that import each other)."""
    import importlib.util

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return module


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
            assert s.flops <= 3.0e12, s  # keeps the whole run inside the time budget
            s.problem()  # a valid Problem
    assert total >= 100


def test_odd_set_is_odd_and_reproducible(tmp_path):
    odd = shapes.load_set("odd")
    assert len(odd) >= 20
    assert all(x % 8 and 500 <= x <= 16000 for s in odd for x in (s.m, s.n, s.k))
    # The committed CSVs are exactly what the seeded script writes.
    module = benchmark_module("make_shapes")
    module.HERE = tmp_path
    module.main()
    for name in shapes.SET_NAMES:
        assert (tmp_path / f"{name}.csv").read_text() == (shapes.SHAPES_DIR / f"{name}.csv").read_text(), name


def test_llm_set_has_forward_and_backward_layouts():
    llm = shapes.load_set("llm")
    layouts = {s.layout for s in llm}
    assert {"NN", "NT", "TN"} <= layouts
    ms = {s.m for s in llm if s.name.endswith(("M1", "M8", "M16", "M64", "M128"))}
    assert {1, 8, 16, 64, 128} <= ms
    # dx of W[in, out]: M = tokens, N = in, K = out, B read transposed.
    dx = next(s for s in llm if s.name == "llama3-8b.down.dx.T4096")
    assert (dx.m, dx.n, dx.k, dx.layout) == (4096, 14336, 4096, "NT")
    dw = next(s for s in llm if s.name == "llama3-8b.down.dw.T4096")
    assert (dw.m, dw.n, dw.k, dw.layout) == (14336, 4096, 4096, "TN")


def test_quick_subset_comes_first_and_covers_every_set():
    quick = shapes.load(quick=True)
    assert 8 <= len(quick) <= 30
    assert {s.set for s in quick} == set(shapes.SET_NAMES)
    full = shapes.load()
    assert full[: len(quick)] == quick
    assert len(full) == sum(len(shapes.load_set(n)) for n in shapes.SET_NAMES)


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


def test_xla_slope_loop_keeps_every_dot_inside_the_loop():
    import jax

    shape = shapes.Shape(name="t", set="t", group="t", m=32, n=48, k=64, layout="NT", dtype="float32")
    as_, bs = contenders.jax_operands(shape, 2)
    repeats = 2 * contenders.LOOP_UNROLL  # a while loop whose body is LOOP_UNROLL / 2 iterations of 2 sets
    f = jax.jit(contenders.loop_function(contenders.xla_dot(shape), repeats))
    out = f(as_, bs)
    # Every C of the unrolled body is a loop output (none may be computed only at C[0, 0]).
    assert len(out) == contenders.LOOP_UNROLL // 2 and all(len(cs) == 2 for cs in out)
    assert all(c.shape == (32, 48) for cs in out for c in cs)
    hlo = f.lower(as_, bs).compile().as_text()
    entry = hlo[hlo.index("ENTRY"):]
    assert "while(" in entry and "dot_general" not in entry  # no dot hoisted out of the loop
    # Every unrolled iteration keeps one dot per operand set (none merged or eliminated): a body
    # of LOOP_UNROLL products.
    assert contenders.loop_unroll(2, repeats) == contenders.LOOP_UNROLL // 2
    assert len(re.findall(r'op_name="[^"]*dot_general"', hlo)) >= contenders.LOOP_UNROLL
    assert contenders.loop_unroll(16, 1000) == 1 and contenders.loop_unroll(1, 3) == 3
    result = contenders.slope_time_jax(contenders.xla_dot(shape), as_, bs, estimate_s=1e-5, target_s=1e-4, trials=2)
    assert result["repeats"] >= 2 and "slope" in result["method"]


def test_jax_timings_run_in_turn_and_keep_the_median_of_the_rounds(tmp_path):
    """The runner's XLA column and JAX spot check: each loop compiled once, timed in rounds in
    turn, the median kept; a dot that fails gets its own error and the others still run."""
    shape = shapes.Shape(name="t", set="t", group="t", m=16, n=24, k=32, layout="NN", dtype="float32")
    args = cli.build_parser().parse_args(["--out", str(tmp_path), "--jax-rounds", "3"])
    runner = cli.Runner(args)
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


def test_xla_slope_loop_computes_the_chained_products_with_a_remainder():
    import jax

    shape = shapes.Shape(name="t", set="t", group="t", m=8, n=16, k=24, layout="NN", dtype="float32")
    as_, bs = contenders.jax_operands(shape, 3)
    repeats = 7  # a body of 6 iterations of 3 sets, then one iteration after the loop
    assert contenders.loop_unroll(3, repeats) == 6
    out = jax.jit(contenders.loop_function(contenders.xla_dot(shape), repeats))(as_, bs)
    assert len(out) == 7  # the body's six iterations and the remainder's one, three Cs each
    expected = [[None] * 3 for _ in range(repeats)]
    current = [np.asarray(a, np.float64) for a in as_]
    for step in range(repeats):
        for i, b in enumerate(bs):
            c = current[i] @ np.asarray(b, np.float64)
            expected[step][i] = c
            current[i] = current[i].copy()
            current[i][0, 0] = np.tanh(np.float32(c[0, 0]))
    # The loop holds the last trip's body (iterations 0..5 of the last trip = iterations 0..5
    # here, one trip) and then the remainder (iteration 6).
    for step in range(repeats):
        for i in range(3):
            got = np.asarray(out[step][i], np.float64)
            assert np.linalg.norm(got - expected[step][i]) <= 1e-5 * np.linalg.norm(expected[step][i])


def test_matmul_vs_xla_loop_carries_the_whole_product():
    """benchmarks/matmul_vs_xla.looped (the slope loop of mlp_block.py, mlp_gemms.py and
    sustained.py): the last C is a loop output, so XLA computes every element of every C."""
    import jax
    import jax.numpy as jnp

    module = benchmark_module("matmul_vs_xla")
    a = jax.random.normal(jax.random.key(1), (8, 24), jnp.float32)
    b = jax.random.normal(jax.random.key(2), (24, 16), jnp.float32)
    checksum, c = module.looped(jnp.dot, 3)(a, b)
    expected = np.asarray(a, np.float64) @ np.asarray(b, np.float64)  # A[0, 0] is rewritten unchanged
    assert c.shape == (8, 16)
    assert np.linalg.norm(np.asarray(c, np.float64) - expected) <= 1e-5 * np.linalg.norm(expected)
    assert float(checksum) == pytest.approx(3 * expected[0, 0], rel=1e-5)


def sass_stats_module():
    """benchmarks/sass_stats.py as a module (it lowers through jax-triton: skipped without it)."""
    from tests.reference import require_jax_triton

    require_jax_triton()
    return benchmark_module("sass_stats")


def test_sass_stats_reads_the_k_loop_of_the_lowered_kernel(tmp_path):
    """benchmarks/sass_stats.py: jax-triton's real CUDA compile of a forced decode config, assembled
    and disassembled by Triton's tools on any machine; the K loop is found, with its async copies
    and tensor-core instructions, at M = 1 (A's rows masked) and M = 16 alike."""
    module = sass_stats_module()
    config = Config.from_short("16x64x128 w4 s3 g1")
    loops = {}
    for m in (1, 16):
        directory = tmp_path / str(m)
        directory.mkdir()
        kernels = module.lowered_ptx(m, 256, 1024, layout="NN", dtype="bfloat16", config=config,
                                     compute_capability=90, directory=directory)
        assert list(kernels) == ["matmul_kernel"]
        report, sass = module.assemble(kernels["matmul_kernel"], "matmul_kernel", 90, directory)
        assert "registers" in report
        loops[m] = [loop for loop in module.loop_mixes(sass) if loop.get("HMMA")]
        assert len(loops[m]) == 1, loops[m]
    # One K step of a 16x64x128 tile: A 16x128 and B 128x64 bf16 by 16-byte async copies over
    # 128 threads (2 + 8 per thread; A's masked rows still issue theirs), and the same MMAs.
    assert loops[1][0]["LDGSTS"] == loops[16][0]["LDGSTS"] == 10
    assert loops[1][0]["HMMA"] == loops[16][0]["HMMA"] > 0


def test_short_a_mask_adds_no_per_step_work(tmp_path):
    """A decode tile's row mask is a compile-time constant (`matmul_kernel`'s SHORT_A_ROWS): the
    K loop of a 16x64x256 2-warp tile at M = 1 and 3 (A's rows masked) holds no more predicate
    work and registers than at M = 16 (no mask), give or take a few. When the mask compared rows
    with the run-time M, the loop re-derived it every step: 14 ISETP + 9 SEL more and 180
    registers against 160 (H200 SASS, BENCHMARKS.md session 14), and M = 1 streamed 8-24% slower."""
    module = sass_stats_module()
    config = Config.from_short("16x64x256 w2 s5 g1")
    predicates, registers = {}, {}
    for m in (1, 3, 16):
        directory = tmp_path / str(m)
        directory.mkdir()
        kernels = module.lowered_ptx(m, 512, 2048, layout="NN", dtype="bfloat16", config=config,
                                     compute_capability=90, directory=directory)
        report, sass = module.assemble(kernels["matmul_kernel"], "matmul_kernel", 90, directory)
        (loop,) = [loop for loop in module.loop_mixes(sass) if loop.get("HMMA")]
        predicates[m] = loop.get("ISETP", 0) + loop.get("SEL", 0)
        registers[m] = int(re.search(r"Used (\d+) registers", report).group(1))
    for m in (1, 3):
        assert predicates[m] <= predicates[16] + 6, predicates
        assert registers[m] <= registers[16] + 8, registers


# ------------------------------------------------------------------------------ oracle


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


# ------------------------------------------------------------------------------ report


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


def test_report_only_cli_and_empty_results(tmp_path):
    from jtblas.bench import cli

    path = tmp_path / "results.json"
    path.write_text(json.dumps(dict(meta={}, shapes=[])))
    assert cli.main(["--report-only", str(path), "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "square.png").stat().st_size > 0


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
    assert len(json.loads((tmp_path / "cpu_plan.json").read_text())["plans"]) == 18


# ------------------------------------------------------------------------------ GPU smoke test


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda(), reason="needs a CUDA GPU and torch")
def test_bench_smoke_on_two_tiny_shapes(tmp_path):
    shapes_dir = tmp_path / "shapes"
    shapes_dir.mkdir()
    (shapes_dir / "tiny.csv").write_text(
        "name,group,M,N,K,layout,dtype,quick\n"
        "t256,tiny,256,256,256,NN,bfloat16,1\n"
        "t100,tiny,100,200,300,NT,bfloat16,1\n"
        "t1025,tiny,1025,2001,1551,NN,bfloat16,1\n"  # the model repacks A and B: copies + kernel
    )
    out = tmp_path / "out"
    # In a subprocess: the CLI leaves through os._exit when nvMatmulHeuristics is installed.
    proc = subprocess.run(
        [sys.executable, "-m", "jtblas.bench", "--shapes", "tiny", "--shapes-dir", str(shapes_dir),
         "--max-candidates", "3", "--workers", "4", "--jax-checks", "1", "--out", str(out),
         "--time-budget", "400"],
        check=False, capture_output=True, text=True, cwd=REPO, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    by_name = {r["name"]: r for r in data["shapes"]}
    assert sorted(by_name) == ["t100", "t1025", "t256"]
    assert by_name["t1025"]["contenders"]["jtblas"].get("repacked") == "AB"
    for record in data["shapes"]:
        for name in ("jtblas", "oracle", "cublas", "tutorial"):
            entry = record["contenders"][name]
            assert entry.get("seconds", 0) > 0, (record["name"], name, entry)
            if "max_rel_err" in entry:
                assert entry["max_rel_err"] < 2e-2, (record["name"], name, entry)
        # The pick's own careful time joins the oracle when the pick is a candidate; with the list
        # capped at 3 it may not be, and then it can beat the capped search.
        # A repacked pick runs a padded product the oracle does not search, so it may beat it.
        if record["contenders"]["jtblas"].get("repacked"):
            assert record["ratios"]["pick_over_oracle"] is None and record["ratios"]["repack_over_oracle"] > 0
        elif record["contenders"]["oracle"]["pick_in_candidates"]:
            assert record["ratios"]["pick_over_oracle"] <= 1.0
        else:
            assert record["ratios"]["pick_over_oracle"] > 0
    for png in ("square.png", "pick_vs_oracle.png", "vs_xla_by_group.png"):
        assert (out / png).stat().st_size > 0
    assert (out / "oracle_cache.json").exists()


def test_cli_without_a_gpu_plans_and_checks_on_the_cpu(tmp_path, monkeypatch, capsys):
    """No GPU: the CLI says so, writes the model's plans for the set and the CPU backend's
    correctness checks, and exits 0 — never a traceback."""
    from jtblas.bench import cli

    monkeypatch.setattr(cli, "_gpu_problem", lambda: "no CUDA GPU visible to torch")
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
    assert "no CUDA GPU visible to torch: no device time can be measured here" in said
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


def test_merged_shards_make_one_report_and_one_cache(tmp_path):
    """`--report-only a,b`: the shapes of both parts in one report; their oracle caches merged."""
    from jtblas.bench import cli

    whole = _synthetic_results()
    parts = []
    for index in range(2):
        part = dict(meta=dict(whole["meta"], elapsed_s=10.0 + index, stopped=None, not_run=None),
                    shapes=whole["shapes"][index::2])
        folder = tmp_path / f"b{index}"
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps(part))
        (folder / "oracle_cache.json").write_text(json.dumps({f"key{index}": dict(best_s=index + 1.0)}))
        parts.append(str(folder / "results.json"))
    out = tmp_path / "merged"
    assert cli.main(["--report-only", ",".join(parts), "--out", str(out)]) == 0
    merged = json.loads((out / "results.json").read_text())
    assert sorted(r["name"] for r in merged["shapes"]) == sorted(r["name"] for r in whole["shapes"])
    assert merged["meta"]["elapsed_s"] == 11.0 and len(merged["meta"]["parts"]) == 2
    assert json.loads((out / "oracle_cache.json").read_text()) == {"key0": dict(best_s=1.0),
                                                                    "key1": dict(best_s=2.0)}
    assert json.loads((out / "summary.json").read_text())["shapes"] == len(whole["shapes"])


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

    rows = shapes_mod.load(["llm"])
    args = cli.build_parser().parse_args(["--shapes", "llm", "--max-m", "16"])
    decode = cli.rows_up_to_max_m(rows, args)
    assert decode and all(shape.m <= 16 for shape in decode)
    assert len(decode) == sum(1 for shape in rows if shape.m <= 16) < len(rows)
    assert cli.rows_up_to_max_m(rows, cli.build_parser().parse_args([])) == rows
    with pytest.raises(SystemExit, match="--max-m must be >= 1, got 0"):
        cli.rows_up_to_max_m(rows, cli.build_parser().parse_args(["--max-m", "0"]))


@pytest.mark.parametrize("mnk", [(1, 4096, 14336), (16, 3584, 3584), (8, 768, 3072)])
def test_decode_space_probe_offers_feasible_16_row_splits(mnk):
    """benchmarks/decode_space.py (issue 6's probe): every config fits the SM, every split
    reduces at least two K blocks, and the space holds what the model's space lacks (16-row
    split-K tiles, 2 warps)."""
    from jtblas import hardware
    from jtblas.model import resources

    module = benchmark_module("decode_space")
    m, n, k = mnk
    hw = hardware.get("h200")
    problem = Problem(m=m, n=n, k=k, dtype="bfloat16", out_dtype="bfloat16")
    space = module.decode_space(problem, hw)
    assert space and all(not resources.fit_errors(c, problem, hw) for c in space)
    assert all(-(-k // c.block_k) >= 2 * c.split_k for c in space)
    assert any(c.split_k > 1 and c.block_m == 16 for c in space)
    assert any(c.num_warps == 2 for c in space)
    deep = module.decode_space(problem, hw, "deep")  # deep K steps, many programs (session 9)
    assert deep and all(not resources.fit_errors(c, problem, hw) for c in deep)
    assert all(-(-k // c.block_k) >= c.split_k and -(-n // c.block_n) * c.split_k <= 8 * hw.sm_count
               for c in deep)
    assert any(c.block_k == 512 for c in deep) and any(c.num_stages < 3 for c in deep)


def test_pick_ab_reads_back_every_config_it_writes(tmp_path):
    """benchmarks/pick_ab.py: `--dump-picks` writes every benchmark shape's pick, `Config.from_short`
    inverts `Config.short()` for each (split-K and TMA included), and the shape keys parse."""
    module = benchmark_module("pick_ab")
    path = tmp_path / "picks.json"
    module.dump_picks(str(path))
    picks = json.loads(path.read_text())
    assert len(picks) == len({s.key() for s in shapes.load()})
    for key, (config, predicted_us) in picks.items():
        assert Config.from_short(config).short() == config and predicted_us > 0
        assert module.shape_from_key(key).key() == key
    split = Config(block_m=16, block_n=64, block_k=256, num_warps=2, num_stages=5, group_m=1, split_k=32)
    tma = Config(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4, group_m=8, tma=True)
    swap = dataclasses.replace(split, num_warps=4, swap_ab=True)
    for config in (split, tma, swap):
        assert Config.from_short(config.short()) == config
    assert swap.short() == "16x64x256 w4 s5 g1 k32 swap"
    for text in ("128x256x64 w8 s3", "128x256x64 w8 s3 g8 k2 tma", "128x256 w8 s3 g8", "16x64x256 w4 s5 g1 swap tma",
                 "16x64x256 w4 s5 g1 tma swap"):
        with pytest.raises(ValueError, match="from_short|tma needs split_k=1|cannot both"):
            Config.from_short(text)
    with pytest.raises(SystemExit):  # --configs times the named shapes only
        module.main(["--configs", "128x256x64 w8 s3 g8"])
    with pytest.raises(ValueError, match="from_short"):  # a bad config fails before any timing
        module.time_configs(["64x64x128 bfloat16 NN"], ["64x64 w4 s3 g1"], rounds=1)


def test_ab_rank_counts_pairs_the_model_orders_as_measured(tmp_path):
    """benchmarks/ab_rank.py: a pair of configs timed apart by more than the margin counts as
    ordered by the model when its pick is the faster one, and is listed when it is the slower;
    closer pairs and XLA's times are left out."""
    from jtblas import hardware, select

    module = benchmark_module("ab_rank")

    key = "4096x4096x4096 bfloat16 NN"
    pick = select(4096, 4096, 4096, dtype="bf16", hardware="h200").short()
    worse = "64x64x64 w4 s3 g8"
    for pick_s, worse_s, agree, wrong in ((1.0e-4, 1.2e-4, 1, 0), (1.2e-4, 1.0e-4, 0, 1), (1.0e-4, 1.01e-4, 0, 0)):
        path = tmp_path / "ab.json"
        rows = [dict(shape=key, before=pick, after=worse,
                     seconds=dict(before=[pick_s, pick_s * 1.002], after=[worse_s], xla=[1e-9]))]
        path.write_text(json.dumps(dict(rows=rows)))
        timings = module.load_timings([str(path)])
        assert set(timings[key]) == {pick, worse}
        counted, listed = module.compare(timings, hardware.H200, margin=0.03)
        assert (counted, len(listed)) == (agree, wrong)
        if listed:
            assert listed[0][2:] == (worse, pick) and listed[0][0] > 1.15


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_read_ceiling_kernels_sum_every_element_once(dtype):
    """benchmarks/read_ceiling.py (issue 6's read-once ceiling), in Triton's interpreter: the flat
    read's per-program sums (a tail past the last whole block masked) add up to the float64 sum of
    fresh random data, and each strip's sum (over the weight as stored and over its contiguous
    [K·N/64, 64] view) matches the float64 sum of its block."""
    import jax
    import jax.numpy as jnp

    from jtblas import launch
    from tests.reference import relative_error

    module = benchmark_module("read_ceiling")
    tol = 1e-6 if dtype == "float32" else 1e-3
    rng = np.random.default_rng()
    k, n, rows = 96, 192, 32
    weight = jnp.asarray(rng.standard_normal((k, n)), dtype=dtype)
    exact = np.asarray(weight, dtype=np.float64)
    flat = weight.reshape(-1)[: k * n - 37]  # not a multiple of any block
    block, loads = 256, 4
    programs = -(-flat.size // (block * loads))
    sums = launch.launch(module.read_kernel, grid=(programs,), args=[flat, flat.size],
                         out_shape=jax.ShapeDtypeStruct((programs,), jnp.float32), num_warps=4, num_stages=1,
                         metaparams=dict(BLOCK=block, LOADS=loads))
    assert relative_error(sums.sum(keepdims=True), exact.reshape(-1)[: flat.size].sum(keepdims=True)) < tol
    for view, (view_k, view_n) in ((weight, (k, n)), (weight.reshape(-1, 64), (k * n // 64, 64))):
        grid = (view_n // 64, view_k // rows)
        strips = launch.launch(module.read_strip_kernel, grid=grid, args=[view, view_k, view_n],
                               out_shape=jax.ShapeDtypeStruct((grid[0] * grid[1],), jnp.float32), num_warps=4,
                               num_stages=1, metaparams=dict(BLOCK_K=rows // 2, BLOCK_N=64, LOADS=2))
        expected = np.asarray(view, dtype=np.float64).reshape(grid[1], rows, grid[0], 64).sum(axis=(1, 3))
        assert relative_error(strips, expected.reshape(-1)) < tol


def test_split_parts_configs_split_and_fit():
    """benchmarks/split_parts.py: every config it times parses, fits the H200 on each default shape,
    and all but the unsplit baseline split K."""
    from jtblas import hardware
    from jtblas.model import resources

    module = benchmark_module("split_parts")
    hw = hardware.get("h200")
    configs = [Config.from_short(text) for text in module.CONFIGS]
    assert [c.short() for c in configs] == list(module.CONFIGS)
    assert sum(c.split_k == 1 for c in configs) == 1
    for text in module.DEFAULT_SHAPES.split(","):
        m, n, k = (int(v) for v in text.split("x"))
        problem = Problem(m=m, n=n, k=k, dtype="bfloat16", out_dtype="bfloat16")
        assert all(not resources.fit_errors(c, problem, hw) for c in configs), text
