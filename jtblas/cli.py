"""The `jtblas` command: `explain` a selection, `bench` (jtblas.bench), `calibrate` (placeholder).

    jtblas explain 4096 4096 4096 --dtype bf16 --layout NN --gpu h200 --top 10
    jtblas bench ...          (arguments of jtblas.bench.cli)
    jtblas calibrate          (measures a hardware profile; not yet implemented)
"""

from __future__ import annotations

import argparse
import sys

PROGRAM = "jtblas"
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
LAYOUTS = ("NN", "NT", "TN", "TT")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from jtblas.hardware import BUILTIN

    parser = argparse.ArgumentParser(prog=PROGRAM, description="jtblas: analytical GEMM selection for JAX")
    commands = parser.add_subparsers(dest="command", required=True)

    explain = commands.add_parser("explain", help="rank the candidate configs of one GEMM and say why")
    explain.add_argument("m", type=_positive_int, metavar="M")
    explain.add_argument("n", type=_positive_int, metavar="N")
    explain.add_argument("k", type=_positive_int, metavar="K")
    explain.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="operand dtype (default bf16)")
    explain.add_argument("--out-dtype", choices=sorted(DTYPES), default=None,
                         help="output dtype (default: the operand dtype)")
    explain.add_argument("--layout", choices=LAYOUTS, type=str.upper, default="NN",
                         help="A then B: N as used, T stored transposed (default NN)")
    explain.add_argument("--precision", choices=("default", "highest"), default="default",
                         help="fp32 only: highest = full fp32 (no tf32)")
    explain.add_argument("--gpu", choices=sorted(BUILTIN), type=str.lower, default=None,
                         help="GPU description (default: detect, else h200)")
    explain.add_argument("--top", type=_positive_int, default=10, help="rows of the table (default 10)")

    commands.add_parser("bench", help="benchmarks (jtblas.bench); `jtblas bench --help` for its options",
                        add_help=False)
    commands.add_parser("calibrate", help="measure this GPU's model constants (not yet implemented)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":  # everything after `bench` belongs to jtblas.bench's parser
        return _bench(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "explain":
        return _explain(args)
    if args.command == "calibrate":
        return _calibrate()
    raise AssertionError(f"unhandled command {args.command!r}")  # argparse enforces the choices


def _explain(args: argparse.Namespace) -> int:
    from jtblas import selection

    result = selection.explain(
        args.m, args.n, args.k, dtype=DTYPES[args.dtype],
        out_dtype=None if args.out_dtype is None else DTYPES[args.out_dtype],
        transpose_a=args.layout[0] == "T", transpose_b=args.layout[1] == "T",
        precision="highest" if args.precision == "highest" else None, hardware=args.gpu,
    )
    print(result.format(top=args.top))
    return 0


def _bench(argv: list[str]) -> int:
    try:
        from jtblas.bench.cli import main as bench_main
    except ImportError as error:
        print(f"{PROGRAM} bench: the benchmark package is not available ({error})", file=sys.stderr)
        return 2
    return int(bench_main(argv) or 0)


def _calibrate() -> int:
    try:
        import jax

        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        print(f"{PROGRAM} calibrate: no GPU found, nothing to calibrate", file=sys.stderr)
        return 1
    print(f"{PROGRAM} calibrate: not implemented yet; the model uses the built-in description of "
          f"{gpus[0].device_kind}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
