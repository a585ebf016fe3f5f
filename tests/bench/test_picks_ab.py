"""benchmarks/picks_ab.py times what a model change moved: the corpus products, fused layers'
products and the fresh draw's products (`benchmarks/fresh_shapes.py`) whose pick differs between
two `select_latency.py --dump` files on one GPU description, forced configs (a batched one under
vmap), or a pick after that repacks as this checkout's model plans it (other repacked plans listed
as not timed); its summary's arithmetic; bad arguments exit with one line."""

import json

import jax
import jax.numpy as jnp
import pytest

from tests.reference import load_script


@pytest.fixture(scope="module")
def picks_ab():
    return load_script("benchmarks/picks_ab.py")


@pytest.fixture(scope="module")
def dumps(picks_ab):
    """A `before` dump of every corpus key on two GPUs, and an `after` that moves four h200 picks:
    two forced configs, one to a repacked plan, one batched product (forced under vmap)."""
    before = {}
    for gpu in ("h200", "h100"):
        for key in picks_ab.corpus_keys(gpu):
            before[key] = {"pick": "128x256x64 w8 s4 g8", "seconds": 1e-4}
    keys = picks_ab.corpus_keys("h200")
    plain = [k for k, s in keys.items() if s.batch == 1]
    batched = next(k for k, s in keys.items() if s.batch > 1)
    after = {k: dict(v) for k, v in before.items()}
    after[plain[0]]["pick"] = "128x256x64 w8 s4 g8 tma"
    after[plain[1]]["pick"] = "128x128x64 w4 s5 g8"
    after[plain[2]]["pick"] = "128x256x64 w8 s4 g8 +B"
    after[batched]["pick"] = "128x128x64 w4 s3 g8"
    return before, after, plain[:3], batched


def test_moved_products_are_those_whose_pick_differs(picks_ab, dumps):
    before, after, plain, batched = dumps
    timeable, other = picks_ab.moved(before, after, "h200")
    assert sorted(t.key for t in timeable) == sorted([*plain[:2], batched])
    assert [o.key for o in other] == [plain[2]]
    first = next(t for t in timeable if t.key == plain[0])
    assert (first.before, first.after) == ("128x256x64 w8 s4 g8", "128x256x64 w8 s4 g8 tma")
    assert first.layer is None
    assert picks_ab.moved(before, after, "h100") == ([], [])


def test_a_moved_fused_layer_is_timed_as_that_layer(picks_ab, dumps):
    """A fused layer's product counts where both dumps hold it, and runs with its epilogue: XLA's
    dot with the same epilogue in jnp, the fused launch forced onto each pick."""
    before, after = ({k: dict(v) for k, v in dump.items()} for dump in dumps[:2])
    keys = picks_ab.fused_keys("h200")
    key, (shape, layer, activation) = next((k, v) for k, v in keys.items() if v[1] == "up")
    assert "+bias(" in key and activation in key
    after[key] = {"pick": "128x256x64 w8 s4 g8 tma", "seconds": 1e-4}
    assert key not in [t.key for t in picks_ab.moved(before, after, "h200")[0]]  # not in both dumps
    before[key] = {"pick": "128x256x64 w8 s4 g8", "seconds": 1e-4}
    product = next(t for t in picks_ab.moved(before, after, "h200")[0] if t.key == key)
    assert (product.layer, product.activation, product.shape) == (layer, activation, shape)
    assert set(picks_ab.contenders(product)) == {"xla", "before", "after"}


def test_a_pick_after_that_repacks_is_timed_as_the_model_plans_it(picks_ab):
    """A moved product whose pick after copies an operand (here fp32 NN on the H100, B copied
    transposed for the NT kernel) is timed as `jtblas.matmul` runs it where this checkout's model
    plans that pick, and listed as not timed where it does not (another checkout's plan)."""
    from jtblas import hardware, model

    select_latency = load_script("benchmarks/select_latency.py")
    keys = picks_ab.corpus_keys("h100", "float32")
    key, shape = next((k, s) for k, s in keys.items()
                      if s.layout == "NN" and model.plan_for_problem(s.problem(), hardware.get("h100")).transpose_b)
    pick = select_latency.pick_of(model.plan_for_problem(shape.problem(), hardware.get("h100")))
    assert pick.endswith(" +B +Bt")
    before = {k: {"pick": "64x128x32 w4 s6 g8", "seconds": 1e-4} for k in keys}
    after = {**before, key: {"pick": pick, "seconds": 1e-4}}
    timeable, other = picks_ab.moved(before, after, "h100", "float32")
    assert [t.key for t in timeable] == [key] and timeable[0].planned_after and not other
    assert set(picks_ab.contenders(timeable[0])) == {"xla", "before", "after"}
    after[key] = {"pick": "64x128x32 w4 s6 g8 +B", "seconds": 1e-4}
    timeable, other = picks_ab.moved(before, after, "h100", "float32")
    assert not timeable and [o.key for o in other] == [key]


def test_summary_counts_and_geomeans(picks_ab):
    def record(xla, old, new):
        return {"contenders": {"xla": {"seconds": xla}, "before": {"seconds": old}, "after": {"seconds": new}}}

    text = picks_ab.summary([record(1.0, 2.0, 1.0), record(1.0, 1.0, 2.0), record(1.0, 1.0, None)])
    assert text.startswith("2 moved products timed: after ÷ before in speed 1.000 geomean (1 faster by > 1%, "
                           "1 slower by > 1%, range 0.500-2.000); against XLA 0.707 -> 0.707")
    assert picks_ab.summary([]) == "no product timed"


def test_list_names_every_moved_product(picks_ab, dumps, tmp_path, capsys):
    before, after, plain, batched = dumps
    paths = [tmp_path / "before.json", tmp_path / "after.json"]
    for path, dump in zip(paths, (before, after)):
        path.write_text(json.dumps(dump))
    assert picks_ab.main([str(paths[0]), str(paths[1]), "--gpu", "h200", "--list"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("4 products moved on h200 (0 of the fresh draw): 3 to time (0 of them as the model "
                          "plans them), 1 not timeable (repacked)")
    assert all(key in out for key in (*plain, batched))
    assert "the fresh draw not compared: a dump holds none" in out


def test_the_fresh_draw_is_seeded_new_and_timed_where_it_moves(picks_ab, dumps, tmp_path, capsys):
    """The fresh draw: the same 120 shapes on every call, none a corpus product, odd sizes among
    them; a product of it whose pick moves is timed like a corpus one and marked in --list."""
    fresh_shapes = load_script("benchmarks/fresh_shapes.py")
    drawn, again = fresh_shapes.fresh(), fresh_shapes.fresh()
    assert drawn == again and len(drawn) == 120 and len({s.problem() for s in drawn}) == 120
    corpus = {key.split(" ", 1)[1] for key in picks_ab.corpus_keys("h200")}
    keys = picks_ab.fresh_keys("h200")
    assert len(keys) == 120 and not {key.split(" ", 1)[1] for key in keys} & corpus
    assert any(s.n % 8 or s.k % 8 for s in drawn) and {s.layout for s in drawn} == {"NN", "NT", "TN"}
    assert drawn != fresh_shapes.fresh(seed=1)
    before, after = ({k: dict(v) for k, v in dump.items()} for dump in dumps[:2])
    for dump in (before, after):
        dump.update({key: {"pick": "128x128x64 w4 s5 g8", "seconds": 1e-4} for key in keys})
    key = next(iter(keys))
    after[key] = {"pick": "64x128x64 w4 s4 g8", "seconds": 1e-4}
    product = next(t for t in picks_ab.moved(before, after, "h200")[0] if t.key == key)
    assert product.shape == keys[key] and product.layer is None
    paths = [tmp_path / "before.json", tmp_path / "after.json"]
    for path, dump in zip(paths, (before, after)):
        path.write_text(json.dumps(dump))
    assert picks_ab.main([str(paths[0]), str(paths[1]), "--gpu", "h200", "--list"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("5 products moved on h200 (1 of the fresh draw)")
    assert f"{key} (fresh): 128x128x64 w4 s5 g8 -> 64x128x64 w4 s4 g8" in out
    assert "fresh draw not compared" not in out


@pytest.mark.parametrize("argv,words", [
    (["missing.json", "missing.json", "--gpu", "h200"], "cannot read the dump"),
    (["{before}", "{empty}", "--gpu", "h200"], "missing from a dump"),
    (["{before}", "{before}", "--gpu", "h200", "--rounds", "0"], "--rounds"),
    (["{before}", "{before}", "--gpu", "a100"], "no picks for 'a100'"),
])
def test_bad_arguments_exit_with_one_line(picks_ab, dumps, tmp_path, capsys, argv, words):
    (tmp_path / "before.json").write_text(json.dumps(dumps[0]))
    (tmp_path / "empty.json").write_text("{}")
    argv = [a.format(before=tmp_path / "before.json", empty=tmp_path / "empty.json") for a in argv]
    assert picks_ab.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("picks_ab: ") and words in err[0]


def test_a_sample_is_spread_evenly_over_the_moved_products(picks_ab, dumps, tmp_path, capsys):
    """`--sample N` times N of the moved products, every len/N-th from the first; all where N is
    not smaller; below 1 it is an error of one line."""
    assert picks_ab.evenly_spaced(list(range(10)), 3) == [0, 3, 6]
    assert picks_ab.evenly_spaced(list(range(10)), 10) == list(range(10))
    assert picks_ab.evenly_spaced(list(range(4)), None) == [0, 1, 2, 3]
    before, after, _, _ = dumps
    paths = [tmp_path / "before.json", tmp_path / "after.json"]
    for path, dump in zip(paths, (before, after)):
        path.write_text(json.dumps(dump))
    assert picks_ab.main([str(paths[0]), str(paths[1]), "--gpu", "h200", "--sample", "0"]) == 2
    assert capsys.readouterr().err == "picks_ab: --sample must be >= 1, got 0\n"


def test_fp32_variants_are_timed_with_dtype(picks_ab):
    """`--dtype float32` compares the dumps' fp32 variants of the corpus products (keys `... float32
    ... tf32`), shapes in that dtype, and leaves the corpus-dtype keys, fused layers and fresh draw
    out."""
    keys = picks_ab.corpus_keys("h100", "float32")
    assert keys and all(" float32 " in key and key.endswith(" tf32") for key in keys)
    assert all(shape.dtype == "float32" for shape in keys.values())
    before = {key: {"pick": "128x128x32 w4 s3 g8"} for key in keys}
    after = {key: dict(value) for key, value in before.items()}
    first = next(iter(keys))
    after[first]["pick"] = "128x128x32 w8 s3 g8"
    timeable, other = picks_ab.moved(before, after, "h100", "float32")
    assert [(t.key, t.shape.dtype, t.after) for t in timeable] == [(first, "float32", "128x128x32 w8 s3 g8")]
    assert other == []


def test_ieee_variants_are_timed_with_precision(picks_ab, capsys):
    """`--dtype float32 --precision ieee` compares the dumps' fp32 variants at "ieee" (keys `...
    float32 ... ieee`), shapes at that precision (their products `Precision.HIGHEST` for jtblas
    and XLA); `--precision ieee` alone is a one-line error."""
    from jtblas.bench import jax_loop

    keys = picks_ab.corpus_keys("h100", "float32", "ieee")
    assert keys and all(" float32 " in key and key.endswith(" ieee") for key in keys)
    shape = next(iter(keys.values()))
    assert shape.precision == "ieee" and shape.problem().input_precision == "ieee" and shape.key().endswith(" ieee")
    before = {key: {"pick": "64x64x64 w4 s2 g8"} for key in keys}
    after = {key: dict(value) for key, value in before.items()}
    first = next(iter(keys))
    after[first]["pick"] = "64x64x64 w8 s2 g8"
    timeable, other = picks_ab.moved(before, after, "h100", "float32", "ieee")
    assert [(t.key, t.shape.precision) for t in timeable] == [(first, "ieee")] and other == []
    a = jax.ShapeDtypeStruct((shape.k, shape.m) if shape.transpose_a else (shape.m, shape.k), jnp.float32)
    b = jax.ShapeDtypeStruct((shape.n, shape.k) if shape.transpose_b else (shape.k, shape.n), jnp.float32)
    assert "HIGHEST" in str(jax.make_jaxpr(jax_loop.xla_dot(shape))(a, b))
    assert picks_ab.main(["before.json", "after.json", "--precision", "ieee"]) == 2
    assert capsys.readouterr().err == "picks_ab: --precision ieee needs --dtype float32, got --dtype None\n"
