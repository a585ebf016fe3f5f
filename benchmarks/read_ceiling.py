"""Decode products on the GPU: how fast any kernel can read a weight once, against the copy that
issue 6's targets are set by (torch launches in CUDA graphs, operand sets rotating past the L2,
as `jtblas bench` times).

    python benchmarks/read_ceiling.py [--shapes 1x6144x4096,...] [--json FILE]

A GEMM at M ≤ 16 reads the K x N weight once and writes almost nothing, where the copy of the
same bytes reads and writes them, so its launch and ramp are spread over twice the traffic. This
probe times, per shape: the copy; `torch.sum` of the weight; a Triton kernel that only reads it
(contiguous blocks, all loads of a program issued together, one float written per program) over
a small grid of its meta-parameters; the same reads in 64-column strips of 128-512 rows (the
GEMM's 16x64 tiles read the weight so, a K slice at a time), over the weight as stored and over
a contiguous view of the same bytes; cuBLAS and the model's plan. The best read is the ceiling
for a kernel that streams the weight; its ratio to the copy says how much of issue 6's target a
read-once kernel can reach at that size, and the strips whether reading by column strips costs
anything. What the strips cannot be is one program per strip over all of K (the decode GEMM's
one-launch form): read-only kernels of that shape streamed far slower than the GEMM itself
(BENCHMARKS.md, session 18).
"""

from __future__ import annotations

import itertools

import triton
import triton.language as tl

DEFAULT_SHAPES = "1x3584x3584,1x4096x4096,1x6144x4096,16x6144x4096,1x4096x14336,1x8192x8192"


@triton.jit
def read_kernel(x_ptr, n_elements, out_ptr, BLOCK: tl.constexpr, LOADS: tl.constexpr):
    """Sums LOADS contiguous blocks of BLOCK elements into one float per program."""
    base = tl.program_id(0).to(tl.int64) * BLOCK * LOADS
    total = tl.zeros((BLOCK,), tl.float32)
    for i in tl.static_range(LOADS):  # unrolled: the loads are independent, all in flight at once
        offsets = base + i * BLOCK + tl.arange(0, BLOCK)
        total += tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0.0).to(tl.float32)
    tl.store(out_ptr + tl.program_id(0), tl.sum(total))


@triton.jit
def read_strip_kernel(b_ptr, K, N, out_ptr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, LOADS: tl.constexpr):
    """Sums a (LOADS·BLOCK_K) x BLOCK_N block of the K x N row-major weight into one float: program
    (n, k) reads columns n·BLOCK_N on of rows k·LOADS·BLOCK_K on, all LOADS loads in flight at once
    (as the flat read; a runtime K loop or a BLOCK_N-wide store per program ran 10-30% slower,
    BENCHMARKS.md session 18). The GEMM's 16x64 tiles read the weight in such strips."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    first = tl.program_id(1).to(tl.int64) * BLOCK_K * LOADS
    total = tl.zeros((BLOCK_K, BLOCK_N), tl.float32)
    for i in tl.static_range(LOADS):
        rows = first + i * BLOCK_K + tl.arange(0, BLOCK_K)
        total += tl.load(b_ptr + rows[:, None] * N + cols[None, :]).to(tl.float32)
    tl.store(out_ptr + tl.program_id(1) * tl.num_programs(0) + tl.program_id(0), tl.sum(tl.sum(total, axis=1), axis=0))


def read_strip_launcher(torch, weights, block_k: int, block_n: int, loads: int, warps: int):
    """launch(i): `read_strip_kernel` over weight i (K x N; K a multiple of block_k·loads, N of
    block_n)."""
    k, n = weights[0].shape
    grid = (n // block_n, k // (block_k * loads))
    out = torch.empty(grid[0] * grid[1], device="cuda", dtype=torch.float32)
    kernel = read_strip_kernel[grid]
    return lambda i: kernel(weights[i], k, n, out, BLOCK_K=block_k, BLOCK_N=block_n, LOADS=loads, num_warps=warps)


def read_launcher(torch, weights, block: int, loads: int, warps: int):
    """launch(i): `read_kernel` over weight i."""
    n_elements = weights[0].numel()
    grid = (triton.cdiv(n_elements, block * loads),)
    out = torch.empty(grid[0], device="cuda", dtype=torch.float32)
    kernel = read_kernel[grid]
    return lambda i: kernel(weights[i], n_elements, out, BLOCK=block, LOADS=loads, num_warps=warps)


def best(entries: list[dict]) -> dict | None:
    timed = [entry for entry in entries if "seconds" in entry]
    return min(timed, key=lambda entry: entry["seconds"]) if timed else None


def probe_shape(torch, timer, text: str, sms: int, l2: int) -> dict:
    """Copy, reads, cuBLAS and the plan on one M x N x K (NN, bf16) shape; seconds each.

    Strips read 64-column blocks of the K x N weight, as the GEMM's 16x64 tiles do ("strided":
    128-byte runs N·2 bytes apart), and the same blocks of the same bytes viewed as [K·N/64, 64]
    ("contiguous": each program's rows one run), so the two differ only in where the runs lie."""
    from jtblas.bench import probes, timing

    shape, nbuf, ops, careful = probes.product(torch, timer, text, l2)
    weight_bytes = shape.k * shape.n * 2
    row = dict(shape=text, weight_bytes=weight_bytes, operand_sets=nbuf, flops=2 * shape.m * shape.n * shape.k)
    row["copy_bytes_per_s"] = timing.copy_bandwidth(timer, nbytes=weight_bytes, nbuf=nbuf)["bytes_per_s"]
    row.update(probes.baselines(ops, shape, careful))
    row["torch_sum_s"] = careful(lambda i: ops.b[i].sum(dtype=torch.float32))
    timed = lambda entry, launch: probes.measure_entry(entry, lambda: dict(seconds=careful(launch)))
    row["reads"] = [timed(dict(block=block, loads=loads, warps=warps), read_launcher(torch, ops.b, block, loads, warps))
                    for block, loads, warps in itertools.product((1024, 2048, 4096), (2, 4, 8, 16), (4, 8))]
    views = dict(strided=ops.b, contiguous=[b.view(-1, 64) for b in ops.b])
    for name, weights in views.items():
        row[f"strips_{name}"] = [
            timed(dict(rows=block_k * loads, block_k=block_k, loads=loads, warps=warps),
                  read_strip_launcher(torch, weights, block_k, 64, loads, warps))
            for (block_k, loads), warps in itertools.product(
                ((32, 4), (64, 2), (32, 8), (64, 4), (128, 2), (64, 8), (128, 4)), (4, 8))
            if shape.k % (block_k * loads) == 0]
    ops.free()
    torch.cuda.empty_cache()
    return row


def summary_line(row: dict) -> str:
    copy, weight = row["copy_bytes_per_s"], row["weight_bytes"]
    ratio = lambda seconds: f"{weight / seconds / copy:5.0%}"
    read = best(row["reads"])
    line = (f"{row['shape']:>14} {weight / 1e6:5.0f} MB  copy {copy / 1e9:5.0f} GB/s  "
            f"cuBLAS {ratio(row['cublas_s'])}  plan {ratio(row['plan_s'])} ({row['plan_config']})  "
            f"torch.sum {ratio(row['torch_sum_s'])}  read {ratio(read['seconds'])} "
            f"(block {read['block']} x{read['loads']} w{read['warps']})")
    for rows in sorted({entry["rows"] for entry in row["strips_strided"]}):
        strided, contiguous = (best([e for e in row[f"strips_{name}"] if e["rows"] == rows])
                               for name in ("strided", "contiguous"))
        line += (f"\n    strips of {rows:>5} rows: strided {ratio(strided['seconds'])}, "
                 f"contiguous {ratio(contiguous['seconds'])}")
    return line


def main(argv=None) -> None:
    from jtblas.bench import probes

    probes.main(__doc__, DEFAULT_SHAPES, probe_shape, summary_line, argv)


if __name__ == "__main__":
    main()
