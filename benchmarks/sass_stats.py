"""The machine code of one jtblas product, read on any machine (no GPU): `jtblas.matmul` is lowered
for CUDA by jax-triton's real compile (as the tests' `lower_for_cuda`), the PTX that jax-triton
hands to jaxlib is assembled for sm_XXa by the ptxas that ships with Triton, and Triton's nvdisasm
prints the SASS; for every kernel the script reports registers, spills and the instruction mix of
each loop (a backward branch), e.g. the K loop of a decode tile at M = 1 against M = 16
(BENCHMARKS.md, session 13).

    python benchmarks/sass_stats.py 1x3584x18944 16x3584x18944 --config "16x64x256 w2 s5 g1"
                                    [--layout NN] [--dtype bfloat16] [--cc 90] [--keep DIR]

Without --config the model's own plan is lowered. Needs jax-triton and the jax CUDA plugin (the
README's test setup). The plan is the one this machine's jaxlib allows: TMA configs need a jaxlib
that allocates their global scratch (≥ 0.11, as on the GPU machine; with CI's 0.10 the model plans
the pointer kernel instead, and a forced TMA config is refused with that reason). jaxlib assembles
the same PTX with its own ptxas on the GPU machine, so the SASS there may differ in detail.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re
import subprocess
import sys
import tempfile

import jax

import jtblas
from jtblas import launch

# Opcode families counted in each loop (the first word of the opcode, before any '.').
FAMILIES = ("LDGSTS", "LDG", "STG", "LDS", "LDSM", "STS", "HMMA", "HGMMA", "UTMALDG", "SYNCS", "BAR", "DEPBAR",
            "ISETP", "SEL", "IMAD", "IADD3", "LEA", "P2R", "R2P", "STL", "LDL")
_INSTRUCTION = re.compile(r"\s+/\*([0-9a-f]{4,6})\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"\.L_x_(\d+):")
_BRANCH = re.compile(r"BRA\s+.*?\.L_x_(\d+)")
_PREDICATE = re.compile(r"^@!?U?P\w+\s+")


def lowered_ptx(m: int, n: int, k: int, *, layout: str, dtype: str, config: jtblas.Config | None,
                compute_capability: int, directory: pathlib.Path) -> dict[str, str]:
    """{kernel name: PTX} of every Triton kernel jax-triton compiles for the product, dumped into
    `directory` by jax-triton itself (its JAX_TRITON_DUMP_DIR)."""
    from jax_triton import triton_lib

    transpose_a, transpose_b = layout[0] == "T", layout[1] == "T"
    a = jax.ShapeDtypeStruct((k, m) if transpose_a else (m, k), dtype)
    b = jax.ShapeDtypeStruct((n, k) if transpose_b else (k, n), dtype)
    previous = triton_lib._JAX_TRITON_DUMP_DIR
    triton_lib._JAX_TRITON_DUMP_DIR = str(directory)
    triton_lib._COMPILED_KERNEL_CACHE.clear()  # a cached kernel would not be dumped again
    try:
        with launch.forced_backend("cuda", compute_capability=compute_capability):
            jax.jit(lambda x, y: jtblas.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b,
                                               config=config)).trace(a, b).lower(lowering_platforms=("cuda",))
    finally:
        triton_lib._JAX_TRITON_DUMP_DIR = previous
    return {path.stem: path.read_text() for path in sorted(directory.glob("*/*.ptx"))}


def assemble(ptx: str, name: str, compute_capability: int, directory: pathlib.Path) -> tuple[str, str]:
    """(ptxas -v's report, nvdisasm's SASS) of one kernel, by the tools in Triton's package."""
    import triton

    tools = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    source, cubin = directory / f"{name}.ptx", directory / f"{name}.cubin"
    source.write_text(ptx)
    report = subprocess.run([str(tools / "ptxas"), f"-arch=sm_{compute_capability}a", "-v", str(source), "-o",
                             str(cubin)], capture_output=True, text=True, check=True)
    sass = subprocess.run([str(tools / "nvdisasm"), "-c", str(cubin)], capture_output=True, text=True, check=True)
    return report.stdout + report.stderr, sass.stdout


def loop_mixes(sass: str) -> list[dict]:
    """One dict per loop of the SASS (a branch back to an earlier label): its address range, its
    instruction count and the count of each of FAMILIES in it."""
    instructions, labels, pending = [], {}, None
    for line in sass.splitlines():
        label = _LABEL.match(line.strip())
        if label:
            pending = label.group(1)
            continue
        found = _INSTRUCTION.match(line)
        if found:
            address = int(found.group(1), 16)
            if pending is not None:
                labels[pending], pending = address, None
            instructions.append((address, found.group(2)))
    loops = []
    for address, text in instructions:
        branch = _BRANCH.search(text)
        start = labels.get(branch.group(1)) if branch else None
        if start is None or start >= address:
            continue
        body = [t for a, t in instructions if start <= a <= address]
        opcodes = collections.Counter(_PREDICATE.sub("", t).split()[0].split(".")[0] for t in body)
        loops.append(dict(start=start, end=address, instructions=len(body),
                          **{family: opcodes[family] for family in FAMILIES if opcodes[family]}))
    return loops


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="+", help="MxNxK, e.g. 1x3584x18944")
    parser.add_argument("--config", default=None, help="a forced config, as Config.short() writes it")
    parser.add_argument("--layout", default="NN", choices=("NN", "NT", "TN", "TT"))
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--cc", type=int, default=90, help="compute capability (90: H100/H200)")
    parser.add_argument("--keep", default=None, help="keep the PTX, cubin and SASS files in this directory")
    args = parser.parse_args(argv)
    config = jtblas.Config.from_short(args.config) if args.config else None
    for text in args.shapes:
        m, n, k = (int(x) for x in text.lower().split("x"))
        with tempfile.TemporaryDirectory() as scratch:
            directory = pathlib.Path(args.keep or scratch) / f"{text}-{args.layout}"
            directory.mkdir(parents=True, exist_ok=True)
            kernels = lowered_ptx(m, n, k, layout=args.layout, dtype=args.dtype, config=config,
                                  compute_capability=args.cc, directory=directory)
            for name, ptx in kernels.items():
                report, sass = assemble(ptx, name, args.cc, directory)
                (directory / f"{name}.sass").write_text(sass)
                usage = re.search(r"Used (\d+) registers", report)
                spills = re.search(r"(\d+) bytes spill stores", report)
                print(f"{text} {args.layout} {name}: {usage.group(1) if usage else '?'} registers, "
                      f"{spills.group(1) if spills else '?'} bytes of spill stores")
                for loop in loop_mixes(sass):
                    mix = " ".join(f"{key} {value}" for key, value in loop.items() if key not in ("start", "end"))
                    print(f"    loop {loop['start']:05x}-{loop['end']:05x}: {mix}")


if __name__ == "__main__":
    sys.exit(main())
