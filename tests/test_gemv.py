"""The experimental GEMV-style kernel (jtblas/kernels/gemv.py), not yet a model candidate:
correctness through the CPU backend against float64, its launch spec's checks, sm_90 lowering."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jtblas import launch, ops
from jtblas.kernels.gemv import gemv_kernel
from tests.reference import DTYPES, lower_for_cuda


def gemv(x, w, *, block_k=32, block_n=64, split_k=1, num_warps=4):
    m, k = x.shape
    n = w.shape[1]
    spec = ops.gemv_spec(m, n, k, block_k=block_k, block_n=block_n, split_k=split_k, num_warps=num_warps,
                         operand_bytes=jnp.dtype(x.dtype).itemsize)
    partials = launch.launch(
        gemv_kernel, grid=spec.grid, args=[x, w, *spec.scalars],
        out_shape=jax.ShapeDtypeStruct((split_k, m, n), jnp.float32),
        num_warps=spec.num_warps, num_stages=spec.num_stages, metaparams=spec.metaparams,
    )
    return partials.sum(axis=0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("m,n,k,split_k", [(1, 67, 129, 1), (1, 130, 97, 3), (2, 64, 256, 2), (3, 31, 33, 5),
                                           (4, 129, 70, 1)])
def test_gemv_matches_float64(m, n, k, split_k, dtype, rng):
    x = jnp.asarray(rng.standard_normal((m, k)), DTYPES[dtype])
    w = jnp.asarray(rng.standard_normal((k, n)), DTYPES[dtype])
    out = np.asarray(gemv(x, w, split_k=split_k), np.float64)
    reference = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    assert out.shape == (m, n) and np.all(np.isfinite(out))
    # fp32 partials, fp32 sums of exact bf16 products: only summation order differs.
    assert np.linalg.norm(out - reference) / np.linalg.norm(reference) < 1e-5


def test_gemv_spec_rejects_what_it_does_not_cover():
    with pytest.raises(ValueError, match="m=5"):
        ops.gemv_spec(5, 64, 64, block_k=32, block_n=64, split_k=1, num_warps=4)
    with pytest.raises(ValueError, match="block_n=48"):
        ops.gemv_spec(1, 64, 64, block_k=32, block_n=48, split_k=1, num_warps=4)
    with pytest.raises(ValueError, match="64-bit"):
        ops.gemv_spec(1, 65536, 65536, block_k=32, block_n=64, split_k=1, num_warps=4)
    spec = ops.gemv_spec(3, 4096, 14336, block_k=64, block_n=256, split_k=4, num_warps=8)
    assert spec.grid == (16, 4) and spec.num_stages == 1 and spec.metaparams["M_PAD"] == 4
    assert spec.metaparams["N_UNIT"] == 8 and spec.scalars[1] * 8 == 4096


def test_gemv_compiles_for_sm90():
    x = jax.ShapeDtypeStruct((1, 4096), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((4096, 14336), jnp.bfloat16)
    text = lower_for_cuda(lambda a, b: gemv(a, b, block_k=64, block_n=256, split_k=4, num_warps=8), x, w)
    assert "triton_kernel_call" in text
