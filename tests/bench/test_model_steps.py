"""Whole-model steps (`jtblas.bench.model_steps`) on the tiny specs, on CPU: both variants share
one parameter tree, every projection of the jtblas variant runs jtblas (an interpreted kernel launch on CPU,
so a silent fallback to XLA cannot pass), losses and gradients agree with Flax's, the KV-cache
decode matches the full forward pass, and `run` returns a complete, JSON-able report."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen

import jtblas.nn
from jtblas.bench import model_steps as ms
from jtblas.interpreter import INTERPRETED_CALL
from tests.reference import count_equations, relative_error

TINY = {name: ms.tiny(spec) for name, spec in ms.MODELS.items()}
# Dense layers per model: per layer (attention + MLP projections), plus the ones outside the layers.
DENSE_PER_LAYER = {"gpt2": 4, "encoder": 4, "llama": 6}
DENSE_OUTSIDE = {"gpt2": 1, "encoder": 2, "llama": 1}


def _seed(rng: np.random.Generator) -> int:
    return int(rng.integers(2**31))


def _rel_norm(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(np.linalg.norm(a - b) / np.linalg.norm(a))


def test_full_and_tiny_specs():
    assert ms.MODELS["gpt2-small"].vocab == 50257 and ms.MODELS["vit-b16"].features == 16 * 16 * 3
    llama = ms.MODELS["llama-7b-2l"]
    assert (llama.heads, llama.kv_heads, llama.head_dim, llama.width, llama.mlp) == (32, 8, 128, 4096, 14336)
    for name, spec in TINY.items():
        assert (spec.width, spec.layers, spec.heads, spec.vocab, spec.seq, spec.batch) == (64, 2, 4, 97, 16, 2)
        assert spec.kv_heads == (2 if spec.kind == "llama" else 4)
        assert spec.cache == (0 if spec.kind == "encoder" else 16)
        assert ms.tiny(ms.MODELS[name]) == spec  # a frozen dataclass: equal and hashable
        hash(spec)


@pytest.mark.parametrize("name", sorted(TINY))
def test_variants_share_one_parameter_tree(name):
    spec = TINY[name]
    for param_dtype in (jnp.float32, jnp.bfloat16):
        flax_model = ms.model_for(spec, linen.Dense, param_dtype=param_dtype)
        jtblas_model = ms.model_for(spec, jtblas.nn.Dense, param_dtype=param_dtype)
        shapes = ms.param_shapes(jtblas_model)
        params = ms.param_shapes(flax_model)  # init_params itself runs in the tests below
        assert jax.tree.structure(params) == jax.tree.structure(shapes)
        for p, s in zip(jax.tree.leaves(params), jax.tree.leaves(shapes)):
            assert (p.shape, p.dtype) == (s.shape, s.dtype) and p.dtype == param_dtype

    # Every projection is the `dense` class: one jtblas launch per Dense kernel in the forward pass.
    kernels = [path for path, _ in jax.tree_util.tree_leaves_with_path(shapes) if "kernel" in str(path[-1])]
    assert len(kernels) == spec.layers * DENSE_PER_LAYER[spec.kind] + DENSE_OUTSIDE[spec.kind]
    batch = ms.make_batch(spec, 0)
    inputs = batch["patches"] if spec.kind == "encoder" else batch["tokens"][:, :-1]
    jaxpr = jax.make_jaxpr(lambda p: jtblas_model.apply({"params": p}, inputs))(shapes)
    assert count_equations(jaxpr, INTERPRETED_CALL) == len(kernels)
    flax_closed = jax.make_jaxpr(lambda p: flax_model.apply({"params": p}, inputs))(shapes)
    flax_jaxpr = str(flax_closed)
    assert INTERPRETED_CALL not in flax_jaxpr and flax_jaxpr.count("dot_general") == len(kernels) + 2 * spec.layers
    # The MLP's activation runs in the jtblas layer's epilogue (`activation`; Llama's SwiGLU in
    # `jtblas.nn.GatedDense`), after Flax's layer. erfc: jax.nn.gelu(approximate=False); logistic: silu.
    activation = {"gpt2": "tanh", "encoder": "erfc", "llama": "logistic"}[spec.kind]
    assert count_equations(flax_closed, activation) == spec.layers and count_equations(jaxpr, activation) == 0


# GPT-2's blocks are the encoder's (LayerNorm, fused qkv with bias, GELU); its jtblas training loss
# is compared in test_run_reports_a_tiny_decoder, which spares a third interpreted backward pass here.
@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit-b16", "llama-7b-2l"])
def test_jtblas_loss_and_gradients_match_flax(name, rng):
    spec = TINY[name]
    seed = _seed(rng)
    models = {v: ms.model_for(spec, dense) for v, dense in ms.VARIANTS.items()}
    params = ms.init_params(models["flax"], seed)
    batch = ms.make_batch(spec, seed)
    values = {}
    for variant, model in models.items():
        lowered = jax.jit(jax.value_and_grad(ms.loss_fn(model))).lower(params, batch)
        assert ("callback" in lowered.as_text()) == (variant == "jtblas")
        values[variant] = lowered.compile()(params, batch)
    # The training step as measured: jtblas's product must be in its program too.
    optimizer = optax.adamw(1e-4)
    step = ms.train_step(models["jtblas"], optimizer)
    text = step.lower(params, optimizer.init(params), batch).as_text()
    assert "callback" in text or "custom_call" in text
    (loss_flax, grads_flax), (loss_jtblas, grads_jtblas) = values["flax"], values["jtblas"]
    assert np.isfinite(float(loss_jtblas))
    assert abs(float(loss_jtblas) - float(loss_flax)) / abs(float(loss_flax)) < 2e-2
    assert jax.tree.structure(grads_flax) == jax.tree.structure(grads_jtblas)
    flat = lambda tree: np.concatenate([np.asarray(g, np.float64).ravel() for g in jax.tree.leaves(tree)])
    assert _rel_norm(flat(grads_flax), flat(grads_jtblas)) < 2e-2
    for path, g_flax in jax.tree_util.tree_leaves_with_path(grads_flax):
        g_jtblas = dict(jax.tree_util.tree_leaves_with_path(grads_jtblas))[path]
        if "kernel" in str(path[-1]):  # each projection's weight gradient, not only the sum
            assert _rel_norm(g_flax, g_jtblas) < 2e-2, jax.tree_util.keystr(path)


@pytest.mark.parametrize("name", ["gpt2-small", "llama-7b-2l"])
def test_decode_with_cache_matches_the_full_forward(name, rng):
    spec = TINY[name]
    model = ms.model_for(spec, dtype=jnp.float32)
    params = ms.init_params(model, _seed(rng))
    tokens = jnp.asarray(rng.integers(0, spec.vocab, (1, spec.cache)), jnp.int32)
    full, cache = jax.jit(model.apply)({"params": params}, tokens)
    assert cache is None and full.shape == (1, spec.cache, spec.vocab)
    step = ms.decode_step(model)
    cache = ms.init_cache(spec, 1, jnp.float32)
    for i in range(spec.cache):
        logits, cache = step(params, cache, tokens[:, i:i + 1], jnp.int32(i))
        assert logits.shape == (1, 1, spec.vocab)
        assert relative_error(logits[0, 0], np.asarray(full[0, i], np.float64)) < 1e-4, i


def test_generate_loop_runs_greedy_decode_steps(rng):
    spec = TINY["gpt2-small"]
    model = ms.model_for(spec, dtype=jnp.float32)
    params = ms.init_params(model, _seed(rng))
    token = jnp.asarray(rng.integers(0, spec.vocab, (1, 1)), jnp.int32)
    step, start, n = ms.decode_step(model), 3, spec.cache  # wraps past the cache's end
    cache, expected = ms.init_cache(spec, 1, jnp.float32), token
    for i in range(n):
        logits, cache = step(params, cache, expected, jnp.int32((start + i) % spec.cache))
        expected = jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)[:, None]
    loop = ms.generate_loop(model)
    cache_loop, token_loop = loop(params, ms.init_cache(spec, 1, jnp.float32), token, jnp.int32(start), jnp.int32(n))
    assert int(token_loop[0, 0]) == int(expected[0, 0])
    for got, want in zip(jax.tree.leaves(cache_loop), jax.tree.leaves(cache), strict=True):
        assert relative_error(got, np.asarray(want, np.float64)) < 1e-5


@pytest.mark.slow
def test_run_reports_a_tiny_decoder(tmp_path, monkeypatch, rng):
    # An interpreted jtblas training step takes seconds on CPU, so R = 1; Flax's millisecond steps
    # then need R doubled until the slope outweighs the host's noise.
    monkeypatch.setattr(ms, "MAX_RETRIES", 12)
    monkeypatch.setattr(ms, "GENERATE_TOKENS", 2)
    out, lines = tmp_path / "steps.json", []
    report = ms.run(names=["gpt2-small"], param_dtypes=("float32",), tiny_models=True, rounds=1, repeats=1,
                    out=out, log=lines.append, seed=_seed(rng))
    assert json.loads(out.read_text()) == report
    assert set(report["meta"]) >= {"date", "device", "jax", "method"}
    (entry,) = report["results"]
    assert "error" not in entry, entry["error"]
    assert (entry["model"], entry["param_dtype"], entry["dtype"]) == ("gpt2-small-tiny", "float32", "bfloat16")
    assert set(entry["steps"]) == {"train", "decode", "generate"}
    assert entry["steps"]["generate"]["tokens_per_call"] == 2
    for kind, r in entry["steps"].items():
        for variant in ("flax", "jtblas"):
            assert r[variant]["seconds"] > 0 and r[variant]["first_call_s"] > 0, (kind, variant)
            assert len(r[variant]["round_seconds"]) == 1 and r[variant]["repeats"] >= 1
            assert r[variant]["dispatch_seconds"] > 0, (kind, variant)
        assert math.isfinite(r["speedup_jtblas_over_flax"]) and r["speedup_jtblas_over_flax"] > 0
        assert r["speedup_jtblas_over_flax"] == pytest.approx(r["flax"]["seconds"] / r["jtblas"]["seconds"])
        assert "t(2R) - t(R)" in r["method"]
    train, decode = entry["steps"]["train"], entry["steps"]["decode"]
    assert np.isfinite(train["loss_flax"]) and train["loss_rel_diff"] < 2e-2
    assert decode["logits_rel_diff"] < 2e-2 and entry["steps"]["generate"]["logits_rel_diff"] < 2e-2
    table = ms.markdown(report)
    assert "jtblas speed ÷ Flax" in table and table.count("gpt2-small-tiny") == 3
    decode_row = next(line for line in table.splitlines() if "| decode |" in line)
    flax_share = decode["flax"]["dispatch_seconds"] / decode["flax"]["seconds"]
    assert f"| {flax_share:.2f}, " in decode_row
    assert ms.markdown(report["results"]) == table
    assert any("gpt2-small-tiny" in line for line in lines)


def test_run_records_an_error_and_goes_on(monkeypatch):
    def measure(spec, *, param_dtype, **kwargs):
        if param_dtype == "bfloat16":
            raise RuntimeError("out of memory")
        return dict(model=spec.name, kind=spec.kind, param_dtype=param_dtype, dtype="bfloat16", steps={})

    monkeypatch.setattr(ms, "measure", measure)
    report = ms.run(names=["gpt2-small", "vit-b16"], tiny_models=True, log=lambda line: None)
    assert [(e["model"], e["param_dtype"], "error" in e) for e in report["results"]] == [
        ("gpt2-small-tiny", "float32", False), ("gpt2-small-tiny", "bfloat16", True),
        ("vit-b16-tiny", "float32", False), ("vit-b16-tiny", "bfloat16", True),
    ]
    assert report["results"][1]["error"] == "RuntimeError: out of memory"
    assert "error: RuntimeError: out of memory" in ms.markdown(report)


def test_slope_retimes_a_round_whose_slope_is_not_positive(monkeypatch):
    # Scripted loop durations (seconds): the first try gives t(2R) < t(R), the retry with 2R a slope.
    durations, calls = iter([0.5, 0.3, 0.1, 0.3]), []

    def time_loop(advance, state, n):
        calls.append(n)
        seconds = next(durations)
        return seconds, seconds / 2, state  # the host dispatched the loop in half its time

    monkeypatch.setattr(ms, "_time_loop", time_loop)
    timed = ms._compare({"flax": [lambda state: state, None]}, rounds=1, repeats=2)
    assert calls == [2, 4, 4, 8]
    assert timed["flax"]["seconds"] == pytest.approx((0.3 - 0.1) / 4) and timed["flax"]["repeats"] == 4
    assert timed["flax"]["dispatch_seconds"] == pytest.approx(0.3 / 2 / 8)


@pytest.mark.parametrize("argv,words", [
    (["--steps", "inference"], "invalid choice: 'inference'"),
    (["--param-dtypes", "float64"], "invalid choice: 'float64'"),
    (["--rounds", "0"], "--rounds must be at least 1, got 0"),
])
def test_bad_arguments_exit_with_one_line(argv, words, capsys):
    """A mistyped step, parameter dtype or round count stops before any model is built, naming
    the value (a step named 'inference' once ended a GPU visit's run in a traceback)."""
    with pytest.raises(SystemExit) as exit_info:
        ms.main(argv)
    assert exit_info.value.code == 2
    assert words in capsys.readouterr().err
