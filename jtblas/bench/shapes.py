"""The benchmark shape sets, package data in `jtblas/bench/shapes/` (written by
`python -m jtblas.bench.make_shapes`): `*.csv` with columns name,family,regime,M,N,K,layout,dtype,
quick (and batch in `batched.csv`: independent products per launch, 1 where absent), and
`families.csv` naming each model family's public source."""

from __future__ import annotations

import csv
import dataclasses
import itertools
from pathlib import Path

from jtblas.config import OPERAND_DTYPE_BYTES, Problem

SHAPES_DIR = Path(__file__).resolve().parent / "shapes"
SET_NAMES = ("models", "odd", "deepk", "square", "batched", "misaligned", "fp32")
LAYOUTS = ("NN", "NT", "TN", "TT")
# Short names accepted in the dtype column.
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "f16": "float16", "fp32": "float32", "f32": "float32"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Shape:
    """One benchmark GEMM: C[M, N] = op(A) · op(B) in `dtype` (output in the same dtype), or with
    `batch` > 1 that many independent ones (each its own A, B and C) in one call."""

    name: str
    set: str
    family: str
    regime: str
    m: int
    n: int
    k: int
    layout: str
    dtype: str
    quick: bool = False
    batch: int = 1
    # The fp32 product's input precision: "tf32" (JAX's default precision) or "ieee"
    # (`jax.lax.Precision.HIGHEST`, fp32 on the FMA units); the shape sets are at the default.
    precision: str = "tf32"

    @property
    def group(self) -> str:
        """`family.regime`, e.g. `gpt2-xl.decode`."""
        return self.family if self.family == self.regime else f"{self.family}.{self.regime}"

    @property
    def transpose_a(self) -> bool:
        return self.layout[0] == "T"

    @property
    def transpose_b(self) -> bool:
        return self.layout[1] == "T"

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k

    @property
    def bytes_moved(self) -> int:
        """Compulsory DRAM traffic: read A and B once, write C once."""
        size = OPERAND_DTYPE_BYTES[self.dtype]
        return (self.m * self.k + self.k * self.n + self.m * self.n) * size * self.batch

    def problem(self) -> Problem:
        return Problem(
            m=self.m, n=self.n, k=self.k, dtype=self.dtype, out_dtype=self.dtype,
            transpose_a=self.transpose_a, transpose_b=self.transpose_b, batch=self.batch,
            input_precision=self.precision,
        )

    def key(self) -> str:
        """Identity of the GEMM itself (names may repeat a shape): `MxNxK dtype layout`, with
        `B x ` in front for a batch of B products."""
        batch = f"{self.batch} x " if self.batch > 1 else ""
        precision = " ieee" if self.precision == "ieee" else ""
        return f"{batch}{self.m}x{self.n}x{self.k} {self.dtype} {self.layout}{precision}"


def parse_row(row: dict[str, str], set_name: str) -> Shape:
    """One CSV row as a Shape; raises ValueError naming the row when a field is invalid."""
    try:
        m, n, k = (int(row[c]) for c in ("M", "N", "K"))
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{set_name}.csv: bad M/N/K in {row!r}") from error
    if min(m, n, k) < 1:
        raise ValueError(f"{set_name}.csv: M, N, K must be positive in {row!r}")
    try:
        batch = int((row.get("batch") or "1").strip())
    except ValueError as error:
        raise ValueError(f"{set_name}.csv: bad batch in {row!r}") from error
    if batch < 1:
        raise ValueError(f"{set_name}.csv: batch must be positive in {row!r}")
    layout = (row.get("layout") or "NN").strip().upper()
    if layout not in LAYOUTS:
        raise ValueError(f"{set_name}.csv: layout must be one of {LAYOUTS} in {row!r}")
    dtype = (row.get("dtype") or "bfloat16").strip().lower()
    dtype = DTYPE_ALIASES.get(dtype, dtype)
    if dtype not in OPERAND_DTYPE_BYTES:
        raise ValueError(f"{set_name}.csv: dtype must be one of {sorted(OPERAND_DTYPE_BYTES)} in {row!r}")
    name = (row.get("name") or "").strip() or f"{m}x{n}x{k}.{layout}"
    return Shape(
        name=name, set=set_name, family=(row.get("family") or set_name).strip(),
        regime=(row.get("regime") or row.get("family") or set_name).strip(), m=m, n=n, k=k,
        layout=layout, dtype=dtype, quick=(row.get("quick") or "0").strip() in ("1", "true", "yes"), batch=batch,
    )


def load_set(set_name: str, directory: Path = SHAPES_DIR) -> list[Shape]:
    """The shapes of `directory/<set_name>.csv` (lines starting with '#' are comments)."""
    path = Path(directory) / f"{set_name}.csv"
    with path.open(newline="") as f:
        lines = [line for line in f if line.strip() and not line.lstrip().startswith("#")]
    return [parse_row(row, set_name) for row in csv.DictReader(lines)]


def load(set_names=SET_NAMES, *, quick: bool = False, directory: Path = SHAPES_DIR) -> list[Shape]:
    """Shapes of the named sets in run order: the `quick` subset first, then the rest interleaved
    round-robin across sets, so a run cut short by its time budget still covers every set."""
    sets = [load_set(name, directory) for name in set_names]
    first = [[s for s in shapes if s.quick] for shapes in sets]
    rest = [[s for s in shapes if not s.quick] for shapes in sets]
    ordered = _round_robin(first) + ([] if quick else _round_robin(rest))
    seen, unique = set(), []
    for shape in ordered:  # one entry per (set, name)
        if (shape.set, shape.name) not in seen:
            seen.add((shape.set, shape.name))
            unique.append(shape)
    return unique


def _round_robin(lists: list[list[Shape]]) -> list[Shape]:
    return [s for batch in itertools.zip_longest(*lists) for s in batch if s is not None]


def load_families(directory: Path = SHAPES_DIR) -> dict[str, dict[str, str]]:
    """{family: its row of `families.csv`} (source URL, kind, the dimensions used)."""
    with (Path(directory) / "families.csv").open(newline="") as f:
        return {row["family"]: row for row in csv.DictReader(f)}
