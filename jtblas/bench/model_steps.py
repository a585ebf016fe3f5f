"""Whole Flax model steps with `flax.linen.Dense` against the same models with `jtblas.nn.Dense`.

Three models (GPT-2 small, a ViT-B/16-sized encoder, a two-layer Llama-style decoder with 7B
dimensions) are built twice from one definition: every projection is `flax.linen.Dense` in one
variant and `jtblas.nn.Dense` in the other (the MLP's GELU passed as the layer's `activation`,
so it runs in the product's epilogue, where Flax's variant applies `jax.nn.gelu` after the layer;
the Llama-style SwiGLU's gate-and-up projection is `jtblas.nn.GatedDense`, one launch that writes
silu(gate) · up, where Flax's variant splits a Dense of twice the width);
attention (`jnp.einsum`, `jax.nn.softmax`), norms and embeddings are the same code in both. The
variants share one parameter tree (initialised once), one batch and one optimiser set-up, and run
in one process on JAX's default device.

Measured per model and parameter dtype (compute is bf16):

- ``train``: a jitted AdamW step (cross-entropy loss, `jax.value_and_grad`, params and optimiser
  state donated and carried from step to step);
- ``decode``: a jitted one-token step of the decoders against a KV cache (batch 1), the cache
  donated and carried and the position advanced each step, dispatched from Python step by step
  (host dispatch included: what a per-token Python loop gets);
- ``generate``: the same one-token step run n times inside one jitted `lax.fori_loop` (greedy:
  each step's argmax token is the next step's input), calls of `GENERATE_TOKENS` steps timed by
  the slope below, divided by the tokens: device time per token, as a jitted generation loop
  gets it;
- ``infer``: the encoder's forward pass over a batch of images (in place of decoding).

Step time is a slope: a Python loop dispatches R steps and then blocks on the last output, again
with 2R steps, and (t(2R) − t(R)) / R is the time of one step with every fixed cost of a loop (the
first dispatch, the final synchronisation) cancelled. R makes R steps last about 50 ms (at least
3). Rounds alternate which variant goes first; the median over rounds is kept. The first call of
each variant (tracing, compilation, jtblas's kernel selection and Triton compilation) is timed on
its own, and the first outputs of both variants at identical inputs give the agreement (loss, or
logits, relative difference).

`run` measures every model × parameter dtype and returns a JSON-able dict; `markdown` renders it.
``python -m jtblas.bench.model_steps --out results.json`` does both.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import gc
import json
import math
import pathlib
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen

import jtblas
import jtblas.nn
from jtblas.bench import through_jax
from jtblas.epilogue import ACTIVATION_FUNCTIONS

__all__ = [
    "MODELS",
    "VARIANTS",
    "Decoder",
    "Encoder",
    "Llama",
    "ModelSpec",
    "decode_step",
    "forward_step",
    "init_cache",
    "init_params",
    "loss_fn",
    "make_batch",
    "markdown",
    "measure",
    "model_for",
    "run",
    "tiny",
    "train_step",
]

# The two variants, in the order the first round runs them.
VARIANTS: dict[str, type] = {"flax": linen.Dense, "jtblas": jtblas.nn.Dense}

# The steps measured by default.
STEPS = ("train", "decode", "generate")
# Tokens per call of the generation loop: a call's dispatch (tens of µs) spread over this many
# tokens of a few hundred µs each is well under 1% of a token.
GENERATE_TOKENS = 64
# One timed loop of R steps should last about this long (seconds).
TARGET_LOOP_S = 0.05
MIN_REPEATS = 3
MAX_REPEATS = 10_000
# Times a round is re-timed with R doubled when its slope comes out <= 0.
MAX_RETRIES = 3


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A model's size. ``kind`` is ``"gpt2"``, ``"encoder"`` or ``"llama"``.

    For the encoder, ``vocab`` is the number of classes, ``seq`` the tokens per image and
    ``features`` the input features of one patch; ``cache`` (the decode cache length) is unused.
    ``batch`` is the training (and encoder inference) batch; decoding uses batch 1.
    """

    name: str
    kind: str
    vocab: int
    width: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp: int
    seq: int
    batch: int
    cache: int
    features: int = 0


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        # GPT-2 small, with its real vocabulary (50257: odd, so the lm head's N has no alignment).
        ModelSpec("gpt2-small", "gpt2", vocab=50257, width=768, layers=12, heads=12, kv_heads=12, head_dim=64,
                  mlp=3072, seq=1024, batch=8, cache=1024),
        # ViT-B/16 at 224×224: 196 patches of 16·16·3 = 768 features plus one more token (the class
        # token's slot, here an ordinary input token), 1000 classes.
        ModelSpec("vit-b16", "encoder", vocab=1000, width=768, layers=12, heads=12, kv_heads=12, head_dim=64,
                  mlp=3072, seq=197, batch=64, cache=0, features=768),
        # Llama-architecture decoder with Mistral-7B's dimensions, 2 of its 32 layers so that fp32
        # params and Adam state (~11 GB) fit beside the other variant and compile fast.
        ModelSpec("llama-7b-2l", "llama", vocab=32000, width=4096, layers=2, heads=32, kv_heads=8, head_dim=128,
                  mlp=14336, seq=2048, batch=4, cache=1024),
    )
}


def tiny(spec: ModelSpec) -> ModelSpec:
    """A two-layer, width-64 version of `spec` (odd vocabulary 97, seq 16, batch 2) for CPU tests."""
    gqa = spec.kv_heads < spec.heads
    return dataclasses.replace(
        spec,
        name=f"{spec.name}-tiny",
        vocab=97,
        width=64,
        layers=2,
        heads=4,
        kv_heads=2 if gqa else 4,
        head_dim=16,
        mlp=128 if spec.kind == "llama" else 256,
        seq=16,
        batch=2,
        cache=16 if spec.cache else 0,
        features=48 if spec.features else 0,
    )


# ---------------------------------------------------------------------------------------------
# Models


def _rope(x: jax.Array, positions: jax.Array, theta: float = 10000.0) -> jax.Array:
    """Rotary position embedding of x [B, T, H, D] at positions [T] (the rotate-half convention)."""
    half = x.shape[-1] // 2
    freqs = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions.astype(jnp.float32)[:, None] * freqs[None, :]
    cos, sin = jnp.cos(angles)[None, :, None, :], jnp.sin(angles)[None, :, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).astype(x.dtype)


class Attention(linen.Module):
    """Multi-head (or grouped-query) attention whose projections are `dense`.

    Without a cache, keys are the inputs' own tokens (causal or not). With a cache
    ({"k", "v"}: [B, L, kv_heads, head_dim]) the new keys and values are written at `position`
    and the queries attend to cache slots <= their own position.
    """

    heads: int
    kv_heads: int
    head_dim: int
    causal: bool
    fused_qkv: bool
    use_bias: bool
    rope: bool
    dense: type = linen.Dense
    dtype: Any = jnp.bfloat16
    param_dtype: Any = jnp.float32

    @linen.compact
    def __call__(self, x, positions, cache=None, position=None):
        b, t, width = x.shape
        h, kv, hd = self.heads, self.kv_heads, self.head_dim
        proj = functools.partial(self.dense, use_bias=self.use_bias, dtype=self.dtype, param_dtype=self.param_dtype)
        if self.fused_qkv:
            q, k, v = jnp.split(proj((h + 2 * kv) * hd, name="qkv")(x), [h * hd, (h + kv) * hd], axis=-1)
        else:
            q, k, v = (proj(n * hd, name=name)(x) for n, name in ((h, "q"), (kv, "k"), (kv, "v")))
        q, k, v = q.reshape(b, t, h, hd), k.reshape(b, t, kv, hd), v.reshape(b, t, kv, hd)
        if self.rope:
            q, k = _rope(q, positions), _rope(k, positions)
        key_positions = positions
        if cache is not None:
            start = (0, position, 0, 0)
            k = jax.lax.dynamic_update_slice(cache["k"], k.astype(cache["k"].dtype), start)
            v = jax.lax.dynamic_update_slice(cache["v"], v.astype(cache["v"].dtype), start)
            cache = {"k": k, "v": v}
            key_positions = jnp.arange(k.shape[1])
        q = q.reshape(b, t, kv, h // kv, hd) * (hd**-0.5)
        scores = jnp.einsum("btkgd,bskd->bkgts", q, k, preferred_element_type=jnp.float32)
        if self.causal or cache is not None:
            mask = key_positions[None, :] <= positions[:, None]
            scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
        weights = jax.nn.softmax(scores, axis=-1).astype(self.dtype)
        out = jnp.einsum("bkgts,bskd->btkgd", weights, v.astype(self.dtype)).reshape(b, t, h * hd)
        return proj(width, name="o")(out), cache


class Block(linen.Module):
    """A pre-norm transformer layer: LayerNorm + GELU MLP (gpt2, encoder) or RMSNorm + SwiGLU (llama)."""

    spec: ModelSpec
    causal: bool
    dense: type = linen.Dense
    dtype: Any = jnp.bfloat16
    param_dtype: Any = jnp.float32

    @linen.compact
    def __call__(self, x, positions, cache=None, position=None):
        s = self.spec
        llama = s.kind == "llama"
        types = dict(dtype=self.dtype, param_dtype=self.param_dtype)
        norm = functools.partial(linen.RMSNorm, epsilon=1e-5, **types) if llama else functools.partial(
            linen.LayerNorm, epsilon=1e-5, **types)
        proj = functools.partial(self.dense, use_bias=not llama, **types)
        # GPT-2 fuses q, k and v in one Dense (its c_attn); the Llama layer keeps them separate (as
        # in its checkpoints), so its GQA shapes (N = 4096, 1024, 1024) are measured as such.
        attention = Attention(s.heads, s.kv_heads, s.head_dim, causal=self.causal, fused_qkv=not llama,
                              use_bias=not llama, rope=llama, dense=self.dense, name="attn", **types)
        y, cache = attention(norm(name="norm1")(x), positions, cache, position)
        x = x + y
        y = norm(name="norm2")(x)
        if llama:
            # Gate and up projections as one Dense of width 2·mlp (as fused by serving stacks);
            # jtblas's variant runs it as `jtblas.nn.GatedDense`, which has the same parameters.
            if _takes_activation(proj):
                y = jtblas.nn.GatedDense(s.mlp, activation="silu", name="gate_up", **types)(y)
            else:
                gate, up = jnp.split(proj(2 * s.mlp, name="gate_up")(y), 2, axis=-1)
                y = jax.nn.silu(gate) * up
        else:
            y = _activated(proj, s.mlp, "gelu_tanh" if s.kind == "gpt2" else "gelu", name="up")(y)
        return x + proj(s.width, name="down")(y), cache


def _activated(proj: Callable[..., linen.Module], features: int, activation: str, *, name: str) -> Callable:
    """x -> activation(proj(features)(x)): in the layer's epilogue where the layer takes an
    `activation` (`jtblas.nn.Dense`, as a user fusing it writes), else after it (`flax.linen.Dense`).
    The parameters are the same either way."""
    if _takes_activation(proj):
        return proj(features, activation=activation, name=name)
    layer = proj(features, name=name)
    return lambda x: ACTIVATION_FUNCTIONS[activation](layer(x))


def _takes_activation(proj: Callable[..., linen.Module]) -> bool:
    dense = proj.func if isinstance(proj, functools.partial) else proj
    return isinstance(dense, type) and issubclass(dense, jtblas.nn.Dense)


class Decoder(linen.Module):
    """GPT-2: learned token and position embeddings, LayerNorm, causal attention with fused qkv,
    GELU MLP, untied lm head. Returns (logits [B, T, vocab], updated cache or None)."""

    spec: ModelSpec
    dense: type = linen.Dense
    dtype: Any = jnp.bfloat16
    param_dtype: Any = jnp.float32

    @linen.compact
    def __call__(self, tokens, cache=None, position=0):
        s = self.spec
        types = dict(dtype=self.dtype, param_dtype=self.param_dtype)
        positions = position + jnp.arange(tokens.shape[1])
        x = linen.Embed(s.vocab, s.width, name="wte", **types)(tokens)
        x = x + linen.Embed(max(s.seq, s.cache), s.width, name="wpe", **types)(positions)[None]
        x, cache = _layers(self, x, positions, cache, position, causal=True)
        x = linen.LayerNorm(epsilon=1e-5, name="norm", **types)(x)
        return self.dense(s.vocab, use_bias=False, name="lm_head", **types)(x), cache


class Llama(linen.Module):
    """Llama-style decoder: RMSNorm, rotary embedding, grouped-query attention, SwiGLU MLP,
    untied lm head. Returns (logits [B, T, vocab], updated cache or None)."""

    spec: ModelSpec
    dense: type = linen.Dense
    dtype: Any = jnp.bfloat16
    param_dtype: Any = jnp.float32

    @linen.compact
    def __call__(self, tokens, cache=None, position=0):
        s = self.spec
        types = dict(dtype=self.dtype, param_dtype=self.param_dtype)
        positions = position + jnp.arange(tokens.shape[1])
        x = linen.Embed(s.vocab, s.width, name="embed", **types)(tokens)
        x, cache = _layers(self, x, positions, cache, position, causal=True)
        x = linen.RMSNorm(epsilon=1e-5, name="norm", **types)(x)
        return self.dense(s.vocab, use_bias=False, name="lm_head", **types)(x), cache


class Encoder(linen.Module):
    """ViT-style encoder: Dense patch embedding, learned position embedding, bidirectional
    attention, LayerNorm, GELU MLP, classifier head on the mean token. Returns logits [B, classes]."""

    spec: ModelSpec
    dense: type = linen.Dense
    dtype: Any = jnp.bfloat16
    param_dtype: Any = jnp.float32

    @linen.compact
    def __call__(self, patches):
        s = self.spec
        types = dict(dtype=self.dtype, param_dtype=self.param_dtype)
        x = self.dense(s.width, name="patch_embed", **types)(patches)
        pos = self.param("pos_embed", linen.initializers.normal(0.02), (s.seq, s.width), self.param_dtype)
        x = x + pos.astype(self.dtype)[None]
        x, _ = _layers(self, x, jnp.arange(s.seq), None, None, causal=False)
        x = linen.LayerNorm(epsilon=1e-5, name="norm", **types)(x)
        return self.dense(s.vocab, name="head", **types)(jnp.mean(x, axis=1))


def _layers(model, x, positions, cache, position, *, causal: bool):
    """The model's `spec.layers` blocks; the cache (one {"k", "v"} per layer) threads through."""
    new_cache = []
    for i in range(model.spec.layers):
        block = Block(model.spec, causal=causal, dense=model.dense, dtype=model.dtype,
                      param_dtype=model.param_dtype, name=f"layer_{i}")
        x, layer_cache = block(x, positions, None if cache is None else cache[i], position)
        new_cache.append(layer_cache)
    return x, None if cache is None else tuple(new_cache)


_MODEL_CLASSES = {"gpt2": Decoder, "encoder": Encoder, "llama": Llama}


def model_for(spec: ModelSpec, dense: type = linen.Dense, *, dtype: Any = jnp.bfloat16,
              param_dtype: Any = jnp.float32) -> linen.Module:
    """The model of `spec` with `dense` for every projection, computing in `dtype`."""
    return _MODEL_CLASSES[spec.kind](spec, dense=dense, dtype=jnp.dtype(dtype), param_dtype=jnp.dtype(param_dtype))


def _dummy_input(spec: ModelSpec, dtype: Any) -> jax.Array:
    if spec.kind == "encoder":
        return jnp.zeros((1, spec.seq, spec.features), dtype)
    return jnp.zeros((1, 1), jnp.int32)


def init_params(model: linen.Module, seed: int = 0) -> dict:
    """The model's parameters (the inner ``"params"`` dict), initialised under jit, in its param_dtype."""
    spec = model.spec
    params = jax.jit(model.init)(jax.random.key(seed), _dummy_input(spec, model.dtype))["params"]
    return jax.tree.map(lambda p: p.astype(model.param_dtype), params)


def param_shapes(model: linen.Module) -> dict:
    """The model's parameter tree as `jax.ShapeDtypeStruct`s, without computing anything."""
    return jax.eval_shape(model.init, jax.random.key(0), _dummy_input(model.spec, model.dtype))["params"]


def _assert_same_tree(params, shapes) -> None:
    if jax.tree.structure(params) != jax.tree.structure(shapes):
        raise AssertionError(f"parameter trees differ: {jax.tree.structure(params)} vs {jax.tree.structure(shapes)}")
    for p, s in zip(jax.tree.leaves(params), jax.tree.leaves(shapes)):
        if p.shape != s.shape or p.dtype != s.dtype:
            raise AssertionError(f"parameter {p.shape} {p.dtype} vs {s.shape} {s.dtype}")


def make_batch(spec: ModelSpec, seed: int = 0, dtype: Any = jnp.bfloat16) -> dict:
    """A seeded random training batch: ``tokens`` [B, seq + 1] (decoders; inputs and shifted
    targets) or ``patches`` [B, seq, features] in `dtype` and ``labels`` [B] (encoder)."""
    rng = np.random.default_rng(seed)
    if spec.kind == "encoder":
        patches = rng.standard_normal((spec.batch, spec.seq, spec.features), np.float32)
        return {"patches": jnp.asarray(patches, dtype),
                "labels": jnp.asarray(rng.integers(0, spec.vocab, spec.batch), jnp.int32)}
    return {"tokens": jnp.asarray(rng.integers(0, spec.vocab, (spec.batch, spec.seq + 1)), jnp.int32)}


def init_cache(spec: ModelSpec, batch: int = 1, dtype: Any = jnp.bfloat16) -> tuple:
    """An empty KV cache: per layer {"k", "v"} of [batch, spec.cache, kv_heads, head_dim] zeros."""
    shape = (batch, spec.cache, spec.kv_heads, spec.head_dim)
    return tuple({"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)} for _ in range(spec.layers))


# ---------------------------------------------------------------------------------------------
# Steps


def loss_fn(model: linen.Module) -> Callable[[dict, dict], jax.Array]:
    """(params, batch) -> mean cross-entropy in fp32: next token (decoders) or class label (encoder)."""
    def loss(params, batch):
        if model.spec.kind == "encoder":
            logits, labels = model.apply({"params": params}, batch["patches"]), batch["labels"]
        else:
            logits, _ = model.apply({"params": params}, batch["tokens"][:, :-1])
            labels = batch["tokens"][:, 1:]
        return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels).mean()

    return loss


def train_step(model: linen.Module, optimizer: optax.GradientTransformation) -> Callable:
    """Jitted (params, opt_state, batch) -> (params, opt_state, loss); params and opt_state donated."""
    loss = loss_fn(model)

    def step(params, opt_state, batch):
        value, grads = jax.value_and_grad(loss)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return jax.jit(step, donate_argnums=(0, 1))


def decode_step(model: linen.Module) -> Callable:
    """Jitted (params, cache, token [B, 1], position scalar) -> (logits [B, 1, vocab], cache); cache donated."""
    def step(params, cache, token, position):
        return model.apply({"params": params}, token, cache=cache, position=position)

    return jax.jit(step, donate_argnums=(1,))


def generate_loop(model: linen.Module) -> Callable:
    """Jitted (params, cache, token [B, 1], start scalar, n scalar) -> (cache, token): n greedy
    one-token steps in one `lax.fori_loop` (positions start, start + 1, ... wrapping at the cache
    length; each step's argmax token feeds the next); cache donated."""
    def run(params, cache, token, start, n):
        def body(i, state):
            cache, token = state
            position = (start + i) % model.spec.cache
            logits, cache = model.apply({"params": params}, token, cache=cache, position=position)
            return cache, jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)[:, None]

        return jax.lax.fori_loop(0, n, body, (cache, token))

    return jax.jit(run, donate_argnums=(1,))


def forward_step(model: linen.Module) -> Callable:
    """Jitted (params, inputs) -> logits: the inference forward pass (no cache)."""
    def step(params, inputs):
        out = model.apply({"params": params}, inputs)
        return out if model.spec.kind == "encoder" else out[0]

    return jax.jit(step)


# ---------------------------------------------------------------------------------------------
# Measurement


def _method(rounds: int, repeats: int | None = None) -> str:
    chosen = (f"R = {repeats} (fixed)" if repeats else f"R makes R steps last ~{TARGET_LOOP_S * 1e3:.0f} ms "
              f"(at least {MIN_REPEATS}), estimated from one timed warm call")
    return (
        "Per step = (t(2R) - t(R)) / R, t = wall time (time.perf_counter) of a Python loop dispatching R "
        f"(then 2R) jitted steps followed by jax.block_until_ready on the last output; {chosen}. Training "
        "carries the donated params and AdamW state, decoding the donated KV cache with the position advancing "
        "(wrapping at the cache length) and a fixed input token, inference re-runs the same batch; generate "
        f"dispatches calls of a jitted lax.fori_loop of {GENERATE_TOKENS} greedy one-token steps and divides "
        "the per-call slope by the tokens. dispatch_seconds = the host's time to dispatch one step (the 2R loop "
        "until its last dispatch returns, over 2R; median over rounds): near the step's time, the host and "
        "not the GPU sets the pace. "
        f"A round whose slope is <= 0 is re-timed with R doubled (up to {MAX_RETRIES} times). "
        f"Median over {rounds} round(s), flax then jtblas in even rounds and the reverse in odd ones. "
        "first_call_s = wall time of the first call with block_until_ready (tracing, XLA compilation, jtblas "
        "kernel selection and Triton compilation). Agreement: both variants' first outputs at identical "
        "params and inputs."
    )


def _time_loop(advance: Callable[[Any], Any], state: Any, n: int) -> tuple[float, float, Any]:
    """(seconds for `n` dispatches of `advance` plus the wait for the last, seconds until the last
    dispatch returned, the new state)."""
    start = time.perf_counter()
    for _ in range(n):
        state = advance(state)
    dispatched = time.perf_counter() - start
    jax.block_until_ready(state)
    return time.perf_counter() - start, dispatched, state


def _first_call(call: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = jax.block_until_ready(call())
    return time.perf_counter() - start, out


def _compare(runners: dict[str, list], *, rounds: int, repeats: int | None) -> dict[str, dict]:
    """Slope timing of each variant's `advance`; runners[v] = [advance, state] (state is replaced)."""
    chosen = {}
    for variant, runner in runners.items():
        if repeats:
            chosen[variant] = repeats
            continue
        estimate, _, runner[1] = _time_loop(runner[0], runner[1], 1)
        guess = math.ceil(TARGET_LOOP_S / max(estimate, 1e-9))
        chosen[variant] = min(MAX_REPEATS, max(MIN_REPEATS, guess))
    samples: dict[str, list[float]] = {v: [] for v in runners}
    dispatch: dict[str, list[float]] = {v: [] for v in runners}
    order = list(runners)
    for r in range(rounds):
        for variant in order if r % 2 == 0 else order[::-1]:
            advance, state = runners[variant]
            for _ in range(MAX_RETRIES + 1):
                n = chosen[variant]
                t_short, _, state = _time_loop(advance, state, n)
                t_long, dispatched, state = _time_loop(advance, state, 2 * n)
                slope = (t_long - t_short) / n
                if slope > 0 or n >= MAX_REPEATS:
                    break
                # Noise outweighed R steps (a busy host, a step far below the estimate): a longer loop.
                chosen[variant] = min(MAX_REPEATS, 2 * n)
            runners[variant][1] = state
            samples[variant].append(slope)
            dispatch[variant].append(dispatched / (2 * n))
    return {v: dict(seconds=statistics.median(s), round_seconds=s, repeats=chosen[v],
                    dispatch_seconds=statistics.median(dispatch[v])) for v, s in samples.items()}


def _rel_norm(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-300))


def _finish(timed: dict[str, dict], first: dict[str, float], **extra) -> dict:
    out = {v: dict(seconds=timed[v]["seconds"], first_call_s=first[v], round_seconds=timed[v]["round_seconds"],
                   repeats=timed[v]["repeats"], dispatch_seconds=timed[v]["dispatch_seconds"]) for v in timed}
    flax_s, jt_s = out["flax"]["seconds"], out["jtblas"]["seconds"]
    out["speedup_jtblas_over_flax"] = flax_s / jt_s if jt_s > 0 else float("nan")
    out.update(extra)
    return out


def _measure_train(models, params, batch, *, rounds, repeats, method) -> dict:
    optimizer = optax.adamw(1e-4)
    first, losses, runners = {}, {}, {}
    for variant, model in models.items():
        step = train_step(model, optimizer)
        p = jax.tree.map(jnp.copy, params)  # each variant owns (and donates) its own copy
        o = optimizer.init(p)
        first[variant], (p, o, loss) = _first_call(lambda step=step, p=p, o=o: step(p, o, batch))
        losses[variant] = float(loss)

        def advance(state, step=step):
            return step(state[0], state[1], batch)[:2]

        runners[variant] = [advance, (p, o)]
    timed = _compare(runners, rounds=rounds, repeats=repeats)
    del runners
    rel = abs(losses["flax"] - losses["jtblas"]) / max(abs(losses["flax"]), 1e-300)
    return _finish(timed, first, loss_flax=losses["flax"], loss_jtblas=losses["jtblas"], loss_rel_diff=rel,
                   method=method)


def _measure_decode(spec, models, params, *, seed, rounds, repeats, method) -> dict:
    rng = np.random.default_rng(seed + 1)
    token = jnp.asarray(rng.integers(0, spec.vocab, (1, 1)), jnp.int32)
    # Positions as device scalars made once, so that no step pays a host-to-device transfer.
    positions = [jax.device_put(np.int32(i)) for i in range(spec.cache)]
    first, logits, runners = {}, {}, {}
    for variant, model in models.items():
        step = decode_step(model)
        cache = init_cache(spec, 1, model.dtype)
        first[variant], (out, cache) = _first_call(lambda step=step, c=cache: step(params, c, token, positions[0]))
        logits[variant] = np.asarray(out.astype(jnp.float32))

        def advance(state, step=step):
            cache, i = state
            return step(params, cache, token, positions[i])[1], (i + 1) % spec.cache

        runners[variant] = [advance, (cache, 1 % spec.cache)]
    timed = _compare(runners, rounds=rounds, repeats=repeats)
    del runners
    return _finish(timed, first, logits_rel_diff=_rel_norm(logits["flax"], logits["jtblas"]), method=method)


def _measure_generate(spec, models, params, *, seed, rounds, repeats, method) -> dict:
    """Per-token time of `generate_loop` at GENERATE_TOKENS tokens per call, by `_compare`'s slope
    over calls; the agreement compares the first token's logits of one decode step."""
    rng = np.random.default_rng(seed + 1)
    token = jnp.asarray(rng.integers(0, spec.vocab, (1, 1)), jnp.int32)
    start = jax.device_put(np.int32(0))
    tokens = jax.device_put(np.int32(GENERATE_TOKENS))
    first, logits, runners = {}, {}, {}
    for variant, model in models.items():
        loop = generate_loop(model)
        first[variant], (cache, _) = _first_call(
            lambda loop=loop, model=model: loop(params, init_cache(spec, 1, model.dtype), token, start, tokens))
        logits[variant] = np.asarray(
            decode_step(model)(params, init_cache(spec, 1, model.dtype), token, start)[0].astype(jnp.float32))

        def advance(cache, loop=loop):
            return loop(params, cache, token, start, tokens)[0]

        runners[variant] = [advance, cache]
    timed = _compare(runners, rounds=rounds, repeats=repeats)
    del runners
    for entry in timed.values():  # per call -> per token
        entry["seconds"] /= GENERATE_TOKENS
        entry["dispatch_seconds"] /= GENERATE_TOKENS
        entry["round_seconds"] = [t / GENERATE_TOKENS for t in entry["round_seconds"]]
    return _finish(timed, first, logits_rel_diff=_rel_norm(logits["flax"], logits["jtblas"]),
                   tokens_per_call=GENERATE_TOKENS, method=method)


def _measure_infer(spec, models, params, batch, *, rounds, repeats, method) -> dict:
    inputs = batch["patches"] if spec.kind == "encoder" else batch["tokens"][:, :-1]
    first, logits, runners = {}, {}, {}
    for variant, model in models.items():
        step = forward_step(model)
        first[variant], out = _first_call(lambda step=step: step(params, inputs))
        logits[variant] = np.asarray(out.astype(jnp.float32))
        runners[variant] = [lambda _, step=step: step(params, inputs), out]
    timed = _compare(runners, rounds=rounds, repeats=repeats)
    del runners
    return _finish(timed, first, logits_rel_diff=_rel_norm(logits["flax"], logits["jtblas"]), method=method)


def _step_kinds(spec: ModelSpec, steps: Iterable[str]) -> list[str]:
    kinds = []
    for kind in steps:
        if kind not in ("train", "decode", "generate", "infer"):
            raise ValueError(f"unknown step {kind!r}: expected 'train', 'decode', 'generate' or 'infer'")
        if kind in ("decode", "generate") and spec.kind == "encoder":
            kind = "infer"  # the encoder has no decoding; its inference forward stands in
        if kind not in kinds:
            kinds.append(kind)
    return kinds


def measure(spec: ModelSpec, *, param_dtype: Any, steps: Sequence[str] = STEPS, rounds: int = 3,
            repeats: int | None = None, dtype: Any = "bfloat16", seed: int = 0) -> dict:
    """Times `spec`'s steps with flax.linen.Dense and with jtblas.nn.Dense on the default device.

    Args:
      spec: the model.
      param_dtype: the parameters' dtype (``"float32"`` or ``"bfloat16"``).
      steps: any of ``"train"``, ``"decode"``, ``"generate"`` (the encoder measures ``"infer"``
        instead of either) and ``"infer"``.
      rounds: timing rounds per variant (median kept; order alternates).
      repeats: R for the slope, fixed; None chooses it so R steps last ~50 ms.
      dtype: the compute dtype.
      seed: the parameters', batch's and decode token's seed.

    Returns:
      ``{model, kind, param_dtype, dtype, spec, method, steps: {kind: {flax: {seconds, first_call_s,
      round_seconds, repeats, dispatch_seconds}, jtblas: {...}, speedup_jtblas_over_flax, loss_flax, loss_jtblas,
      loss_rel_diff
      | logits_rel_diff, method}}}``; all times in seconds, ``speedup_jtblas_over_flax`` = flax seconds /
      jtblas seconds (> 1: jtblas faster).
    """
    param_dtype, dtype = jnp.dtype(param_dtype), jnp.dtype(dtype)
    kinds = _step_kinds(spec, steps)
    models = {v: model_for(spec, dense, dtype=dtype, param_dtype=param_dtype) for v, dense in VARIANTS.items()}
    # One parameter tree for both: initialised with flax.linen.Dense, checked against jtblas's tree.
    params = init_params(models["flax"], seed)
    _assert_same_tree(params, param_shapes(models["jtblas"]))
    method = _method(rounds, repeats)
    result = dict(model=spec.name, kind=spec.kind, param_dtype=param_dtype.name, dtype=dtype.name,
                  spec=dataclasses.asdict(spec), method=method, steps={})
    batch = make_batch(spec, seed, dtype)
    timing = dict(rounds=rounds, repeats=repeats, method=method)
    for kind in kinds:
        if kind == "train":
            result["steps"][kind] = _measure_train(models, params, batch, **timing)
        elif kind == "decode":
            result["steps"][kind] = _measure_decode(spec, models, params, seed=seed, **timing)
        elif kind == "generate":
            result["steps"][kind] = _measure_generate(spec, models, params, seed=seed, **timing)
        else:
            result["steps"][kind] = _measure_infer(spec, models, params, batch, **timing)
        gc.collect()
    return result


def _device() -> str:
    device = jax.devices()[0]
    return f"{device.platform}: {getattr(device, 'device_kind', str(device))} ({jax.device_count()} device(s))"


def run(names: Sequence[str] | None = None, param_dtypes: Sequence[str] = ("float32", "bfloat16"),
        tiny_models: bool = False, out: str | pathlib.Path | None = None, log: Callable[[str], Any] = print, *,
        steps: Sequence[str] = STEPS, rounds: int = 3, repeats: int | None = None, seed: int = 0) -> dict:
    """`measure` for every model in `names` (default: all of `MODELS`; their `tiny` versions if
    `tiny_models`) × param dtype, with `measure`'s `steps`, `rounds`, `repeats` and `seed`.

    An entry that fails records ``error`` (the exception's type and message) and the run goes on.
    The JSON (``{meta: {date, device, jax, flax, jtblas, source_commit, source_sha256, method},
    results: [measure's dicts]}``) is
    written to `out`, if given, after every entry. Memory is freed between entries.
    """
    names = list(MODELS) if names is None else list(names)
    specs = [tiny(MODELS[n]) if tiny_models else MODELS[n] for n in names]
    import flax  # for its version only

    report = dict(
        meta=dict(date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), device=_device(),
                  jax=jax.__version__, flax=flax.__version__, jtblas=jtblas.__version__,
                  source_commit=through_jax.source_commit(), source_sha256=through_jax.source_digest(),
                  method=_method(rounds, repeats)),
        results=[],
    )
    for spec in specs:
        for param_dtype in param_dtypes:
            log(f"{spec.name} params {param_dtype}: measuring {', '.join(_step_kinds(spec, steps))}")
            try:
                entry = measure(spec, param_dtype=param_dtype, steps=steps, rounds=rounds, repeats=repeats, seed=seed)
            except Exception as e:  # one failing model must not stop the others
                entry = dict(model=spec.name, kind=spec.kind, param_dtype=str(param_dtype), dtype="bfloat16",
                             error=f"{type(e).__name__}: {e}")
                log(f"  error: {entry['error']}")
            else:
                for kind, r in entry["steps"].items():
                    log(f"  {kind}: flax {r['flax']['seconds'] * 1e3:.3f} ms, jtblas {r['jtblas']['seconds'] * 1e3:.3f}"
                        f" ms, jtblas speed / flax {r['speedup_jtblas_over_flax']:.3f}")
            report["results"].append(entry)
            gc.collect()
            jax.clear_caches()
            if out is not None:
                pathlib.Path(out).write_text(json.dumps(report, indent=1) + "\n")
    return report


def _agreement(r: dict) -> str:
    if "loss_rel_diff" in r:
        return f"loss rel. diff {r['loss_rel_diff']:.1e}"
    return f"logits rel. diff {r['logits_rel_diff']:.1e}"


def _dispatch_share(timed: dict) -> str:
    """The host's dispatch time over the step's time ("–" for a report written before it was kept)."""
    dispatch = timed.get("dispatch_seconds")
    return "–" if dispatch is None or not timed["seconds"] > 0 else f"{dispatch / timed['seconds']:.2f}"


def markdown(results: dict | Sequence[dict]) -> str:
    """A Markdown table of `run`'s report (or its ``results`` list): milliseconds per step, the
    jtblas speed ÷ Flax (flax ms / jtblas ms), each variant's host dispatch time over its step
    time (near 1 or above: the host sets the pace, not the GPU), first-call seconds, and the
    agreement."""
    entries = results["results"] if isinstance(results, dict) else results
    lines = [
        "| model | params | step | flax ms | jtblas ms | jtblas speed ÷ Flax | dispatch ÷ step (flax, jtblas) "
        "| flax first call s | jtblas first call s | agreement |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for e in entries:
        if "error" in e:
            lines.append(f"| {e['model']} | {e['param_dtype']} | — | — | — | — | — | — | — "
                         f"| error: {e['error'][:120]} |")
            continue
        for kind, r in e["steps"].items():
            f, j = r["flax"], r["jtblas"]
            lines.append(
                f"| {e['model']} | {e['param_dtype']} | {kind} | {f['seconds'] * 1e3:.3f} | {j['seconds'] * 1e3:.3f} "
                f"| {r['speedup_jtblas_over_flax']:.2f}× | {_dispatch_share(f)}, {_dispatch_share(j)} "
                f"| {f['first_call_s']:.1f} | {j['first_call_s']:.1f} | {_agreement(r)} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jtblas.bench.model_steps [--models ...] [--param-dtypes ...] [--tiny] [--out FILE]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", choices=sorted(MODELS), default=None)
    parser.add_argument("--param-dtypes", nargs="*", choices=("float32", "bfloat16", "float16"),
                        default=["float32", "bfloat16"])
    parser.add_argument("--steps", nargs="*", choices=(*STEPS, "infer"), default=list(STEPS),
                        help="an encoder runs its inference forward ('infer') for decode and generate")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="the two-layer width-64 versions")
    parser.add_argument("--out", default=None, help="JSON file for the report")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    report = run(args.models, args.param_dtypes, tiny_models=args.tiny, out=args.out, steps=args.steps,
                 rounds=args.rounds, log=lambda line: print(line, file=sys.stderr, flush=True))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
