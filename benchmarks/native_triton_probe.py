"""Whole model steps with our kernels launched through XLA's own Triton custom call instead of
jax-triton's: does a step dispatched from Python stop paying host time per Triton call?

    python benchmarks/native_triton_probe.py --launch jax-triton -- --models gpt2-small \
        --param-dtypes bfloat16 --steps decode generate --rounds 2
    python benchmarks/native_triton_probe.py --launch native -- --models gpt2-small \
        --param-dtypes bfloat16 --steps decode generate --rounds 2

    python benchmarks/native_triton_probe.py --chain 768 48 1

`--chain WIDTH LAYERS TOKENS` times one jitted step of LAYERS products [TOKENS, WIDTH] x [WIDTH,
WIDTH], its input donated and its output fed back (a decode step's buffers move every call),
dispatched from Python call after call: XLA's dot, jtblas through jax-triton and jtblas native,
in one process, rounds in turn: per step, the slope of R and 2R dispatched calls; per product,
the step's time beyond XLA's over LAYERS.

The arguments after `--` go to `python -m jtblas.bench.model_steps` (Flax beside jtblas, steps
timed by slope). `--launch jax-triton` runs it as it is. `--launch native` first replaces
`jtblas.jax_triton_adapter.triton_call` in this process: each kernel is compiled by pip Triton
with its scalar arguments (sizes, strides) as compile-time constants, and its Triton IR goes to
XLA as a `__gpu$xla.gpu.triton` custom call (what Pallas lowers to), which XLA compiles with its
own Triton and launches as one of its kernels. Inside XLA's CUDA graphs such a kernel is updated
by its parameters when a run's buffers move; jaxlib's Triton call is captured again instead
(docs/decisions.md, 2026-12-07). Launches that need global scratch (the TMA kernel) or zeroed
outputs (atomic split-K) stay on jax-triton: the custom call passes the kernel exactly its
operands and results.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jtblas import jax_triton_adapter
from jtblas.bench import model_steps

TARGET = "__gpu$xla.gpu.triton"
_POINTER_TYPES = {"bfloat16": "*bf16", "float16": "*fp16", "float32": "*fp32", "int32": "*i32", "uint8": "*u8"}
_native_p = jax.extend.core.Primitive("jtblas_native_triton")
_native_p.multiple_results = True


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating))


def kernel_ir(kernel: Any, *, args: Sequence[Any], out_shapes: Sequence[jax.ShapeDtypeStruct],
              metaparams: Mapping[str, Any], num_warps: int, num_stages: int, compute_capability: int) -> bytes:
    """Triton IR (MLIR bytecode, in the dialect jaxlib bundles) of `kernel` whose runtime
    arguments are `args` then one pointer per `out_shapes`: arrays become 16-byte aligned
    pointers, Python scalars compile-time constants, `metaparams` the constexprs. A whole
    `triton.compile` (Triton caches it on disk) of which only the TTIR is kept: XLA compiles it
    again with its own Triton."""
    import triton
    from jax._src.interpreters import mlir
    from jax._src.lib import triton as jaxlib_triton
    from jax._src.lib.mlir import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    jax_triton_adapter.drop_blank_triton_cache_dir()  # a jax-triton import blanks Triton's cache dir
    names = kernel.arg_names
    runtime = list(args) + list(out_shapes)
    constexprs = {p.name: p.default for p in kernel.params if p.is_constexpr and p.has_default}
    constexprs.update(metaparams)
    signature, attrs = {}, {}
    for i, (name, value) in enumerate(zip(names, runtime)):
        if _is_scalar(value):
            signature[name], constexprs[name] = "constexpr", value
        else:
            signature[name] = _POINTER_TYPES[np.dtype(value.dtype).name]
            attrs[(i,)] = [["tt.divisibility", 16]]
    for name in names[len(runtime):]:
        signature[name] = "constexpr"
    compiled = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs),
                              target=GPUTarget("cuda", compute_capability, 32),
                              options=dict(num_warps=num_warps, num_stages=num_stages, enable_fp_fusion=True))
    context = mlir.make_ir_context()
    jaxlib_triton.dialect.register_dialect(context)
    with context:
        module = ir.Module.parse(compiled.asm["ttir"])
    buffer = io.BytesIO()
    module.operation.write_bytecode(buffer)
    return buffer.getvalue()


@_native_p.def_abstract_eval
def _native_abstract(*arrays, out_shapes, **_):
    return [jax.core.ShapedArray(out.shape, out.dtype) for out in out_shapes]


def _native_lowering(ctx, *arrays, out_shapes, ir_bytes, name, grid, num_warps, num_stages):
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    grid = tuple(grid) + (1,) * (3 - len(grid))
    config = dict(name=ir.StringAttr.get(name), ir=ir.StringAttr.get(ir_bytes),
                  num_stages=mlir.i32_attr(num_stages), num_warps=mlir.i32_attr(num_warps),
                  grid_x=mlir.i32_attr(grid[0]), grid_y=mlir.i32_attr(grid[1]), grid_z=mlir.i32_attr(grid[2]),
                  debug=ir.BoolAttr.get(False))
    result_types = [ir.RankedTensorType.get(aval.shape, mlir.dtype_to_ir_type(aval.dtype)) for aval in ctx.avals_out]
    row_major = [list(range(aval.ndim - 1, -1, -1)) for aval in ctx.avals_in]
    return mlir.custom_call(call_target_name=TARGET, result_types=result_types, operands=list(arrays),
                            backend_config=config, api_version=4, operand_layouts=row_major,
                            result_layouts=[list(range(aval.ndim - 1, -1, -1)) for aval in ctx.avals_out]).results


jax.interpreters.mlir.register_lowering(_native_p, _native_lowering, platform="cuda")

_original_triton_call = jax_triton_adapter.triton_call


def native_triton_call(kernel: Any, *, grid: tuple[int, ...], args: Sequence[Any],
                       out_shapes: Sequence[jax.ShapeDtypeStruct], num_warps: int, num_stages: int,
                       compute_capability: int | None, metaparams: Mapping[str, Any],
                       zeroed_outputs: tuple[int, ...], global_scratch: tuple[int, int] | None) -> Sequence[jax.Array]:
    """`jax_triton_adapter.triton_call`'s contract through XLA's Triton custom call (the module
    doc says which launches stay on jax-triton)."""
    if zeroed_outputs or global_scratch is not None:
        return _original_triton_call(kernel, grid=grid, args=args, out_shapes=out_shapes, num_warps=num_warps,
                                     num_stages=num_stages, compute_capability=compute_capability,
                                     metaparams=metaparams, zeroed_outputs=zeroed_outputs,
                                     global_scratch=global_scratch)
    ir_bytes = kernel_ir(kernel, args=args, out_shapes=out_shapes, metaparams=metaparams, num_warps=num_warps,
                         num_stages=num_stages, compute_capability=compute_capability or 90)
    arrays = [arg for arg in args if not _is_scalar(arg)]
    return _native_p.bind(*arrays, out_shapes=tuple(out_shapes), ir_bytes=ir_bytes, name=kernel.fn.__name__,
                          grid=tuple(grid), num_warps=num_warps, num_stages=num_stages)


def use_native_launches() -> None:
    """Routes this process's jtblas launches through `native_triton_call`."""
    jax_triton_adapter.triton_call = native_triton_call


LAUNCHES = ("xla", "jax-triton", "native")


def chain_lowered(launch: str, width: int, layers: int, tokens: int, dtype: Any = "bfloat16",
                  lowering_platforms: tuple[str, ...] | None = None) -> Any:
    """step(x, weights) -> x, lowered: `layers` products of x [tokens, width] by weights [layers,
    width, width] (XLA's dot, or `jtblas.matmul` through jax-triton or native), x donated."""
    import jax.numpy as jnp

    import jtblas

    def step(x, weights):
        for i in range(layers):
            x = jnp.dot(x, weights[i]) if launch == "xla" else jtblas.matmul(x, weights[i])
        return x

    x = jax.ShapeDtypeStruct((tokens, width), dtype)
    weights = jax.ShapeDtypeStruct((layers, width, width), dtype)

    def lower():
        # jtblas's inner traces are cached by JAX (jax 0.12 reuses them across jits): each
        # variant must trace its own launches.
        jax.clear_caches()
        return jax.jit(step, donate_argnums=0).trace(x, weights).lower(lowering_platforms=lowering_platforms)

    if launch != "native":
        return lower()
    try:  # our launches are traced during lowering: only those go native
        use_native_launches()
        return lower()
    finally:
        jax_triton_adapter.triton_call = _original_triton_call


def chain_step(launch: str, width: int, layers: int, tokens: int) -> Callable:
    """`chain_lowered`, compiled for this machine."""
    return chain_lowered(launch, width, layers, tokens).compile()


def chain_agreement(width: int, layers: int, tokens: int) -> dict[str, float]:
    """Each jtblas launch's chain result against XLA's on one seeded input: the relative norm of
    the difference (bf16 products: ~1e-2 is agreement, ~1 a wrong kernel)."""
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(1), 2)
    weights = jax.random.normal(keys[0], (layers, width, width), jnp.bfloat16) / width ** 0.5
    results = {launch: np.asarray(chain_step(launch, width, layers, tokens)(
        jax.random.normal(keys[1], (tokens, width), jnp.bfloat16), weights), np.float64) for launch in LAUNCHES}
    reference = results.pop("xla")
    return {launch: float(np.linalg.norm(result - reference) / np.linalg.norm(reference))
            for launch, result in results.items()}


def time_chain(width: int, layers: int, tokens: int, *, rounds: int = 3, repeats: int = 200) -> dict[str, float]:
    """Seconds per step of each of `LAUNCHES`'s `chain_step`s, dispatched from Python R and 2R
    times (each call's output the next one's input), rounds in turn; the median slope."""
    import time

    import jax.numpy as jnp

    steps = {launch: chain_step(launch, width, layers, tokens) for launch in LAUNCHES}
    keys = jax.random.split(jax.random.key(0), 2)
    weights = jax.random.normal(keys[0], (layers, width, width), jnp.bfloat16) / width ** 0.5
    samples: dict[str, list[float]] = {launch: [] for launch in LAUNCHES}
    for _ in range(rounds):
        for launch, step in steps.items():
            times = []
            for count in (repeats, 2 * repeats):
                x = jax.random.normal(keys[1], (tokens, width), jnp.bfloat16)
                jax.block_until_ready(step(x, weights))  # one warm call; x is donated
                x = jax.random.normal(keys[1], (tokens, width), jnp.bfloat16)
                start = time.perf_counter()
                for _ in range(count):
                    x = step(x, weights)
                jax.block_until_ready(x)
                times.append(time.perf_counter() - start)
            samples[launch].append((times[1] - times[0]) / repeats)
    return {launch: statistics.median(values) for launch, values in samples.items()}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launch", choices=("native", "jax-triton"), help="model steps with these launches")
    parser.add_argument("--chain", nargs=3, type=int, metavar=("WIDTH", "LAYERS", "TOKENS"),
                        help="time a chain of products dispatched from Python, each launch in turn")
    args = parser.parse_args(own)
    if (args.launch is None) == (args.chain is None):
        parser.error(f"give one of --launch and --chain, got --launch {args.launch} --chain {args.chain}")
    if args.chain:
        width, layers, tokens = args.chain
        for launch, difference in chain_agreement(width, layers, tokens).items():
            print(f"{launch:10s} result against XLA's: relative difference {difference:.1e}")
        seconds = time_chain(width, layers, tokens)
        for launch, value in seconds.items():
            extra = (value - seconds["xla"]) / layers
            print(f"{launch:10s} {value * 1e6:9.1f} µs a step of {layers} products [{tokens}, {width}] x "
                  f"[{width}, {width}]; {extra * 1e6:+.2f} µs a product against XLA's")
        return 0
    if args.launch == "native":
        use_native_launches()
    return model_steps.main(rest)


if __name__ == "__main__":
    sys.exit(main())
