"""Writes the benchmark shape sets `jtblas/bench/shapes/*.csv`.

    python -m jtblas.bench.make_shapes

Every set is a CSV with columns name,family,regime,M,N,K,layout,dtype,quick. `layout` is
BLAS-style: the first letter says whether A is stored transposed ([K, M]), the second B ([N, K]).
`quick` marks the `--quick` subset. `batched.csv` adds a `batch` column: that many independent
products of the row's sizes in one call (attention's batch x heads, MoE experts). The model
families' dimensions are the public `config.json` values listed in `FAMILIES` (and
`families.csv`, written beside the sets, names each source).
The odd sizes are drawn from a fixed seed, so rerunning this script reproduces the committed files
byte for byte.
"""

from __future__ import annotations

import csv
import dataclasses
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent / "shapes"
COLUMNS = ["name", "family", "regime", "M", "N", "K", "layout", "dtype", "quick"]
DTYPE = "bfloat16"
ODD_SEED = 20261105
ODD_COUNT = 24
# The odd, deep-K and square sets keep each product under this many FLOPs (~4 ms at 750 TFLOP/s).
MAX_FLOPS = 3.0e12


@dataclasses.dataclass(frozen=True, kw_only=True)
class Family:
    """One public model's projection sizes, from its `config.json` on the Hugging Face Hub.

    `kind`: "decoder" (decode, prefill and training rows, lm head included), "encoder" (inference
    and training rows, no lm head) or "experts" (one MoE expert's FFN at the token counts an
    expert receives). Weights are stored [in, out] (Flax's `kernel`), q/k/v fused into one
    projection and, for gated MLPs, gate and up fused into one of width 2 · intermediate.
    """

    name: str
    source: str
    kind: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    gated: bool
    vocab: int | None = None
    # Tokens of one training step, and of a batch at inference for encoders (e.g. 32 ViT images).
    train_tokens: int = 8192
    # Encoders: the tokens of one sequence (BERT 512, ViT 197 = 14·14 patches + the class token).
    sequence: int | None = None

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    def gemms(self) -> dict[str, tuple[int, int]]:
        """{projection: (in, out)}."""
        qkv = self.q_width + 2 * self.kv_heads * self.head_dim
        mlp = (2 if self.gated else 1) * self.intermediate
        if self.kind == "experts":
            return {"gate_up": (self.hidden, mlp), "down": (self.intermediate, self.hidden)}
        out = {"qkv": (self.hidden, qkv), "o": (self.q_width, self.hidden), "up": (self.hidden, mlp),
               "down": (self.intermediate, self.hidden)}
        if self.gated:
            out["gate_up"] = out.pop("up")
        if self.vocab:
            out["lm_head"] = (self.hidden, self.vocab)
        return out


FAMILIES = (
    Family(name="bert-base", source="google-bert/bert-base-uncased", kind="encoder", hidden=768,
           intermediate=3072, heads=12, kv_heads=12, head_dim=64, gated=False, sequence=512),
    Family(name="bert-large", source="google-bert/bert-large-uncased", kind="encoder", hidden=1024,
           intermediate=4096, heads=16, kv_heads=16, head_dim=64, gated=False, sequence=512),
    Family(name="vit-b16", source="google/vit-base-patch16-224", kind="encoder", hidden=768,
           intermediate=3072, heads=12, kv_heads=12, head_dim=64, gated=False, sequence=197,
           train_tokens=32 * 197),
    Family(name="vit-l16", source="google/vit-large-patch16-224", kind="encoder", hidden=1024,
           intermediate=4096, heads=16, kv_heads=16, head_dim=64, gated=False, sequence=197,
           train_tokens=32 * 197),
    # T5's decoder stack (d_model, d_ff, num_heads × d_kv; ReLU FFN, not gated) and its lm head.
    Family(name="t5-base", source="google-t5/t5-base", kind="decoder", hidden=768, intermediate=3072,
           heads=12, kv_heads=12, head_dim=64, gated=False, vocab=32128),
    Family(name="t5-large", source="google-t5/t5-large", kind="decoder", hidden=1024, intermediate=4096,
           heads=16, kv_heads=16, head_dim=64, gated=False, vocab=32128),
    # GPT-2: n_embd, n_inner null (= 4 · n_embd), n_head; vocab 50257 (odd: the lm head's rows).
    Family(name="gpt2", source="openai-community/gpt2", kind="decoder", hidden=768, intermediate=3072,
           heads=12, kv_heads=12, head_dim=64, gated=False, vocab=50257),
    Family(name="gpt2-medium", source="openai-community/gpt2-medium", kind="decoder", hidden=1024,
           intermediate=4096, heads=16, kv_heads=16, head_dim=64, gated=False, vocab=50257),
    Family(name="gpt2-large", source="openai-community/gpt2-large", kind="decoder", hidden=1280,
           intermediate=5120, heads=20, kv_heads=20, head_dim=64, gated=False, vocab=50257),
    Family(name="gpt2-xl", source="openai-community/gpt2-xl", kind="decoder", hidden=1600,
           intermediate=6400, heads=25, kv_heads=25, head_dim=64, gated=False, vocab=50257),
    Family(name="llama3-8b", source="meta-llama/Meta-Llama-3-8B", kind="decoder", hidden=4096,
           intermediate=14336, heads=32, kv_heads=8, head_dim=128, gated=True, vocab=128256),
    Family(name="llama3-70b", source="meta-llama/Meta-Llama-3-70B", kind="decoder", hidden=8192,
           intermediate=28672, heads=64, kv_heads=8, head_dim=128, gated=True, vocab=128256),
    Family(name="mistral-7b", source="mistralai/Mistral-7B-v0.1", kind="decoder", hidden=4096,
           intermediate=14336, heads=32, kv_heads=8, head_dim=128, gated=True, vocab=32000),
    Family(name="qwen2.5-7b", source="Qwen/Qwen2.5-7B", kind="decoder", hidden=3584, intermediate=18944,
           heads=28, kv_heads=4, head_dim=128, gated=True, vocab=152064),
    # Gemma-2: head_dim 256 is independent of hidden_size, so o is [4096, 3584].
    Family(name="gemma2-9b", source="google/gemma-2-9b", kind="decoder", hidden=3584, intermediate=14336,
           heads=16, kv_heads=8, head_dim=256, gated=True, vocab=256000),
    Family(name="phi3-mini", source="microsoft/Phi-3-mini-4k-instruct", kind="decoder", hidden=3072,
           intermediate=8192, heads=32, kv_heads=32, head_dim=96, gated=True, vocab=32064),
    # One of Mixtral's 8 experts (top-2 routing): an expert sees ~T/4 of a step's T tokens.
    Family(name="mixtral-8x7b-expert", source="mistralai/Mixtral-8x7B-v0.1", kind="experts", hidden=4096,
           intermediate=14336, heads=32, kv_heads=8, head_dim=128, gated=True, train_tokens=2048),
)
DECODE_TOKENS = (1, 4, 16, 64)
PREFILL_TOKENS = (2048, 8192)
EXPERT_TOKENS = (16, 64, 256, 1024)

QUICK = {
    "models": {
        "gpt2.lm_head.fwd.M1", "gpt2-xl.qkv.fwd.M8192", "vit-b16.o.dw.T6304", "bert-base.up.fwd.M8192",
        "llama3-8b.qkv.fwd.M1", "llama3-8b.gate_up.fwd.M16", "llama3-8b.down.dx.T8192",
        "llama3-8b.qkv.dw.T8192", "qwen2.5-7b.down.fwd.M2048", "t5-large.down.fwd.M64",
        "mixtral-8x7b-expert.gate_up.fwd.M256", "llama3-70b.down.fwd.M1",
    },
    "square": {"sq1024", "sq4096"},
    "odd": set(),  # the first four rows (below)
    "deepk": {"deepk256x256x65536", "deepk128x128x32768"},
    "batched": {"attention.scores.S128.D64.B4096", "moe.up.M64.E8"},
    "misaligned": {"misaligned.v32001.fwd.M16"},
    "fp32": {"fp32.gpt2.up.fwd.T8192"},
}


def _row(name, family, regime, m, n, k, layout, quick):
    return dict(name=name, family=family, regime=regime, M=m, N=n, K=k, layout=layout, dtype=DTYPE,
                quick=int(quick))


def _training(family: Family, gemm: str, k_in: int, n_out: int, tokens: int, regime: str) -> list[dict]:
    """Forward y = x·W (NN), dx = dy·Wᵀ (NT: B read as [N, K]) and dw = xᵀ·dy (TN: A read as
    [K, M]) of W[in, out] at `tokens` tokens."""
    passes = (("fwd", tokens, n_out, k_in, "NN"), ("dx", tokens, k_in, n_out, "NT"),
              ("dw", k_in, n_out, tokens, "TN"))
    return [_row(f"{family.name}.{gemm}.{kind}.T{tokens}", family.name, regime, m, n, k, layout, False)
            for kind, m, n, k, layout in passes]


def family_rows(family: Family) -> list[dict]:
    """Every benchmark product of one family, in regime order."""
    rows = []
    forward = lambda gemm, k_in, n_out, m, regime: _row(
        f"{family.name}.{gemm}.fwd.M{m}", family.name, regime, m, n_out, k_in, "NN", False)
    gemms = family.gemms()
    if family.kind == "decoder":
        for regime, token_counts in (("decode", DECODE_TOKENS), ("prefill", PREFILL_TOKENS)):
            rows += [forward(g, k_in, n_out, m, regime) for m in token_counts for g, (k_in, n_out) in gemms.items()]
    elif family.kind == "encoder":
        counts = (family.sequence, family.train_tokens)
        rows += [forward(g, k_in, n_out, m, "inference") for m in counts for g, (k_in, n_out) in gemms.items()]
    else:
        rows += [forward(g, k_in, n_out, m, "expert") for m in EXPERT_TOKENS for g, (k_in, n_out) in gemms.items()]
    for gemm, (k_in, n_out) in gemms.items():
        rows += _training(family, gemm, k_in, n_out, family.train_tokens, "train")
    return rows


def models():
    rows = [row for family in FAMILIES for row in family_rows(family)]
    for row in rows:
        row["quick"] = int(row["name"] in QUICK["models"])
    return rows


def families():
    """families.csv: one line per family with its source and the dimensions used."""
    return [dict(family=f.name, source=f"https://huggingface.co/{f.source}/blob/main/config.json", kind=f.kind,
                 hidden=f.hidden, intermediate=f.intermediate, heads=f.heads, kv_heads=f.kv_heads,
                 head_dim=f.head_dim, gated=int(f.gated), vocab=f.vocab or "", train_tokens=f.train_tokens)
            for f in FAMILIES]


def square():
    sizes = (256, 512, 1024, 1536, 2048, 3072, 4096, 5120, 6144, 8192)
    return [_row(f"sq{s}", "square", "square", s, s, s, "NN", f"sq{s}" in QUICK["square"]) for s in sizes]


def odd():
    rng = random.Random(ODD_SEED)
    rows = []
    while len(rows) < ODD_COUNT:
        m, n, k = (rng.randrange(500, 16001) for _ in range(3))
        if any(x % 8 == 0 for x in (m, n, k)) or 2 * m * n * k > MAX_FLOPS:
            continue
        layout = ("NN", "NN", "NT", "TN")[len(rows) % 4]
        rows.append(_row(f"odd{m}x{n}x{k}", "odd", "odd", m, n, k, layout, len(rows) < 4))
    return rows


def deepk():
    sizes = [
        (256, 256, 65536), (128, 128, 32768), (512, 512, 16384), (64, 64, 65536),
        (256, 512, 131072), (1024, 1024, 32768), (128, 4096, 65536), (4096, 128, 65536),
    ]
    return [
        _row(f"deepk{m}x{n}x{k}", "deepk", "deepk", m, n, k, "NN", f"deepk{m}x{n}x{k}" in QUICK["deepk"])
        for m, n, k in sizes
    ]


# Attention products per (sequence, head dim), over batch x heads: scores S = Q·Kᵀ (NT: K stored
# [seq, head_dim] is B stored [N, K]) and values O = P·V (NN), at sizes from 128x128x64 to
# 2048x2048x128, keeping one call's scores at most 1 GiB (bf16).
ATTENTION = ((128, 64), (256, 64), (512, 128), (1024, 128), (2048, 128))
ATTENTION_BATCH_HEADS = (32, 512, 4096)
MAX_SCORES_BYTES = 2**30
# Mixtral-8x7B's experts (families.csv): 8 experts, each x [M, 4096] · W1 [4096, 14336] (up) and
# h [M, 14336] · W2 [14336, 4096] (down), at tokens per expert M.
MOE_EXPERTS = 8
MOE_TOKENS = (16, 64, 256, 512)
BATCHED_COLUMNS = [*COLUMNS, "batch"]


def batched():
    rows = []
    for seq, head_dim in ATTENTION:
        for heads in ATTENTION_BATCH_HEADS:
            if heads * seq * seq * 2 > MAX_SCORES_BYTES:
                continue
            for regime, (m, n, k), layout in (("scores", (seq, seq, head_dim), "NT"),
                                              ("values", (seq, head_dim, seq), "NN")):
                name = f"attention.{regime}.S{seq}.D{head_dim}.B{heads}"
                rows.append(dict(_row(name, "attention", regime, m, n, k, layout, name in QUICK["batched"]),
                                 batch=heads))
    for regime, (n, k) in (("up", (14336, 4096)), ("down", (4096, 14336))):
        for m in MOE_TOKENS:
            name = f"moe.{regime}.M{m}.E{MOE_EXPERTS}"
            rows.append(dict(_row(name, "moe", regime, m, n, k, "NN", name in QUICK["batched"]), batch=MOE_EXPERTS))
    return rows


# Output layers over vocabularies that are not a multiple of 8 (a bf16 weight [hidden, vocab] then has
# rows that are not 16-byte aligned): GPT-2's 50257 at GPT-2-large's width, and a 32000- and a
# 49152-word vocabulary with one added token (a pad token, as fine-tuning recipes add) at 4096 and
# 2048; each at these tokens, forward (NN), dx (NT) and dw (TN).
MISALIGNED_VOCABULARIES = ((50257, 1280), (32001, 4096), (49153, 2048))
MISALIGNED_TOKENS = (1, 16, 128, 2048, 8192)


def misaligned():
    rows = []
    for vocab, hidden in MISALIGNED_VOCABULARIES:
        for tokens in MISALIGNED_TOKENS:
            passes = (("fwd", tokens, vocab, hidden, "NN"), ("dx", tokens, hidden, vocab, "NT"),
                      ("dw", hidden, vocab, tokens, "TN"))
            for kind, m, n, k, layout in passes:
                name = f"misaligned.v{vocab}.{kind}.M{tokens}"
                rows.append(_row(name, "misaligned", "misaligned", m, n, k, layout, name in QUICK["misaligned"]))
    return rows


# A Flax model with no `dtype` (fp32 parameters and inputs) runs its products in fp32, which JAX's
# default precision computes in tf32 on the GPU: GPT-2's decode at 1 and 64 tokens and training
# step, BERT-large's training step and ViT-B/16's inference batch, in float32.
FP32_FAMILIES = {"gpt2": ("decode", "train"), "bert-large": ("train",), "vit-b16": ("inference",)}
FP32_DECODE_TOKENS = (1, 64)


def fp32():
    rows = []
    for family in FAMILIES:
        regimes = FP32_FAMILIES.get(family.name, ())
        for row in family_rows(family):
            if row["regime"] not in regimes or (row["regime"] == "decode" and row["M"] not in FP32_DECODE_TOKENS):
                continue
            if row["regime"] == "inference" and row["M"] != family.train_tokens:
                continue
            name = f"fp32.{row['name']}"
            rows.append(dict(row, name=name, family=f"fp32-{family.name}", regime="fp32", dtype="float32",
                             quick=int(name in QUICK["fp32"])))
    return rows


SETS = {"models": models, "odd": odd, "deepk": deepk, "square": square, "batched": batched,
        "misaligned": misaligned, "fp32": fp32}


def write(path: Path, rows: list[dict], columns: list[str]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path} ({len(rows)} rows)")


def main(directory: Path = HERE) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, make in SETS.items():
        write(directory / f"{name}.csv", make(), BATCHED_COLUMNS if name == "batched" else COLUMNS)
    table = families()
    write(directory / "families.csv", table, list(table[0]))


if __name__ == "__main__":
    main()
