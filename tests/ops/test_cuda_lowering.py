"""jax-triton's real CUDA lowering for compute capability 9.0, on a machine without a GPU.

Triton compiles the kernel to PTX during lowering, so a compile error, an unsupported construct on
sm_90 or a bad meta-parameter fails here, in CI, before any GPU sees it.
"""

import dataclasses

import jax
import jax.numpy as jnp
import pytest

import jtblas
from jtblas import _compat, hardware, model
from jtblas.model import resources
from tests.reference import compile_for_sm90, lower_for_cuda, require_jax_triton, stored_shapes

jax_triton = require_jax_triton()

CONFIGS = [
    jtblas.Config(),  # the default
    jtblas.Config(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=3),
    jtblas.Config(block_m=64, block_n=64, block_k=32, group_m=1, num_warps=4, num_stages=4),
    jtblas.Config(block_m=16, block_n=128, block_k=128, group_m=8, num_warps=4, num_stages=4),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.short())
@pytest.mark.parametrize(
    "dtype,layout", [("bfloat16", "NN"), ("float16", "NT"), ("bfloat16", "TN"), ("float32", "TT")]
)
def test_forced_configs_compile_for_sm90(config, dtype, layout):
    transpose_a, transpose_b = layout[0] == "T", layout[1] == "T"
    m, n, k = 1000, 520, 777  # tails everywhere
    a, b = stored_shapes(m, n, k, layout, dtype)
    def product(x, y):
        return jtblas.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b, config=config)

    problem = jtblas.Problem(m=m, n=n, k=k, dtype=dtype, out_dtype=dtype)
    if resources.fit_errors(config, problem, hardware.H200):  # e.g. fp32 tiles over 227 KB
        with pytest.raises(ValueError, match="shared memory"):
            lower_for_cuda(product, a, b)
    else:
        assert "triton_kernel_call" in lower_for_cuda(product, a, b)


@pytest.mark.parametrize("precision", [None, jax.lax.Precision.HIGHEST])
def test_fp32_precisions_compile(precision):
    a = jax.ShapeDtypeStruct((256, 256), jnp.float32)
    text = lower_for_cuda(lambda x, y: jtblas.matmul(x, y, precision=precision, config=CONFIGS[2]), a, a)
    assert "triton_kernel_call" in text


def test_default_selection_compiles_with_batch_dims():
    a = jax.ShapeDtypeStruct((4, 512, 768), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((768, 3072), jnp.bfloat16)
    assert "triton_kernel_call" in lower_for_cuda(lambda x, y: jtblas.matmul(x, y), a, b)


def test_model_picks_for_every_benchmark_shape_compile_for_sm90():
    """What `jtblas.matmul` runs for each distinct product of the benchmark's shape sets (the
    model's pick on the H200 description: plain, split-K or repacked) compiles for sm_90 and holds
    the Triton call."""
    from jtblas.bench import shapes, through_jax

    with_split = with_repack = 0
    for shape in (group[0] for group in through_jax.unique_products(shapes.load())):
        a, b = stored_shapes(shape.m, shape.n, shape.k, shape.layout, shape.dtype)

        def product(x, y, shape=shape):
            return jtblas.matmul(x, y, transpose_a=shape.transpose_a, transpose_b=shape.transpose_b)

        text = lower_for_cuda(product, a, b)
        calls = text.count("triton_kernel_call")
        assert calls >= 1, shape
        with_split += calls >= 2
        with_repack += "stablehlo.pad" in text
    assert with_split and with_repack  # the sets exercise both paths


def _compiled(config, problem, capability):
    """Our kernel compiled for `capability` as jax-triton calls it: pointers of the problem's
    dtypes, the launch's metaparameters, unit strides constant, integers that are multiples of 16
    specialised as such; C is the fp32 partials' workspace where K is split or phased."""
    from jtblas.kernels.matmul import matmul_kernel
    from jtblas.launch_specs import launch_spec

    spec = launch_spec(problem, config)
    scalar_names = [n for n in matmul_kernel.arg_names if not n.endswith("_ptr") and n not in spec.metaparams]
    scalars = dict(zip(scalar_names, spec.scalars))
    metaparams = {**spec.metaparams, **{n: 1 for n, value in scalars.items() if value == 1}}
    pointer = {"bfloat16": "*bf16", "float16": "*fp16", "float32": "*fp32"}
    pointer_types = {"a_ptr": pointer[problem.a_dtype or problem.dtype],
                     "b_ptr": pointer[problem.b_dtype or problem.dtype],
                     "c_ptr": "*fp32" if config.k_slices > 1 else pointer[problem.out_dtype]}
    return compile_for_sm90(matmul_kernel, metaparams, num_warps=config.num_warps, num_stages=config.num_stages,
                            pointer_types=pointer_types,
                            divisible=tuple(n for n, value in scalars.items() if value > 1 and value % 16 == 0),
                            capability=capability)


def _k_loop_async_waits(config, problem, capability):
    """The `ttg.async_wait` counts in our kernel compiled for `capability`."""
    import re

    ttgir = _compiled(config, problem, capability).asm["ttgir"]
    return {int(n) for n in re.findall(r"ttg\.async_wait[^\n]*\{num = (\d+)", ttgir)}


def _spilled_bytes(config, problem, tmp_path) -> int:
    """Bytes of registers ptxas spills compiling our kernel for sm_90a (Triton's bundled ptxas)."""
    import re
    import subprocess

    from triton.backends.nvidia import compiler

    ptx = tmp_path / "kernel.ptx"
    ptx.write_text(_compiled(config, problem, 90).asm["ptx"])
    report = subprocess.run([compiler.get_ptxas(90).path, "-arch=sm_90a", "-v", str(ptx), "-o",
                             str(tmp_path / "kernel.cubin")], capture_output=True, text=True, check=True)
    return sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", report.stdout + report.stderr))


def test_pointer_kernel_tiles_take_no_more_shared_memory_than_counted():
    """Each pointer-kernel tile shape the model offers for fused layers on the H100 (at its fewest
    stages, where the pipeline leaves the epilogue the least room), compiled for sm_90 with a bias,
    an activation and a residual, takes no more shared memory than `resources.shared_memory_bytes`
    counts: its epilogue reuses the pipeline's buffers, and where converting an fp32 C takes more
    (64x256 and 128x128 tiles on 8 warps: the whole C tile) that is counted. An undercount is a
    launch that fails or a wrong occupancy."""
    from jtblas.config import Problem

    problems = [Problem(m=2048, n=768, k=3072, bias_dtype="float32", residual_dtype="float32", activation="gelu"),
                Problem(m=2048, n=3072, k=768, bias_dtype="bfloat16", activation="gelu", out_dtype="float32")]
    fewest = {}
    for problem in problems:
        for config in model.candidates_for_problem(problem, hardware.H100):
            key = (config.block_m, config.block_n, config.num_warps, config.swap_ab, problem)
            if config.tma or config.k_slices > 1:
                continue
            if key not in fewest or config.num_stages < fewest[key].num_stages:
                fewest[key] = config
    assert len(fewest) > 30
    for (*_, problem), config in fewest.items():
        compiled = _compiled(config, problem, 90)
        assert compiled.metadata.shared <= resources.shared_memory_bytes(config, problem) + 64, config.short()


def test_an_fp32_b_stored_k_by_n_is_copied_one_element_at_a_time_on_wgmma_tiles(tmp_path, monkeypatch):
    """The compiler fact calibrate's narrow-copies contrasts (`measure.NARROW_COPY_CONTRASTS`)
    stand on (sm_90a, no GPU): tf32 wgmma reads its operands K-major from shared memory, so the
    64-row tile copies an fp32 B stored [K, N] with 16-byte-aligned rows 4 bytes per `cp.async.ca`;
    the same tile with B stored [N, K], and a 32-row mma.sync tile with B [K, N], copy B 16 bytes
    per `cp.async.cg` and nothing narrower. (The model takes the width from the rows' alignment,
    16 bytes for all three: docs/model.md, "Four-byte copies of a streamed B".)"""
    import re

    from jtblas.calibrate import measure

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # jax-triton's import blanks it

    def copy_widths(config, transpose_b):
        problem = jtblas.Problem(m=64, n=32004, k=4096, dtype="float32", out_dtype="float32", transpose_b=transpose_b)
        assert resources.plain_load_bytes(problem, "b", config.block_k) == 16
        ptx = _compiled(config, problem, 90).asm["ptx"]
        return {int(width, 16) for width in re.findall(r"cp\.async\.c[ag]\.shared\.global[^,]*,[^,]*,\s*0x(\w+)", ptx)}

    assert copy_widths(measure.NARROW_COPY_CONFIG, False) == {4, 16}  # B element-wise, A 16 bytes
    for transpose_b, config in measure.NARROW_COPY_CONTRASTS:
        assert copy_widths(config, transpose_b) == {16}, config


def test_shifted_copies_over_the_limit_are_where_ptxas_spills(tmp_path, monkeypatch):
    """`resources.MAX_SHIFTED_COPIES_PER_THREAD`, against the compiler (sm_90a, no GPU): the
    1x50257x1280 lm head's 16x256x64 2-warp tile with 2 K phases (4-byte copies, 128 per thread
    per stage) spills its registers; the same tile with 8 phases (16-byte, 32 per thread), the
    model's pick on the H100 and on the H200, within the limit, spill nothing."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # jax-triton's import blanks it
    problem = jtblas.Problem(m=1, n=50257, k=1280, dtype="bfloat16", out_dtype="bfloat16")
    over = jtblas.Config(block_m=16, block_n=256, block_k=64, num_warps=2, num_stages=3, group_m=1, k_phases=2)
    assert resources.shifted_copies_per_thread(over, problem) > resources.MAX_SHIFTED_COPIES_PER_THREAD
    assert _spilled_bytes(over, problem, tmp_path) > 0
    within = [dataclasses.replace(over, k_phases=8)]
    within += [jtblas.select(1, 50257, 1280, dtype="bfloat16", hardware=gpu) for gpu in ("h100", "h200")]
    for config in within:
        assert config.k_phases > 1
        assert resources.shifted_copies_per_thread(config, problem) <= resources.MAX_SHIFTED_COPIES_PER_THREAD
        assert _spilled_bytes(config, problem, tmp_path) == 0, config


def test_narrow_copies_over_the_limit_are_where_ptxas_spills(tmp_path, monkeypatch):
    """The same limit without K phases (`resources.narrow_copies_per_thread`), against the
    compiler (sm_90a, no GPU): 6x4858x12954 (rows 4-byte aligned) on a 16x128x128 2-warp tile split
    6 ways issues 144 four-byte copies per thread per stage and spills (it ran 6.4x its predicted
    time on an H100, 2026-12-07); an fp32 lm head's 16x128x32 2-warp tile at the limit (64) spills
    a few bytes at most, and the model's picks on the H100 and the H200 nothing."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # jax-triton's import blanks it
    problem = jtblas.Problem(m=6, n=4858, k=12954, dtype="bfloat16", out_dtype="bfloat16")
    over = jtblas.Config(block_m=16, block_n=128, block_k=128, num_warps=2, num_stages=3, group_m=1, split_k=6)
    assert resources.narrow_copies_per_thread(problem, 16, 128, 128, 2) > resources.MAX_NARROW_COPIES_PER_THREAD
    assert _spilled_bytes(over, problem, tmp_path) > 0
    fp32_head = jtblas.Problem(m=1, n=50257, k=1024, dtype="float32", out_dtype="float32")
    at_limit = jtblas.Config(block_m=16, block_n=128, block_k=32, num_warps=2, num_stages=3, group_m=1)
    assert resources.narrow_copies_per_thread(fp32_head, 16, 128, 32, 2) == resources.MAX_NARROW_COPIES_PER_THREAD
    # At the limit a few bytes at most (none with Triton 3.6, 8 with 3.9); above it hundreds.
    assert _spilled_bytes(at_limit, fp32_head, tmp_path) < 64
    for gpu in ("h100", "h200"):
        config = jtblas.select(6, 4858, 12954, dtype="bfloat16", hardware=gpu)
        assert _spilled_bytes(config, problem, tmp_path) == 0, config


def test_transposed_copies_over_the_limit_are_where_ptxas_spills(tmp_path, monkeypatch):
    """`resources.MAX_TRANSPOSED_COPIES_PER_THREAD`, against the compiler (sm_90a, no GPU): tf32
    wgmma tiles copying an fp32 operand stored M- or N-major one element at a time spill their
    addresses at 64 copies per thread per stage (NN 64x256x32 w4, TN 128x128x32 w4: until the
    limit the model picked both) and not at 48 (TN 64x128x32 w4, 256x128x32 w8) or 32 (NN
    128x128x32 w4); the model's tf32 picks on the H100 at NN, TN and TT spill nothing."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # jax-triton's import blanks it
    fp32 = dict(m=4096, n=4096, k=4096, dtype="float32", out_dtype="float32")
    nn, tn = jtblas.Problem(**fp32), jtblas.Problem(**fp32, transpose_a=True)
    tiles = {(nn, 64, 256, 4): True, (tn, 128, 128, 4): True,
             (tn, 64, 128, 4): False, (tn, 256, 128, 8): False, (nn, 128, 128, 4): False}
    for (problem, block_m, block_n, num_warps), spills in tiles.items():
        config = jtblas.Config(block_m=block_m, block_n=block_n, block_k=32, num_warps=num_warps, num_stages=4)
        copies = resources.transposed_copies_per_thread(problem, block_m, block_n, 32, num_warps)
        assert (copies > resources.MAX_TRANSPOSED_COPIES_PER_THREAD) == spills, config
        assert (_spilled_bytes(config, problem, tmp_path) > 0) == spills, config
    for transpose_a, transpose_b in ((False, False), (True, False), (True, True)):
        problem = jtblas.Problem(m=2048, n=3072, k=768, dtype="float32", out_dtype="float32",
                                 transpose_a=transpose_a, transpose_b=transpose_b)
        plan = model.plan_for_problem(problem, hardware.H100)  # its kernel problem: maybe copied transposed
        assert _spilled_bytes(plan.config, plan.kernel_problem, tmp_path) == 0, plan.config


def test_fma_tiles_over_the_limit_are_where_ptxas_spills(tmp_path, monkeypatch):
    """`resources.fma_tile_spills`, against the compiler (sm_90a, no GPU): fp32 "ieee" tiles of 128
    accumulators per thread (128x128x32 w4, which the model picked for corpus products in fp32
    "ieee" on the H100 and the H200), or of 64 at block_k 128, or of 16 at block_k 256 over a K
    tail, spill hundreds of bytes; 64 at block_k 32 and 32 at block_k 64 a few words at most
    (Triton 3.6 none, 3.9 12 bytes for 64x128x32 w4); misaligned rows' narrow copies past the FMA
    tile's limit make a 64x128x64 one spill; the model's FMA picks on the H100 spill nothing."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # jax-triton's import blanks it
    ieee = jtblas.Problem(m=4096, n=4096, k=4096, dtype="float32", out_dtype="float32", input_precision="ieee")
    k_tail = dataclasses.replace(ieee, m=768, n=2304, k=6304, transpose_a=True)
    tiles = {(ieee, 128, 128, 32, 4): True, (ieee, 64, 128, 128, 4): True, (k_tail, 64, 32, 256, 4): True,
             (ieee, 64, 128, 32, 4): False, (ieee, 128, 128, 32, 8): False, (ieee, 64, 128, 64, 8): False}
    for (problem, block_m, block_n, block_k, num_warps), spills in tiles.items():
        config = jtblas.Config(block_m=block_m, block_n=block_n, block_k=block_k, num_warps=num_warps, num_stages=2)
        assert bool(resources.fma_tile_spills(block_m, block_n, block_k, num_warps)) == spills, config
        assert (_spilled_bytes(config, problem, tmp_path) > 64) == spills, config
    # Misaligned rows (B's 4-byte aligned): 64 narrow copies per thread per stage on the 64x128x64
    # tile, over the FMA tile's limit, spill where the tile alone did not.
    misaligned = dataclasses.replace(ieee, n=4001)
    config = jtblas.Config(block_m=64, block_n=128, block_k=64, num_warps=4, num_stages=2)
    assert resources.narrow_copies_per_thread(misaligned, 64, 128, 64, 4) > resources.max_narrow_copies_per_thread(
        misaligned)
    assert _spilled_bytes(config, misaligned, tmp_path) > 0
    for m, n, k in ((2048, 2048, 2048), (8192, 1024, 4096)):
        config = jtblas.select(m, n, k, dtype="float32", precision=jax.lax.Precision.HIGHEST, hardware="h100")
        problem = dataclasses.replace(ieee, m=m, n=n, k=k)
        assert resources.uses_fma(problem) and _spilled_bytes(config, problem, tmp_path) == 0, config


def test_model_fp32_picks_for_the_corpus_hold_their_registers(tmp_path, monkeypatch):
    """Every distinct pointer-kernel compile of the model's H100 picks for the benchmark corpus's
    products in fp32 (tf32 and "ieee"), through ptxas for sm_90a: the tf32 ones four words at most
    (an mma.sync tile, 32x64x64 on 4 warps, spills 4-12 bytes with Triton 3.6, 16 with 3.9), the
    FMA ones at most 64 bytes, where misaligned rows' copies meet the register limits
    (`resources.MAX_TRANSPOSED_COPIES_PER_THREAD`, `resources.fma_tile_spills`,
    `resources.MAX_FMA_NARROW_COPIES_PER_THREAD`: before them, 59 tf32 and 258 "ieee" plans of the
    H100 and the H200 spilled up to 3,476 bytes)."""
    from jtblas.bench import shapes
    from jtblas.kernels.matmul import matmul_kernel
    from jtblas.launch_specs import launch_spec

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # jax-triton's import blanks it
    compiles = {}
    for shape in shapes.load():
        for precision in ("tf32", "ieee"):
            problem = dataclasses.replace(shape.problem(), dtype="float32", out_dtype="float32",
                                          input_precision=precision)
            plan = model.plan_for_problem(problem, hardware.H100)
            config, kernel_problem = plan.config, plan.kernel_problem
            if config.tma:
                continue
            spec = launch_spec(kernel_problem, config, hw=hardware.H100)
            names = [n for n in matmul_kernel.arg_names if not n.endswith("_ptr") and n not in spec.metaparams]
            scalars = tuple((n, v == 1, v > 1 and v % 16 == 0) for n, v in zip(names, spec.scalars))
            key = (tuple(sorted(spec.metaparams.items())), config.num_warps, config.num_stages, scalars,
                   config.k_slices > 1)
            compiles.setdefault(key, (config, kernel_problem))
    assert len(compiles) > 100
    for config, problem in compiles.values():
        spilled = _spilled_bytes(config, problem, tmp_path)
        assert spilled <= (64 if resources.uses_fma(problem) else 16), (config.short(), problem.short(), spilled)


@pytest.mark.parametrize("transpose_a", [False, True], ids=["NN", "TN"])
def test_a_row_stride_padded_past_n_loads_b_16_bytes_at_a_time(transpose_a, tmp_path, monkeypatch):
    """The dw of an lm head over 50257 words at 128 tokens, compiled for sm_90a (no GPU): B as
    stored (rows 2-byte aligned) is loaded without async copies; B copied at the padded row stride
    50304, N kept 50257 (`repack.padded_problem(pad_c=False)`), is loaded by 16-byte async copies
    only, its offsets wrapping at the row stride (PADDED_N); the model prices both that way."""
    import re

    from jtblas.model import cost, repack

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # jax-triton's import blanks it
    stored = jtblas.Problem(m=1280, n=50257, k=128, dtype="bfloat16", out_dtype="bfloat16", transpose_a=transpose_a)
    padded = repack.padded_problem(stored, pad_a=False, pad_b=True, pad_k=False, pad_c=False)
    assert (padded.n, padded.ldb) == (50257, 50304)
    config = jtblas.Config(block_m=64, block_n=256, block_k=32, num_warps=4, num_stages=5)
    constants = hardware.H100.model_constants()
    copies = []
    for problem in (stored, padded):
        ptx = _compiled(config, problem, 90).asm["ptx"]
        copy = r"cp\.async\.c[ag]\.shared\.global(?:\.L2::\w+)? \[[^]]*\], \[[^]]*\], (0x[0-9a-f]+|\d+)"
        sizes = re.findall(copy, ptx)
        copies.append([int(size, 0) for size in sizes])
    assert cost.vector_bytes(stored, config, "b", constants) == 2
    assert cost.vector_bytes(padded, config, "b", constants) == 16
    assert set(copies[0]) <= {16} and set(copies[1]) == {16}  # A only, then A and B
    assert len(copies[1]) > len(copies[0])


@pytest.mark.parametrize("block_m,num_warps,num_stages,capability", [
    (16, 4, 4, 90),   # mma.sync on Hopper (a decode tile)
    (128, 8, 5, 90),  # wgmma
    (64, 4, 3, 80),   # Ampere
])
def test_pipeline_keeps_stages_minus_two_loads_in_flight(block_m, num_warps, num_stages, capability,
                                                         tmp_path, monkeypatch):
    """The model's `loads_in_flight` (num_stages − 2) is what the compiler builds: the K loop
    waits for a stage's two async copies (A and B) with 2·(num_stages − 2) copies still pending.
    If a Triton upgrade changes this, the model's latency term must change with it."""
    from jtblas.model import cost

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # jax-triton's import blanks it
    config = jtblas.Config(block_m=block_m, block_n=64, block_k=64, group_m=1, num_warps=num_warps,
                           num_stages=num_stages)
    problem = jtblas.Problem(m=4096, n=4096, k=4096, dtype="bfloat16", out_dtype="bfloat16")
    waits = _k_loop_async_waits(config, problem, capability)
    hw = hardware.H200 if capability == 90 else hardware.A100
    assert waits - {0} == {2 * cost.loads_in_flight(config, problem, hw)}, waits


def test_kernel_calls_lower_to_the_command_buffer_compatible_ffi_target():
    """Where jaxlib registers `triton_kernel_call_ffi`, kernel calls lower to it (typed FFI, the
    compressed call in its "opaque" attribute), which XLA records into CUDA graphs; jax-triton
    0.3.1's own target, the legacy "triton_kernel_call", is left out of them. A kernel with
    global scratch (the TMA kernel) gets it as one more output, grid x 384 bytes, with jax-triton
    0.3.1; jax-triton 0.4.x gets no TMA kernel."""
    from jtblas import jax_triton_adapter

    if not jax_triton_adapter._ffi_target_registered():
        pytest.skip("this jaxlib registers no typed-FFI Triton kernel call")
    config = jtblas.Config(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=3, split_k=4)
    a = jax.ShapeDtypeStruct((256, 4096), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((4096, 64), jnp.bfloat16)
    text = lower_for_cuda(lambda x, y: jtblas.matmul(x, y, config=config), a, b)
    calls = [line for line in text.splitlines() if "stablehlo.custom_call" in line]
    assert len(calls) == 2  # the split product and its reduction
    # Typed FFI (API version 4): the attributes are a dictionary, the compressed call in "opaque".
    assert all("@triton_kernel_call_ffi(" in call and 'mhlo.backend_config = {opaque = "' in call for call in calls)

    tma = jtblas.Config(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3, tma=True)
    b_nk = jax.ShapeDtypeStruct((512, 4096), jnp.bfloat16)
    if _compat.stack().jax_triton_lowers_to_ffi:  # jax-triton 0.4.x: no scratch buffer, so no TMA kernel
        from jtblas.kernels.matmul_tma import matmul_tma_kernel

        with pytest.raises(ValueError, match="no TMA kernel"):
            lower_for_cuda(lambda x, y: jtblas.matmul(x, y, transpose_b=True, config=tma), a, b_nk)
        with pytest.raises(RuntimeError, match=r"global scratch.*jax-triton 0\.4"):
            jax_triton_adapter._register_global_scratch(matmul_tma_kernel, (384, 128))
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jax_triton_adapter, "_jaxlib_kernel_takes_scratch", lambda: True)  # a jaxlib >= 0.11
        text = lower_for_cuda(lambda x, y: jtblas.matmul(x, y, transpose_b=True, config=tma), a, b_nk)
    calls = [line for line in text.splitlines() if "stablehlo.custom_call" in line]
    programs = min(2 * 4, hardware.H200.sm_count)  # 256 x 512 in 128 x 128 tiles, persistent grid
    assert len(calls) == 1 and "@triton_kernel_call_ffi(" in calls[0]
    assert calls[0].endswith(f"-> (tensor<1x256x512xbf16>, tensor<{programs * 384}xui8>)"), calls[0]


def test_64_bit_offsets_compile_for_sm90():
    """A transposed A of 64 x 2^25 bf16 (2^31 elements, 4 GiB; nothing is allocated): the launch
    indexes in int64 (INDEX_64, strides cast in the kernel) and the kernel compiles."""
    a = jax.ShapeDtypeStruct((64, 2**25), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((64, 64), jnp.bfloat16)
    text = lower_for_cuda(lambda x, y: jtblas.matmul(x, y, transpose_a=True), a, b)
    assert "triton_kernel_call" in text


def test_a_batch_past_65535_lowers_to_chunked_launches():
    a = jax.ShapeDtypeStruct((70000, 16, 32), jnp.bfloat16)
    b = jax.ShapeDtypeStruct((70000, 32, 16), jnp.bfloat16)
    text = lower_for_cuda(jax.vmap(jtblas.matmul), a, b)
    assert text.count("triton_kernel_call") == 2


@pytest.mark.parametrize("vmapped", [False, True], ids=["2d", "vmap"])
def test_a_product_traced_for_the_interpreter_first_still_lowers_to_a_kernel_call(vmapped):
    """JAX caches traces of custom_vjp and custom_vmap functions by their static arguments; the
    launch's backend is part of them, so a trace for the CPU interpreter (a host callback) is not
    reused when the same product is lowered for CUDA."""
    shapes = [jax.ShapeDtypeStruct((3, 48, 40) if vmapped else (48, 40), jnp.bfloat16),
              jax.ShapeDtypeStruct((3, 40, 24) if vmapped else (40, 24), jnp.bfloat16)]
    product = jax.vmap(jtblas.matmul) if vmapped else jtblas.matmul
    assert "pure_callback" in str(jax.make_jaxpr(product)(*shapes))
    text = lower_for_cuda(product, *shapes)
    assert "triton_kernel_call" in text and "callback" not in text
