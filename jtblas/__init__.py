"""jtblas: fast GEMM for JAX by Triton kernels whose meta-parameters come from an analytical model."""

from jtblas.config import Config, Problem
from jtblas.ops import matmul

__all__ = ["Config", "Problem", "matmul"]
__version__ = "0.1.0"
