"""The analytical model (placeholder until the model lands: a fixed, fitting config)."""

from jtblas.config import Config, Problem
from jtblas.hardware import Hardware


def select_for_problem(problem: Problem, hardware: Hardware) -> Config:
    return Config(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=3)
