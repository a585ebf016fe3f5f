"""On-chip resources one program of the GEMM kernel uses, and whether a config fits the GPU.

Pure Python; shared by the ops layer (to reject a forced config that cannot run) and the model
(to filter candidates).
"""

from __future__ import annotations

from jtblas.config import Config, Problem
from jtblas.hardware import Hardware

# Registers per thread that are not accumulators: addresses, loop counters, masks, the
# operand fragments of one mma step. ~64 is what ptxas reports for a 128x128x64 bf16 kernel beyond
# its 64 accumulator registers (nvcc -Xptxas -v on Triton 3.x kernels; also tritonBLAS's port notes).
NON_ACCUMULATOR_REGISTERS = 64


def shared_memory_bytes(config: Config, problem: Problem) -> int:
    """Shared memory of one program (bytes): the pipelined A and B tiles.

    Triton's pipeliner keeps `num_stages` buffers of A (block_m × block_k) and B (block_k × block_n)
    in flight (operands in their own dtype); the epilogue's layout conversion reuses that space.
    """
    tile_elements = (config.block_m + config.block_n) * config.block_k
    return config.num_stages * tile_elements * problem.operand_bytes


def accumulator_registers_per_thread(config: Config) -> int:
    """fp32 accumulator registers each thread holds: block_m·block_n / (32·num_warps)."""
    return config.block_m * config.block_n // (32 * config.num_warps)


def registers_per_thread(config: Config) -> int:
    """Estimated registers per thread: accumulators plus a fixed allowance for the rest."""
    return accumulator_registers_per_thread(config) + NON_ACCUMULATOR_REGISTERS


def fit_errors(config: Config, problem: Problem, hardware: Hardware) -> list[str]:
    """Reasons `config` cannot run `problem` on `hardware`; empty when it fits."""
    errors = []
    smem = shared_memory_bytes(config, problem)
    if smem > hardware.smem_per_block:
        errors.append(
            f"shared memory {smem} bytes (num_stages={config.num_stages} x "
            f"({config.block_m}+{config.block_n}) x {config.block_k} x {problem.operand_bytes} B) "
            f"exceeds {hardware.name}'s {hardware.smem_per_block} bytes per block"
        )
    threads = 32 * config.num_warps
    if threads > 1024:
        errors.append(f"num_warps={config.num_warps} gives {threads} threads, over 1024 per block")
    return errors
