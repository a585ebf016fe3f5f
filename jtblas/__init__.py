"""jtblas: fast GEMM for JAX by Triton kernels whose meta-parameters come from an analytical model."""

from jtblas.config import ACTIVATIONS, Config, Problem
from jtblas.contraction import dot_general
from jtblas.ops import matmul
from jtblas.selection import candidates, explain, select

__all__ = ["ACTIVATIONS", "Config", "Problem", "candidates", "dot_general", "explain", "matmul", "nn", "select"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # `jtblas.nn` imports Flax: loaded on first use so that `import jtblas` stays cheap.
    if name == "nn":
        import importlib

        return importlib.import_module("jtblas.nn")
    raise AttributeError(f"module 'jtblas' has no attribute {name!r}")
