"""`jtblas.matmul`: the op. Leading-dim folding, layouts as strides, config choice, the
`custom_vjp` (backward GEMMs) and `custom_vmap` (one batch grid axis) around the launches. The
operands are checked in `jtblas.operands`; each launch's grid and meta-parameters come from
`jtblas.launch_specs`.

Precedence of the configuration: an explicit `config=` is used as given (after checking it fits
the GPU), on the caller's operands; otherwise the analytical model plans the product at trace
time (`jtblas.model.plan_for_problem`): a config, and whether misaligned operands are first copied
into zero-padded buffers (repacking; a padded M or N pads C, sliced to the caller's shape).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from jtblas import hardware, launch, launch_specs, partitioning, sharding
from jtblas.epilogue import activated, epilogue_reference
from jtblas.config import Config, Problem
from jtblas.kernels.matmul import matmul_epilogue_kernel, matmul_kernel
from jtblas.kernels.matmul_tma import (
    GLOBAL_SCRATCH_ALIGN,
    GLOBAL_SCRATCH_BYTES,
    matmul_tma_epilogue_kernel,
    matmul_tma_kernel,
)
from jtblas.kernels.reduce import sum_splits_epilogue_kernel, sum_splits_kernel
from jtblas.model import repack, resources
from jtblas.operands import check_config, launch_hardware, problem_of_operands, stored_dtypes

# Overrides the model's repacking decision while tracing (`repack_mode`): tests and experiments.
_REPACK_MODE: contextvars.ContextVar[str] = contextvars.ContextVar("jtblas_repack_mode", default="auto")


@contextlib.contextmanager
def repack_mode(mode: str):
    """Within the block, products traced by `matmul` (their backward GEMMs included) repack as
    `mode` says: "auto" (the model decides; the default), "always" (A and B are copied with K and
    both leading dimensions padded to multiples of 64, also with an explicit `config=`, which then
    runs on the padded problem), "strides" (the same copies, but M and N stay the caller's: only
    the row strides are padded, and C is not), "transpose" (a B stored [N, K] is copied transposed into [K, N]
    and the model's config for that problem runs), or "never". For tests and experiments; the mode is read at trace
    time, so a function jitted before the block keeps its traced decision."""
    if mode not in repack.REPACK_MODES:
        raise ValueError(f"jtblas: repack mode must be one of {repack.REPACK_MODES}, got {mode!r}")
    token = _REPACK_MODE.set(mode)
    try:
        yield
    finally:
        _REPACK_MODE.reset(token)


def matmul(
    a: jax.Array,
    b: jax.Array,
    *,
    bias: jax.Array | None = None,
    activation: str | None = None,
    residual: jax.Array | None = None,
    gated: bool = False,
    transpose_a: bool = False,
    transpose_b: bool = False,
    precision: Any = None,
    preferred_element_type: Any = None,
    config: Config | None = None,
    deterministic: bool = True,
) -> jax.Array:
    """C = activation(op(a) · op(b) + bias) + residual by jtblas's Triton kernel, with fp32
    accumulation.

    Args:
      a: [..., M, K] (or [..., K, M] with `transpose_a`); leading dims fold into M. With
        `transpose_a`, `a` must be 2-D.
      b: [K, N] (or [N, K] with `transpose_b`).
      bias: None or [N] (fp32, fp16 or bf16), added to every row of the fp32 product.
      activation: None or one of `jtblas.ACTIVATIONS`: "relu", "gelu_tanh" (`jax.nn.gelu`'s
        default tanh approximation), "gelu" (exact, with erf), "silu"; applied after the bias.
      residual: None or an array of the result's shape ([..., M, N], or [M, N] with the leading
        dims folded; fp32, fp16 or bf16), added last.
      gated: b's N columns are a gate's N/2 then an up projection's N/2 (one [K, N] weight of a
        gated linear unit, e.g. SwiGLU's gate and up projections side by side): the result is
        [..., M, N/2] = activation(a·b_gate + bias[:N/2]) · (a·b_up + bias[N/2:]) + residual, in
        one launch whose tiles pair the two halves' columns (N must be even; the model runs it
        unsplit in the pointer kernel). With `activation=None` it is the bilinear unit.
      transpose_a, transpose_b: the operand is stored transposed; it is read through strides,
        never transposed (see Repacking for the one copy the model may make).
      precision: `jax.lax.Precision` (or a pair, or a string) for fp32 operands: DEFAULT/HIGH/None
        use tf32 tensor cores, HIGHEST uses full fp32. Ignored for fp16/bf16.
      preferred_element_type: output dtype; default the operands' dtype.
      config: a `jtblas.Config` to force, run on the caller's operands (never repacked); None
        asks the model.
      deterministic: True (the default): the same inputs give bit-identical outputs, run after
        run; a split-K config adds its fp32 partials in a fixed order in a second launch. False:
        a split-K config may instead add the partials with fp32 atomics into a zeroed buffer
        (one launch, plus a cast when the output is not fp32) — faster, not bit-reproducible
        (the order of the adds varies). No effect on unsplit configs. Backward GEMMs inherit it.

    Returns:
      [..., M, N] in `preferred_element_type`, named `"jtblas_matmul"` for `jax.checkpoint`
      policies (`jax.checkpoint_policies.save_only_these_names("jtblas_matmul")`).

    Epilogue: the bias, activation and residual are applied to the fp32 accumulator inside the
    product's launch (in the split-K reduction where the model splits K, after the sum), then
    the result is cast once to the output dtype: no pass over the output, no rounding between
    the steps. Under `jit` with sharded operands (several devices) the kernel computes the product
    and XLA applies the epilogue after it (after the cross-device sum of a K-sharded product).

    Transformations: reverse-mode autodiff (`grad`, `vjp`) runs dx = g·op(b)ᵀ and
    dw = op(a)ᵀ·g as two more jtblas GEMMs that read the transposes through strides, each with
    its own model-chosen config (a forced `config` applies to the forward product only); the
    cotangent g is cast to the operands' dtype first and the gradients come back in the operands'
    dtypes. `vmap` launches the kernel once over the batch (the pointer kernel's batch grid axis,
    the TMA kernel's one persistent grid), or folds a batched `a` into M.
    Forward-mode (`jvp`, `jacfwd`) is not supported. With an epilogue, the residual's cotangent is
    g itself; with an activation, a differentiated forward pass launches the product up to the
    pre-activation op(a)·op(b) + bias (in the output dtype) and lets XLA apply the activation and
    the residual, saving the pre-activation for the backward pass (no second GEMM), which
    multiplies g by the activation's derivative there, in fp32; the bias's cotangent is that
    product's column sum. Every cotangent comes back in its input's dtype.

    Repacking: where an operand's rows or K are misaligned (narrow vector loads), the model may
    copy A and/or B into zero-padded buffers (K and the leading dimension rounded up to 64) and run
    the kernel on the aligned problem, when the predicted kernel time plus the copies beats the
    plain kernel (`jtblas.explain` says which and why). C is written directly in the caller's
    shape. Extra memory: at most the padded copies of A and B, ⌈rows⌉·⌈cols⌉ elements each with
    the padded axes rounded up to 64 (per batch entry), freed after the product.
    """
    problem, shape = problem_of_operands(
        a, b, transpose_a=transpose_a, transpose_b=transpose_b, precision=precision,
        preferred_element_type=preferred_element_type, bias=bias, activation=activation, residual=residual,
        gated=gated,
    )
    if config is not None and not isinstance(config, Config):
        raise TypeError(f"jtblas.matmul: config must be a jtblas.Config or None, got {type(config).__name__}")
    if problem is None:  # an empty product: no kernel to launch
        out_dtype = jnp.dtype(preferred_element_type or a.dtype)
        zeros = jnp.zeros((*shape.out_shape[:-1], shape.n), jnp.float32)  # b's columns
        return epilogue_reference(zeros, bias=bias, activation=activation or "", residual=residual,
                                  gated=gated).astype(out_dtype)
    if not isinstance(deterministic, bool):
        raise TypeError(f"jtblas.matmul: deterministic must be a bool, got {type(deterministic).__name__}")
    m, k = problem.m, problem.k
    static = _Static(
        transpose_a=problem.transpose_a, transpose_b=problem.transpose_b,
        input_precision=problem.input_precision, out_dtype=problem.out_dtype, config=config,
        repack=_REPACK_MODE.get(), deterministic=deterministic, activation=problem.activation,
        bias_dtype=problem.bias_dtype, residual_dtype=problem.residual_dtype,
        a_dtype=jnp.dtype(a.dtype).name, b_dtype=jnp.dtype(b.dtype).name, compute_dtype=problem.dtype,
        target=launch.target_platform([a, b]), gated=problem.gated,
    )
    if _forward_mode(a, b, bias, residual):
        raise TypeError(_NO_FORWARD_MODE)
    a2 = a.reshape(k, m) if transpose_a else a.reshape(m, k)  # free: dense row-major
    residual2 = None if residual is None else residual.reshape(m, problem.out_n)  # free
    # Under shard_map: the operands typed as varying over the union of their manual axes, the
    # custom_vjp traced inside jit (jtblas/sharding.py says why).
    present = [x for x in (bias, residual2) if x is not None]
    a2, b, *present = sharding.match_varying(a2, b, *present)
    if bias is not None:
        bias = present.pop(0)
    if residual2 is not None:
        residual2 = present.pop(0)
    gemm = _gemm_in_jit if sharding.in_shard_map() else _gemm
    try:
        out = gemm(a2, b, bias, residual2, static)
    except TypeError as error:  # custom_vjp's own message, in cases _forward_mode cannot see
        if "forward-mode" in str(error):
            raise TypeError(_NO_FORWARD_MODE) from error
        raise
    out = checkpoint_name(out, "jtblas_matmul")
    return out.reshape(shape.out_shape)


_NO_FORWARD_MODE = (
    "jtblas.matmul supports reverse-mode differentiation only (jax.grad, jax.vjp, jax.jacrev); "
    "forward-mode (jax.jvp, jax.jacfwd, jax.hessian) is not implemented: the product is a "
    "custom_vjp around a Triton call, which has no JVP rule. Use reverse mode, or "
    "jax.lax.dot_general where forward mode is needed."
)


def _forward_mode(*arrays: Any) -> bool:
    """True when an operand carries a forward-mode tangent (jvp, jacfwd). Under jit, custom_vjp
    only fails at lowering with a terse message; this check raises a clear one at trace time.
    With direct linearization (JAX's default) `grad` traces LinearizeTracers, never JVPTracers."""
    if not jax.config.jax_use_direct_linearize:
        return False
    return any(isinstance(x, jax.interpreters.ad.JVPTracer) for x in arrays)


class _Static(NamedTuple):
    """The hashable, non-differentiable part of one product (a `custom_vjp` nondiff argument)."""

    transpose_a: bool
    transpose_b: bool
    input_precision: str
    out_dtype: str
    config: Config | None  # None: the model picks, per launch
    repack: str = "auto"  # repack_mode's override, read when `matmul` was traced
    deterministic: bool = True  # False: split-K may add partials with atomics
    activation: str = ""  # the epilogue's activation ("": none)
    bias_dtype: str = ""  # "": no bias
    residual_dtype: str = ""  # "": no residual
    a_dtype: str = ""  # the operands' stored dtypes, their cotangents' ("": the compute dtype)
    b_dtype: str = ""
    compute_dtype: str = ""  # the dtype the operands are multiplied in ("": a's)
    # `launch.target_platform` when `matmul` was traced: JAX caches the traces of custom_vjp,
    # custom_vmap and custom_partitioning functions by their static arguments, and a trace fixes
    # the launch's backend, so a product traced for the CPU interpreter must not be reused in a
    # lowering for CUDA (`launch.forced_backend`), nor the reverse.
    target: tuple[str, int | None] = ("", None)
    gated: bool = False  # b's columns are a gate's then an up projection's (`Problem.gated`)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _gemm(a: jax.Array, b: jax.Array, bias: jax.Array | None, residual: jax.Array | None,
          static: _Static) -> jax.Array:
    """activation(op(a) · op(b) + bias) + residual for 2-D operands (bias [N] and residual [M, N]
    or None): the differentiable product (custom_vjp outermost, the custom_vmap launcher inside,
    as jax-triton has neither a JVP nor a batching rule)."""
    extras = [x[None] for x in (bias, residual) if x is not None]
    launcher = _batched_launcher(static, bias is not None, residual is not None)
    return launcher(a[None], b[None], *extras)[0]


def _gemm_fwd(a: Any, b: Any, bias: Any, residual: Any, static: _Static) -> tuple[jax.Array, tuple]:
    # symbolic_zeros: the arrays come as CustomVJPPrimal(value, perturbed). Only the residuals a
    # gradient needs are kept: da needs b, db needs a (a data input, not perturbed, needs no da:
    # one GEMM less per first layer).
    bias_value = None if bias is None else bias.value
    residual_value = None if residual is None else residual.value
    saved = (a.value if b.perturbed else None, b.value if a.perturbed else None)
    if not static.activation and not static.gated:
        return _gemm(a.value, b.value, bias_value, residual_value, static), (*saved, None)
    # With an activation (or a gate), the launch stops at the pre-activation z = op(a)·op(b) +
    # bias (in the output dtype, as XLA's dot would write it; both halves of a gated product) and
    # XLA applies the activation, the gate and the residual: z is what the derivative needs, so it
    # is saved rather than recomputed by a second GEMM in the backward pass (M x N saved, as for
    # an unfused layer).
    pre_static = static._replace(activation="", residual_dtype="", gated=False)
    pre = _gemm(a.value, b.value, bias_value, None, pre_static)
    out = epilogue_reference(pre, activation=static.activation, residual=residual_value, gated=static.gated)
    return out.astype(static.out_dtype), (*saved, pre)


def _gemm_bwd(static: _Static, residuals: tuple, g: Any) -> tuple[Any, Any, Any, Any]:
    """dx = g'·op(b)ᵀ and dw = op(a)ᵀ·g', written for the stored layouts so that every operand is
    read through strides: each is the public `matmul` with transpose flags and config=None. g' is
    g times the activation's (and the gate's) derivative at the saved pre-activation (g without
    one); the bias's cotangent is g''s column sum, the residual's g itself, each in its input's
    dtype."""
    a, b, pre = residuals
    if isinstance(g, jax.custom_derivatives.SymbolicZero):
        return None, None, None, None
    d_residual = g.astype(static.residual_dtype) if static.residual_dtype else None
    if static.activation or static.gated:  # g times the derivative at the saved pre-activation, in fp32
        _, derivative = jax.vjp(functools.partial(activated, activation=static.activation, gated=static.gated),
                                pre.astype(jnp.float32))
        g = derivative(g.astype(jnp.float32))[0]
    d_bias = jnp.sum(g.astype(jnp.float32), axis=0).astype(static.bias_dtype) if static.bias_dtype else None
    da, db = _operand_cotangents(a, b, g, static)
    return da, db, d_bias, d_residual


def _operand_cotangents(a: Any, b: Any, g: jax.Array, static: _Static) -> tuple[Any, Any]:
    """(da, db) of op(a)·op(b) for the cotangent g of the product: da where `b` is given, db
    where `a` is."""
    ta, tb = static.transpose_a, static.transpose_b
    compute = static.compute_dtype or (a if a is not None else b).dtype
    # g (in the output dtype) is cast to the compute dtype, which keeps 16-bit tensor cores for
    # mixed-precision training (a bf16 g is the usual choice); an operand stored in another dtype
    # (an fp32 weight) is read as stored and converted in the kernel, and each gradient comes out
    # in its operand's stored dtype.
    g = g.astype(compute)
    gemm = functools.partial(
        matmul,
        precision=jax.lax.Precision.HIGHEST if static.input_precision == "ieee" else None,
        deterministic=static.deterministic,
    )
    da = db = None
    if b is not None:
        a_dtype = static.a_dtype or compute
        if ta:  # a is stored [K, M]: da = (g·op(b)ᵀ)ᵀ = op(b)·gᵀ
            da = gemm(b, g, transpose_a=tb, transpose_b=True, preferred_element_type=a_dtype)
        else:  # da = g·op(b)ᵀ; b stored [N, K] (tb) is op(b)ᵀ already
            da = gemm(g, b, transpose_b=not tb, preferred_element_type=a_dtype)
    if a is not None:
        b_dtype = static.b_dtype or compute
        if tb:  # b is stored [N, K]: db = (op(a)ᵀ·g)ᵀ = gᵀ·op(a)
            db = gemm(g, a, transpose_a=True, transpose_b=ta, preferred_element_type=b_dtype)
        else:  # db = op(a)ᵀ·g; a stored [K, M] (ta) is op(a)ᵀ already
            db = gemm(a, g, transpose_a=not ta, preferred_element_type=b_dtype)
    return da, db


_gemm.defvjp(_gemm_fwd, _gemm_bwd, symbolic_zeros=True)
_gemm_in_jit = jax.jit(_gemm, static_argnums=4)


@functools.cache
def _batched_launcher(static: _Static, has_bias: bool = False, has_residual: bool = False) -> Any:
    """The kernel launch over a batch as a `custom_vmap` function of a [Ba, ., .], b [Bb, ., .]
    and, where the product has them, bias [Bc, N] and residual [Br, M, N] (each batch size 1,
    broadcast, or the common B) -> [B, M, N].

    Its vmap rule merges the vmapped axis with the existing batch axis (a free reshape) and calls
    the launcher again, so nested vmaps flatten into one batch grid axis, never a Python loop.
    """

    @jax.custom_batching.custom_vmap
    def launch_batched(a: jax.Array, b: jax.Array, *extras: jax.Array) -> jax.Array:
        # Under jit with sharded operands each device launches on its own blocks.
        bias = extras[0] if has_bias else None
        residual = extras[-1] if has_residual else None
        return partitioning.partitioned_launch(_launch_batched, a, b, static, bias=bias, residual=residual)

    @launch_batched.def_vmap
    def vmap_rule(axis_size: int, in_batched: list[bool], a: jax.Array, b: jax.Array, *extras: jax.Array):
        arrays = [x if batched else x[None] for x, batched in zip((a, b, *extras), in_batched)]  # [S or 1, B., ...]
        inner = max(x.shape[1] for x in arrays)
        out = launch_batched(*(_merge_batch_axes(x, axis_size, inner) for x in arrays))
        return out.reshape(axis_size, inner, *out.shape[1:]), True

    return launch_batched


def _merge_batch_axes(x: jax.Array, outer: int, inner: int) -> jax.Array:
    """[So, Bi, ...] (So ∈ {1, outer}, Bi ∈ {1, inner}) -> [So·Bi, ...] with So·Bi ∈ {1, outer·inner}.

    The merge is a free reshape unless x is broadcast along one axis only while the other is a
    real batch (nested vmap over different operands): one stride cannot describe that, so x is
    broadcast (copied) to the full batch."""
    batch = x.shape[0] * x.shape[1]
    if batch not in (1, outer * inner):
        x = jnp.broadcast_to(x, (outer, inner, *x.shape[2:]))
    return x.reshape(-1, *x.shape[2:])


def _launch_batched(a: jax.Array, b: jax.Array, static: _Static, *, bias: jax.Array | None = None,
                    residual: jax.Array | None = None) -> jax.Array:
    """One product's launches for a [Ba, ., .], b [Bb, ., .], bias [Bc, N], residual [Br, M, N]
    (each batch 1 or B; bias and residual None without them) -> [B, M, N]."""
    batch_a, batch_b = a.shape[0], b.shape[0]
    batch = max(batch_a, batch_b, *(x.shape[0] for x in (bias, residual) if x is not None))
    rows, cols = a.shape[1:]
    m, k = (cols, rows) if static.transpose_a else (rows, cols)
    n = b.shape[1] if static.transpose_b else b.shape[2]
    out_n = n // 2 if static.gated else n  # C's columns
    out_dtype = jnp.dtype(static.out_dtype)
    if batch == 0:
        return jnp.zeros((0, m, out_n), out_dtype)
    if batch_b == 1 and batch_a > 1 and not static.transpose_a and (bias is None or bias.shape[0] == 1):
        # Only `a` is batched (the residual too, or broadcast) and stored [Ba, M, K]: the batch
        # folds into M (a free reshape), one larger GEMM instead of a batch of small ones.
        if residual is not None:
            residual = jnp.broadcast_to(residual, (batch_a, m, out_n)).reshape(1, batch_a * m, out_n)
        out = _launch_batched(a.reshape(1, batch_a * m, k), b, static, bias=bias, residual=residual)
        return out.reshape(batch_a, m, out_n)
    compute = static.compute_dtype or jnp.dtype(a.dtype).name
    a_dtype, b_dtype = stored_dtypes(a, b, compute)
    problem = Problem(
        m=m, n=n, k=k, dtype=compute, out_dtype=static.out_dtype,
        transpose_a=static.transpose_a, transpose_b=static.transpose_b,
        input_precision=static.input_precision, batch=batch,
        bias_dtype=static.bias_dtype, activation=static.activation, residual_dtype=static.residual_dtype,
        a_dtype=a_dtype, b_dtype=b_dtype, gated=static.gated,
    )
    config = static.config
    hw = launch_hardware([a, b])
    if config is None:
        plan = repack.plan_for_problem(problem, hw, static.repack)
        problem, config = plan.kernel_problem, plan.config
        if plan.convert_a:  # converted first: the model predicts it faster than in the kernel
            a = a.astype(problem.dtype)
        if plan.convert_b:
            b = b.astype(problem.dtype)
        # An operand copied transposed (the pad below fuses with it): B [.., N, K] into [.., K, N],
        # or in tf32 A [.., K, M] into [.., M, K] and B [.., K, N] into [.., N, K].
        if plan.transpose_a:
            a = jnp.swapaxes(a, 1, 2)
        if plan.transpose_b:
            b = jnp.swapaxes(b, 1, 2)
    else:  # checked here, per launched problem: batching may have folded more rows into M
        if static.repack in ("always", "strides") and not problem.gated:  # a padded B would move the gated pairs
            problem = repack.padded_problem(problem, pad_a=True, pad_b=True,
                                            pad_k=problem.k % repack.PAD_MULTIPLE != 0,
                                            pad_c=static.repack == "always")
        check_config(config, problem, hw)
    # Repacking: copy A and/or B into zero-padded buffers [batch, rows, row stride] (at most the
    # padded operand sizes; K's zeros leave the fp32 sums unchanged). A padded M or N (a copied
    # operand's contiguous axis) pads C too, sliced back to the caller's shape, and the bias and
    # residual with it.
    a = _pad_to(a, repack.stored_shape(problem, "a"))
    b = _pad_to(b, repack.stored_shape(problem, "b"))
    # The epilogue's arrays as the kernels read them: one bias [N] per batch entry, the residual
    # laid out as C (broadcast copies only where vmap batched the operands and not them).
    if bias is not None:
        bias = _pad_to(jnp.broadcast_to(bias, (batch, n))[:, None], (1, problem.n))[:, 0]
    if residual is not None:
        residual = _pad_to(jnp.broadcast_to(residual, (batch, m, out_n)), (problem.m, problem.out_n))
    # Batch stride 0 broadcasts an operand that is not batched.
    strides = (a.shape[1] * a.shape[2] if batch_a > 1 else 0, b.shape[1] * b.shape[2] if batch_b > 1 else 0,
               problem.m * problem.out_n)
    out = _launch_gemm(a, b, problem, config, batch=batch, batch_strides=strides,
                       deterministic=static.deterministic, hw=hw, bias=bias, residual=residual)
    return out if (problem.m, problem.out_n) == (m, out_n) else out[:, :m, :out_n]


def _pad_to(x: jax.Array, shape: tuple[int, int]) -> jax.Array:
    """x [B, r, c] zero-padded at the end of its last two axes to [B, *shape] (x if equal)."""
    rows, cols = x.shape[1:]
    if (rows, cols) == shape:
        return x
    return jnp.pad(x, ((0, 0), (0, shape[0] - rows), (0, shape[1] - cols)))


def _gemm_kernel(config: Config, fused: bool):
    """The GEMM kernel that runs `config`: the TMA or the pointer kernel, with the epilogue's
    arguments where `fused`."""
    if config.tma:
        return matmul_tma_epilogue_kernel if fused else matmul_tma_kernel
    return matmul_epilogue_kernel if fused else matmul_kernel


def _launch_gemm(
    a: jax.Array,
    b: jax.Array,
    problem: Problem,
    config: Config,
    *,
    batch: int = 1,
    batch_strides: tuple[int, int, int] = (0, 0, 0),
    deterministic: bool = True,
    hw: hardware.Hardware | None = None,
    bias: jax.Array | None = None,
    residual: jax.Array | None = None,
) -> jax.Array:
    """The product by `matmul_kernel` (`matmul_tma_kernel` for a `config.tma`, sized for `hw`):
    [M, N] for 2-D operands, [batch, M, N] for 3-D ones.

    One launch, or with `config.k_slices` > 1 (a K split or K phases) two: fp32 partial sums of
    K slices into a [k_slices·batch, M, N] workspace, then `sum_splits_kernel` adds them in a fixed order and casts
    once (deterministic: the same inputs give the same bits run after run). With a split and not
    `deterministic`, the splits add their partials with fp32 atomics into a zeroed fp32
    [batch, M, N] buffer: that is C for an fp32 output (one launch), else `sum_splits_kernel`
    with one split casts it.

    The problem's epilogue (`Problem.bias_dtype`, `activation`, `residual_dtype`; `bias`
    [batch, N] and `residual` [batch, M, N]) runs in the launch that writes C:
    `matmul_epilogue_kernel` (`matmul_tma_epilogue_kernel`) without a split,
    `sum_splits_epilogue_kernel` after one (also after the atomic split of an fp32 output, which
    then is not C yet).
    """
    if batch > launch_specs.MAX_GRID_YZ:
        return _launch_gemm_chunked(a, b, problem, config, batch=batch, batch_strides=batch_strides,
                                    deterministic=deterministic, hw=hw, bias=bias, residual=residual)
    split = config.k_slices
    atomic = split > 1 and not deterministic
    if resources.phase_major_a(problem, config):
        a = phase_major_copy(a, problem, config)
        if batch_strides[0]:
            batch_strides = (a.shape[-2] * a.shape[-1], *batch_strides[1:])
    spec = launch_specs.launch_spec(problem, config, batch=batch, batch_strides=batch_strides, atomic=atomic, hw=hw)
    out_shape = (problem.m, problem.out_n) if a.ndim == 2 else (batch, problem.m, problem.out_n)
    out_dtype = jnp.dtype(problem.out_dtype)
    fp32 = jnp.dtype(jnp.float32)
    epilogue = dict(HAS_BIAS=bias is not None, ACTIVATION=problem.activation, HAS_RESIDUAL=residual is not None)
    # Absent epilogue arrays are passed as A (never read: their loads are compiled out).
    epilogue_args = [a if bias is None else bias, a if residual is None else residual]
    if split == 1:
        product_shape = jax.ShapeDtypeStruct(out_shape, out_dtype)
    elif atomic:
        product_shape = jax.ShapeDtypeStruct(out_shape, fp32)
    else:
        product_shape = jax.ShapeDtypeStruct((split * batch, problem.m, problem.n), fp32)
    fused = split == 1 and problem.has_epilogue
    if problem.casts and config.tma:
        raise ValueError(f"jtblas: the TMA kernel converts no operand ({config.short()} on {problem.short()})")
    # GATED: `matmul_epilogue_kernel`'s only (`launch_specs.launch_spec` refuses a split or TMA gated product).
    metaparams = spec.metaparams
    if fused:
        metaparams = dict(metaparams, **epilogue) if config.tma else dict(metaparams, **epilogue, GATED=problem.gated)
    if problem.casts and launch.target_platform([a, b])[0] == "cpu":
        # Triton's interpreter multiplies bf16 tiles as raw bits (its bf16 operands arrive as
        # fp32, `jtblas.interpreter`): the converted tiles are multiplied as fp32 there.
        metaparams = dict(metaparams, ROUND_ONLY=True)
    product = launch.launch(
        _gemm_kernel(config, fused),
        grid=spec.grid,
        args=[a, b, *(epilogue_args if fused else []), *spec.scalars],
        out_shape=product_shape,
        num_warps=spec.num_warps,
        num_stages=spec.num_stages,
        metaparams=metaparams,
        zeroed_outputs=atomic,
        global_scratch=(GLOBAL_SCRATCH_BYTES, GLOBAL_SCRATCH_ALIGN) if config.tma else None,
    )
    if split == 1 or (atomic and out_dtype == fp32 and not problem.has_epilogue):
        return product
    reduction = launch_specs.sum_splits_spec(problem, config, batch=batch, atomic=atomic, hw=hw)
    if problem.has_epilogue:
        kernel, metaparams = sum_splits_epilogue_kernel, dict(reduction.metaparams, **epilogue)
        args = [product, *epilogue_args, *reduction.scalars, problem.n, problem.m * problem.n]
    else:
        kernel, metaparams, args = sum_splits_kernel, reduction.metaparams, [product, *reduction.scalars]
    return launch.launch(
        kernel,
        grid=reduction.grid,
        args=args,
        out_shape=jax.ShapeDtypeStruct(out_shape, out_dtype),
        num_warps=reduction.num_warps,
        num_stages=reduction.num_stages,
        metaparams=metaparams,
    )


def phase_major_copy(a: jax.Array, problem: Problem, config: Config) -> jax.Array:
    """A [..., M, K] (K-contiguous, its row stride K) copied phase-major for `config.k_phases` = p
    (`resources.phase_major_a`): [..., M, p · columns], phase i's block holding A[..., :, i::p] in
    its first ⌈(K − i) / p⌉ columns and zeros after, columns = `resources.phase_columns`."""
    phases, columns = config.k_phases, resources.phase_columns(problem, config.k_phases, config.block_k)
    lead, (m, k) = a.shape[:-2], a.shape[-2:]
    padded = jnp.pad(a, [(0, 0)] * len(lead) + [(0, 0), (0, columns * phases - k)])
    blocks = jnp.swapaxes(padded.reshape(*lead, m, columns, phases), -1, -2)  # [..., M, p, columns]
    return blocks.reshape(*lead, m, phases * columns)


def _launch_gemm_chunked(
    a: jax.Array, b: jax.Array, problem: Problem, config: Config, *, batch: int,
    batch_strides: tuple[int, int, int], deterministic: bool, hw: hardware.Hardware | None,
    bias: jax.Array | None = None, residual: jax.Array | None = None,
) -> jax.Array:
    """`_launch_gemm` over a batch larger than the grid's batch axis holds (`launch_specs.MAX_GRID_YZ`):
    one launch per chunk of at most MAX_GRID_YZ entries, the results concatenated. The chunks' slices
    and the concatenation copy their operands and C once more; batches this large are products of
    small matrices, whose launches are few (2 at B = 70000)."""
    chunks = []
    for start in range(0, batch, launch_specs.MAX_GRID_YZ):
        size = min(launch_specs.MAX_GRID_YZ, batch - start)
        part_a = a[start:start + size] if batch_strides[0] else a
        part_b = b[start:start + size] if batch_strides[1] else b
        part = dataclasses.replace(problem, batch=size)
        part_bias, part_residual = (None if x is None else x[start:start + size] for x in (bias, residual))
        chunks.append(_launch_gemm(part_a, part_b, part, config, batch=size, batch_strides=batch_strides,
                                   deterministic=deterministic, hw=hw, bias=part_bias, residual=part_residual))
    return jnp.concatenate(chunks, axis=0)


