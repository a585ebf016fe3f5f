"""Writes the benchmark shape sets `benchmarks/shapes/*.csv` (run from the repository root).

    python benchmarks/make_shapes.py

Every set is a CSV with columns name,group,M,N,K,layout,dtype,quick. `layout` is BLAS-style:
the first letter says whether A is stored transposed ([K, M]), the second B ([N, K]). `quick`
marks the `--quick` subset. Model dimensions and their sources: benchmarks/shapes/README.md.
The odd sizes are drawn from a fixed seed, so rerunning this script reproduces the committed
files byte for byte.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent / "shapes"
COLUMNS = ["name", "group", "M", "N", "K", "layout", "dtype", "quick"]
DTYPE = "bfloat16"
# Each shape's work stays under this many FLOPs so a run of the whole set fits a ~10 minute
# command on an H200 (3e12 FLOPs is ~4 ms at 750 TFLOP/s).
MAX_FLOPS = 3.0e12
ODD_SEED = 20261105
ODD_COUNT = 24

# Public config.json values (see shapes/README.md): hidden_size, intermediate_size, and the
# fused q/k/v projection width hidden + 2 * num_key_value_heads * head_dim.
MODELS = {
    "gpt2": dict(hidden=768, inter=3072, qkv=3 * 768),
    "llama3-8b": dict(hidden=4096, inter=14336, qkv=4096 + 2 * 8 * 128),
    "qwen2.5-7b": dict(hidden=3584, inter=18944, qkv=3584 + 2 * 4 * 128),
    "llama3-70b": dict(hidden=8192, inter=28672, qkv=8192 + 2 * 8 * 128),
}
DECODE_TOKENS = {
    "gpt2": (1, 128),
    "llama3-8b": (1, 8, 16, 64, 128),
    "qwen2.5-7b": (1, 16, 128),
    "llama3-70b": (1, 16),
}
TRAIN_TOKENS = 4096  # forward, dx and dw of every GEMM
EXTRA_PREFILL = {"llama3-8b": (2048, 8192)}  # forward only, to show the token-count trend

QUICK = {
    "square": {"sq1024", "sq4096", "sq8192"},
    "llm": {
        "llama3-8b.qkv.fwd.M1", "llama3-8b.gate_up.fwd.M16", "llama3-8b.down.fwd.M128",
        "llama3-8b.gate_up.fwd.T4096", "llama3-8b.down.dx.T4096", "llama3-8b.qkv.dw.T4096",
        "qwen2.5-7b.down.fwd.T4096", "gpt2.gate_up.fwd.T4096", "llama3-70b.down.fwd.M1",
    },
    "deepk": {"deepk256x256x65536", "deepk128x128x32768"},
}


def _row(name, group, m, n, k, layout, quick):
    return dict(name=name, group=group, M=m, N=n, K=k, layout=layout, dtype=DTYPE, quick=int(quick))


def square():
    sizes = (256, 512, 1024, 1536, 2048, 3072, 4096, 5120, 6144, 8192)
    return [_row(f"sq{s}", "square", s, s, s, "NN", f"sq{s}" in QUICK["square"]) for s in sizes]


def llm():
    rows = []
    for model, dims in MODELS.items():
        h, i, qkv = dims["hidden"], dims["inter"], dims["qkv"]
        # Forward y = x · W with W stored [in, out] (Flax's kernel layout): M tokens, K = in, N = out.
        gemms = {"qkv": (h, qkv), "o": (h, h), "gate_up": (h, 2 * i), "down": (i, h)}
        for tokens in DECODE_TOKENS[model]:
            for gemm, (k_in, n_out) in gemms.items():
                rows.append(_row(f"{model}.{gemm}.fwd.M{tokens}", f"{model}.decode", tokens, n_out, k_in, "NN", False))
        train = [(TRAIN_TOKENS, ("fwd", "dx", "dw"))] + [(t, ("fwd",)) for t in EXTRA_PREFILL.get(model, ())]
        for tokens, passes in train:
            for gemm, (k_in, n_out) in gemms.items():
                for kind in passes:
                    if kind == "fwd":  # y[T, out] = x[T, in] · W[in, out]
                        m, n, k, layout = tokens, n_out, k_in, "NN"
                    elif kind == "dx":  # dx[T, in] = dy[T, out] · W[in, out]^T: B read as [N, K]
                        m, n, k, layout = tokens, k_in, n_out, "NT"
                    else:  # dw[in, out] = x[T, in]^T · dy[T, out]: A read as [K, M]
                        m, n, k, layout = k_in, n_out, tokens, "TN"
                    if 2 * m * n * k > MAX_FLOPS:
                        continue
                    group = f"{model}.{'train' if tokens == TRAIN_TOKENS else 'prefill'}"
                    rows.append(_row(f"{model}.{gemm}.{kind}.T{tokens}", group, m, n, k, layout, False))
    for row in rows:
        row["quick"] = int(row["name"] in QUICK["llm"])
    return rows


def odd():
    rng = random.Random(ODD_SEED)
    rows = []
    while len(rows) < ODD_COUNT:
        m, n, k = (rng.randrange(500, 16001) for _ in range(3))
        if any(x % 8 == 0 for x in (m, n, k)) or 2 * m * n * k > MAX_FLOPS:
            continue
        layout = ("NN", "NN", "NT", "TN")[len(rows) % 4]
        rows.append(_row(f"odd{m}x{n}x{k}", "odd", m, n, k, layout, len(rows) < 4))
    return rows


def deepk():
    sizes = [
        (256, 256, 65536), (128, 128, 32768), (512, 512, 16384), (64, 64, 65536),
        (256, 512, 131072), (1024, 1024, 32768), (128, 4096, 65536), (4096, 128, 65536),
    ]
    return [
        _row(f"deepk{m}x{n}x{k}", "deepk", m, n, k, "NN", f"deepk{m}x{n}x{k}" in QUICK["deepk"])
        for m, n, k in sizes
    ]


def write(name, rows):
    path = HERE / f"{name}.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path} ({len(rows)} shapes)")


def main():
    HERE.mkdir(parents=True, exist_ok=True)
    for name, make in (("square", square), ("llm", llm), ("odd", odd), ("deepk", deepk)):
        write(name, make())


if __name__ == "__main__":
    main()
