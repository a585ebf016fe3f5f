"""benchmarks/native_triton_probe.py lowers what it says, on any machine: jtblas's CUDA launches
become XLA's own Triton custom call carrying our kernel's Triton IR (parsed into the dialect
jaxlib bundles), with the launch's grid, warps and stages and only array operands (the sizes and
strides compiled in); launches that need global scratch stay on jax-triton."""

import jax
import jax.numpy as jnp
import pytest

import jtblas
from jtblas import jax_triton_adapter, launch_specs
from jtblas.config import Config, Problem
from jtblas.kernels.matmul import matmul_kernel
from tests.reference import load_script, lower_for_cuda, require_jax_triton

CONFIG = Config.from_short("64x64x32 w4 s3 g8")


@pytest.fixture(scope="module")
def probe():
    return load_script("benchmarks/native_triton_probe.py")


def test_the_kernel_ir_takes_only_its_pointers(probe):
    from jax._src.interpreters import mlir
    from jax._src.lib import triton as jaxlib_triton
    from jax._src.lib.mlir import ir

    problem = Problem(m=100, n=80, k=96)
    spec = launch_specs.launch_spec(problem, CONFIG)
    a, b, c = (jax.ShapeDtypeStruct(shape, jnp.bfloat16) for shape in ((100, 96), (96, 80), (100, 80)))
    ir_bytes = probe.kernel_ir(matmul_kernel, args=[a, b, *spec.scalars], out_shapes=[c],
                               metaparams=spec.metaparams, num_warps=4, num_stages=3, compute_capability=90)
    context = mlir.make_ir_context()
    jaxlib_triton.dialect.register_dialect(context)
    with context:
        text = str(ir.Module.parse(ir_bytes))
    header = next(line for line in text.splitlines() if "tt.func public @matmul_kernel" in line)
    assert header.count("%arg") == 3 and header.count("!tt.ptr<bf16>") == 3, header


def test_matmul_lowers_to_xla_triton_calls(probe, monkeypatch):
    monkeypatch.setattr(jax_triton_adapter, "triton_call", probe.native_triton_call)
    jax.clear_caches()  # no trace of these products through jax-triton is reused (jax 0.12 would)
    a = jax.ShapeDtypeStruct((100, 96), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((96, 80), jnp.bfloat16)
    text = lower_for_cuda(lambda a, b: jtblas.matmul(a, b, config=CONFIG), a, b)
    assert text.count(probe.TARGET) == 1 and "triton_kernel_call" not in text
    grid = launch_specs.launch_spec(Problem(m=100, n=80, k=96), CONFIG).grid
    assert f"grid_x = {grid[0]} : i32" in text and "num_warps = 4 : i32" in text and "num_stages = 3 : i32" in text
    # A fused epilogue: its bias is one more operand, before C.
    bias = jax.ShapeDtypeStruct((80,), jnp.float32)
    text = lower_for_cuda(lambda a, b, bias: jtblas.matmul(a, b, bias=bias, activation="gelu", config=CONFIG),
                          a, b, bias)
    assert text.count(probe.TARGET) == 1 and "triton_kernel_call" not in text
    # A split product: the partials' kernel and the sum, two custom calls.
    split = Config.from_short("64x64x32 w4 s3 g8 k2")
    text = lower_for_cuda(lambda a, b: jtblas.matmul(a, b, config=split), a, b)
    assert text.count(probe.TARGET) == 2 and "triton_kernel_call" not in text


def test_global_scratch_stays_on_jax_triton(probe, monkeypatch):
    calls = []
    monkeypatch.setattr(probe, "_original_triton_call", lambda kernel, **kwargs: calls.append(kwargs) or ["out"])
    out = probe.native_triton_call(matmul_kernel, grid=(1,), args=[], out_shapes=[], num_warps=4, num_stages=3,
                                   compute_capability=90, metaparams={}, zeroed_outputs=(),
                                   global_scratch=(128, 64))
    assert out == ["out"] and calls[0]["global_scratch"] == (128, 64)


def test_the_native_chain_lowers_to_xla_triton_calls_after_a_jax_triton_one(probe):
    """Each variant traces its own launches: the native chain lowered after the jax-triton one
    (same function, shapes and configs) carries XLA's Triton call for every product, not a
    trace the first left behind."""
    from jtblas import launch

    require_jax_triton()
    with launch.forced_backend("cuda", compute_capability=90):
        texts = {name: probe.chain_lowered(name, 64, 3, 1, lowering_platforms=("cuda",)).as_text()
                 for name in ("jax-triton", "native")}
    assert texts["native"].count(probe.TARGET) == 3 and "triton_kernel_call" not in texts["native"]
    assert probe.TARGET not in texts["jax-triton"] and "triton_kernel_call" in texts["jax-triton"]


def test_the_chain_runs_each_launch(probe):
    """`--chain`'s three steps compute the same chain (on the CPU every launch runs Triton's
    interpreter, so this checks the plumbing, not the custom call) and are timed in turn."""
    import numpy as np

    x = jax.random.normal(jax.random.key(1), (1, 32), jnp.bfloat16)
    weights = jax.random.normal(jax.random.key(2), (2, 32, 32), jnp.bfloat16) / 32 ** 0.5
    results = {launch: np.asarray(probe.chain_step(launch, 32, 2, 1)(x.copy(), weights), np.float32)
               for launch in probe.LAUNCHES}
    for launch in ("jax-triton", "native"):
        assert np.linalg.norm(results[launch] - results["xla"]) <= 2e-2 * np.linalg.norm(results["xla"])
    agreement = probe.chain_agreement(32, 2, 1)
    assert list(agreement) == ["jax-triton", "native"] and max(agreement.values()) < 2e-2
    seconds = probe.time_chain(32, 2, 1, rounds=1, repeats=2)
    assert list(seconds) == list(probe.LAUNCHES) and all(np.isfinite(list(seconds.values())))


@pytest.mark.parametrize("argv", [[], ["--launch", "native", "--chain", "768", "48", "1"]])
def test_one_mode_is_asked_for(probe, argv, capsys):
    with pytest.raises(SystemExit) as raised:
        probe.main(argv)
    assert raised.value.code == 2
    assert "give one of --launch and --chain" in capsys.readouterr().err
