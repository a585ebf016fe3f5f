"""The experimental Stream-K kernels (jtblas/kernels/stream_k.py) in Triton's interpreter against
a float64 reference: tiles shared by several programs, programs spanning several tiles, tiles
computed whole before the shared ones, K tails, the fix-up split into row pieces."""

import numpy as np
import pytest

from jtblas import launch
from jtblas.kernels.stream_k import stream_k_fixup, stream_k_kernel
from jtblas.ops import divisibility_unit


def run_stream_k(a: np.ndarray, b: np.ndarray, *, block: tuple[int, int, int], programs: int,
                 group_m: int = 2, fix_rows: int = 8) -> np.ndarray:
    """C = A·B (fp32, row-major) by the two Stream-K launches, interpreted; C starts as NaN.
    All but one wave and the remainder of the tiles are computed whole (the probe's split)."""
    (m, k), n = a.shape, b.shape[1]
    block_m, block_n, block_k = block
    c = np.full((m, n), np.nan, np.float32)
    workspace = np.full((programs, 2, block_m, block_n), np.nan, np.float32)
    tiles = -(-m // block_m) * -(-n // block_n)
    dp_tiles = max(0, tiles // programs - 1) * programs
    sizes = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m, PROGRAMS=programs)
    tensor = launch._HostTensor
    with launch._interpreted_language():
        launch._interpreted(stream_k_kernel)[(programs,)](
            tensor(a), tensor(b), m, n, k, k, 1, n, 1, n, 1, dp_tiles, tensor(workspace), tensor(c),
            INPUT_PRECISION="ieee", EVEN_K=k % block_k == 0,
            M_UNIT=divisibility_unit(m, 4), N_UNIT=divisibility_unit(n, 4), **sizes)
        launch._interpreted(stream_k_fixup)[(tiles - dp_tiles, block_m // fix_rows)](
            tensor(workspace), m, n, k, n, 1, dp_tiles, tensor(c), FIX_ROWS=fix_rows, **sizes)
    return c


@pytest.mark.parametrize("m,n,k,block,programs", [
    (32, 32, 256, (16, 16, 32), 3),     # 4 tiles x 8 K blocks over 3 programs: every tile shared
    (32, 48, 96, (16, 16, 16), 4),      # 6 tiles x 6 blocks: programs span tiles, some whole
    (37, 29, 131, (16, 16, 32), 5),     # tails in M, N and K (masked last K block)
    (17, 16, 48, (16, 16, 16), 11),     # more programs than K iterations per tile
    (1, 64, 512, (16, 32, 64), 7),      # decode-like: one row, long K
    (64, 80, 70, (16, 16, 32), 3),      # 20 tiles: 15 computed whole (data-parallel), 5 shared
])
def test_stream_k_matches_float64(m, n, k, block, programs):
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    c = run_stream_k(a, b, block=block, programs=programs)
    error = np.linalg.norm(c - reference) / np.linalg.norm(reference)
    assert np.isfinite(c).all() and error < 1e-6, error
