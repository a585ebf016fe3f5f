"""The CUDA backend's adapter to jax-triton (`jtblas.jax_triton_adapter`), on any machine: what it
wraps in jax-triton 0.3.1 (jaxlib's kernel library, the kernel compiler, the FFI lowering) against
fakes, and what it keeps of Triton's on-disk cache. Real CUDA lowerings: tests/ops/test_cuda_lowering.py."""

import os
import sys

import jax.numpy as jnp
import pytest
import triton
import triton.language as tl

from jtblas import hardware, jax_triton_adapter, launch_specs
from jtblas.config import Config, Problem
from jtblas.kernels.matmul import matmul_kernel
from jtblas.kernels.matmul_tma import matmul_tma_kernel
from tests.reference import compile_for_sm90, require_jax_triton, use_jax_triton_031


def test_importing_jax_triton_leaves_tritons_cache_alone(monkeypatch):
    """jax-triton 0.3.1 blanks TRITON_CACHE_DIR at import; the adapter restores it."""
    require_jax_triton()
    monkeypatch.delitem(sys.modules, "jax_triton")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/tmp/jtblas-test-cache")
    jax_triton_adapter._jax_triton.cache_clear()
    jax_triton_adapter._jax_triton()
    assert os.environ["TRITON_CACHE_DIR"] == "/tmp/jtblas-test-cache"


def test_blank_triton_cache_dir_is_dropped(monkeypatch):
    """A jax-triton import leaves TRITON_CACHE_DIR="" to child processes; `jtblas calibrate` and
    `jtblas bench` drop it before launching Triton kernels (on the H200 every microbenchmark of
    the calibration test failed with "Could not create or locate cache dir" without this)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", "")
    jax_triton_adapter.drop_blank_triton_cache_dir()
    assert "TRITON_CACHE_DIR" not in os.environ
    monkeypatch.setenv("TRITON_CACHE_DIR", "/tmp/somewhere")
    jax_triton_adapter.drop_blank_triton_cache_dir()
    assert os.environ["TRITON_CACHE_DIR"] == "/tmp/somewhere"


def test_a_jaxlib_without_the_cuda_plugin_takes_no_scratch(monkeypatch):
    """Without the jax CUDA plugin jaxlib's gpu_triton module holds no TritonKernel: no global
    scratch then (an AttributeError here failed a lowering test in a plain `pip install`), and with
    a TritonKernel whose constructor names `global_scratch_size`, scratch."""
    import types

    from jax._src import lib

    class Kernel:
        def __init__(self):
            """TritonKernel(..., global_scratch_size: int)"""

    for module, expected in ((types.SimpleNamespace(), False), (types.SimpleNamespace(TritonKernel=Kernel), True)):
        monkeypatch.setattr(lib, "gpu_triton", module, raising=False)
        jax_triton_adapter._jaxlib_kernel_takes_scratch.cache_clear()
        assert jax_triton_adapter._jaxlib_kernel_takes_scratch() is expected
    jax_triton_adapter._jaxlib_kernel_takes_scratch.cache_clear()


def test_scratch_wrapper_passes_the_size_of_registered_kernels_only(monkeypatch):
    calls = []

    class FakeLibrary:
        marker = "kept"

        def TritonKernel(self, *args, **kwargs):  # noqa: N802
            calls.append((args, kwargs))
            return "kernel"

    use_jax_triton_031(monkeypatch)
    monkeypatch.setattr(jax_triton_adapter, "_jaxlib_kernel_takes_scratch", lambda: True)
    monkeypatch.setattr(jax_triton_adapter, "_GLOBAL_SCRATCH", {})
    wrapped = jax_triton_adapter._ScratchAwareKernelLibrary(FakeLibrary())
    assert wrapped.marker == "kept"
    wrapped.TritonKernel("matmul_kernel", 8, 1, 0, "ptx", "ttir", 90)
    jax_triton_adapter._register_global_scratch(matmul_tma_kernel, (384, 128))
    wrapped.TritonKernel("matmul_tma_kernel", 8, 1, 0, "ptx", "ttir", 90)
    assert calls[0] == (("matmul_kernel", 8, 1, 0, "ptx", "ttir", 90), {})
    assert calls[1] == (("matmul_tma_kernel", 8, 1, 0, "ptx", "ttir", 90),
                        dict(global_scratch_size=384, global_scratch_align=128))


def test_kernels_launch_with_the_block_their_ptx_requires(monkeypatch):
    """A warp-specialized loop compiled for sm_90 with 4 warps requires 12 (its partitions' warps
    added): jaxlib's kernel gets the PTX's `.reqntid` / 32, not the num_warps compiled with."""
    calls = []

    class FakeLibrary:
        def TritonKernel(self, *args, **kwargs):  # noqa: N802
            calls.append(args)

    ws_ptx = compile_for_sm90(_warp_specialized_product, dict(BLOCK=64), num_warps=4, num_stages=3).asm["ptx"]
    plain_ptx = compile_for_sm90(matmul_kernel, _plain_metaparams(), num_warps=8, num_stages=3).asm["ptx"]
    assert jax_triton_adapter.launched_warps(ws_ptx, 4) > 4
    assert jax_triton_adapter.launched_warps(plain_ptx, 8) == 8
    assert jax_triton_adapter.launched_warps("no block size", 2) == 2
    use_jax_triton_031(monkeypatch)
    monkeypatch.setattr(jax_triton_adapter, "_GLOBAL_SCRATCH", {})
    wrapped = jax_triton_adapter._ScratchAwareKernelLibrary(FakeLibrary())
    wrapped.TritonKernel("copy", 4, 1, 0, ws_ptx, "ttir", 90)
    assert calls[0][1] == jax_triton_adapter.launched_warps(ws_ptx, 4)
    assert calls[0][4] == ws_ptx


@triton.jit
def _warp_specialized_product(a_ptr, b_ptr, c_ptr, n, k, BLOCK: tl.constexpr):
    """C [n, BLOCK] = A [n, k] · B [k, BLOCK], BLOCK rows per tile, the tile loop warp-specialized
    (as Triton's persistent-matmul tutorial: descriptor loads feeding a dot in a K loop)."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[n, k], strides=[k, 1], block_shape=[BLOCK, BLOCK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[k, BLOCK], strides=[BLOCK, 1], block_shape=[BLOCK, BLOCK])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[n, BLOCK], strides=[BLOCK, 1], block_shape=[BLOCK, BLOCK])
    for row in tl.range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK, warp_specialize=True):
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        for kb in range(tl.cdiv(k, BLOCK)):
            acc = tl.dot(a_desc.load([row, kb * BLOCK]), b_desc.load([kb * BLOCK, 0]), acc)
        c_desc.store([row, 0], acc.to(c_desc.dtype))


def _plain_metaparams() -> dict:
    return launch_specs.launch_spec(Problem(m=256, n=256, k=256), Config.from_short("128x128x64 w8 s3 g8"),
                                    hw=hardware.H200).metaparams


def test_scratch_output_is_compiled_without_and_aligned_as_the_scratch(monkeypatch):
    """On the typed-FFI call the TMA kernel's scratch is its last output (`jax_triton_adapter._scratch_output`):
    the kernel is compiled without that argument, and the call checks the buffer's alignment."""
    seen = []

    def get_or_create(backend_init_func, platform, fn, arg_dtypes, scalar_args, **options):
        seen.append(list(arg_dtypes))
        return object(), {(0,): [["tt.divisibility", 16]]}

    monkeypatch.setattr(jax_triton_adapter, "_SCRATCH_OUTPUT_ALIGN", {})
    monkeypatch.setattr(jax_triton_adapter, "_SCRATCH_OUTPUT_KERNELS", {})
    wrapped = jax_triton_adapter._jtblas_kernels(get_or_create)
    runtime = len(matmul_tma_kernel.arg_names) - len(matmul_tma_kernel.constexprs)
    options = dict(num_warps=4, num_stages=3, num_ctas=1, compute_capability=90, enable_fp_fusion=True,
                   metaparams={}, dump=False)
    dtypes = ["*bf16"] * (runtime + 1)
    kernel, attrs = wrapped(None, "cuda", matmul_tma_kernel, dtypes, [], **options)
    assert seen[-1] == dtypes and (runtime,) not in attrs  # not registered: as jax-triton has it
    spec = jax_triton_adapter._scratch_output(matmul_tma_kernel, (132, 2), (384, 128))
    assert spec.shape == (132 * 2 * 384,) and spec.dtype == jnp.uint8
    kernel, attrs = wrapped(None, "cuda", matmul_tma_kernel, dtypes, [], **options)
    assert seen[-1] == dtypes[:-1] and attrs[(runtime,)] == [] and attrs[(0,)] == [["tt.divisibility", 16]]
    assert jax_triton_adapter._SCRATCH_OUTPUT_KERNELS == {id(kernel): 128}

    class FakeLibrary:
        def create_array_parameter(self, bytes_to_zero, divisibility):
            return ("array", bytes_to_zero, divisibility)

        def TritonKernelCall(self, *args):  # noqa: N802
            return args

    library = jax_triton_adapter._ScratchAwareKernelLibrary(FakeLibrary())
    params = [("array", 0, 16), ("scalar", 7), ("array", 0, 16)]
    assert library.TritonKernelCall(kernel, 264, 1, 1, params) == (
        kernel, 264, 1, 1, [("array", 0, 16), ("scalar", 7), ("array", 0, 128)])
    other = object()
    assert library.TritonKernelCall(other, 8, 1, 1, params) == (other, 8, 1, 1, params)


def test_ffi_lowering_gives_the_ffi_target_its_calling_convention():
    made = []

    class FakeFfi:
        other = "kept"

        def ffi_lowering(self, target, **kwargs):
            made.append((target, kwargs))

            def rule(ctx, *operands, **attributes):
                return (ctx, operands, attributes)

            return rule

    ffi = jax_triton_adapter._TritonFfiLowering(FakeFfi())
    assert ffi.other == "kept"
    rule = ffi.ffi_lowering("triton_kernel_call_ffi", api_version=2, backend_config=b"\x78\x9c",
                            operand_output_aliases={})
    assert made[-1] == ("triton_kernel_call_ffi", dict(api_version=4, operand_output_aliases={}))
    assert rule("ctx", "a", "b") == ("ctx", ("a", "b"), dict(opaque=b"\x78\x9c"))
    for target, version in [("triton_kernel_call", 2), ("some_target", 4)]:  # passed through as they are
        ffi.ffi_lowering(target, api_version=version, backend_config=b"\x00")
        assert made[-1] == (target, dict(api_version=version, backend_config=b"\x00"))
    ffi = "triton_kernel_call_ffi" if jax_triton_adapter._ffi_target_registered() else "triton_kernel_call"
    assert jax_triton_adapter._call_target(None) == ffi
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jax_triton_adapter, "_jaxlib_kernel_takes_scratch", lambda: True)
        assert jax_triton_adapter._call_target((384, 128)) == ffi
        patch.setattr(jax_triton_adapter, "_jaxlib_kernel_takes_scratch", lambda: False)
        assert jax_triton_adapter._call_target((384, 128)) == "triton_kernel_call"
