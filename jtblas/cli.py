"""The `jtblas` command: `explain` a selection, `bench` (jtblas.bench), `calibrate` (jtblas.calibrate).

    jtblas explain 4096 4096 4096 --dtype bf16 --layout NN --gpu h200 --top 10
    jtblas explain 128 128 64 --layout NT --batch 4096        # attention scores over batch x heads
    jtblas explain 16 12288 4096 --profile ~/.cache/jtblas/profiles/nvidia-h200-570.124.06.json
    jtblas explain 4096 14336 4096 --b-dtype fp32 --bias fp32 --activation gelu_tanh --residual bf16
    jtblas bench ...          (arguments of jtblas.bench.cli)
    jtblas calibrate [--out FILE] [--quick] [--fit-constants]   (measures a hardware profile)
"""

from __future__ import annotations

import argparse
import os
import sys

PROGRAM = "jtblas"
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
LAYOUTS = ("NN", "NT", "TN", "TT")


def _dtype_key(text: str) -> str:
    """A --dtype-style name, or "" (an epilogue flag given alone: argparse converts its const too)."""
    if text and text not in DTYPES:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(sorted(DTYPES))})")
    return text


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {value}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse's parser with one-line errors (no usage block): `jtblas explain: error: ...`."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from jtblas.config import ACTIVATIONS
    from jtblas.hardware import BUILTIN
    from jtblas.model.explain import legend

    parser = _Parser(prog=PROGRAM, description="jtblas: analytical GEMM selection for JAX")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    explain = commands.add_parser(
        "explain", help="rank the candidate configs of one GEMM and say why",
        description="Ranks the candidate configs of one GEMM (C[M, N] = A[M, K] B[K, N]) by the model's "
                    "predicted time, with each prediction's terms, then says why the winner won.",
        epilog="columns of the table (times in µs unless ns):\n" + legend(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    explain.add_argument("m", type=_positive_int, metavar="M")
    explain.add_argument("n", type=_positive_int, metavar="N")
    explain.add_argument("k", type=_positive_int, metavar="K")
    explain.add_argument("--dtype", choices=sorted(DTYPES), default="bf16",
                         help="operand dtype, A's where --b-dtype differs (default bf16)")
    explain.add_argument("--b-dtype", choices=sorted(DTYPES), default=None,
                         help="B's stored dtype (default: --dtype); the kernel converts it in registers and "
                              "computes in the narrower dtype")
    explain.add_argument("--out-dtype", choices=sorted(DTYPES), default=None,
                         help="output dtype (default: the operand dtype)")
    explain.add_argument("--layout", choices=LAYOUTS, type=str.upper, default="NN",
                         help="A then B: N as used, T stored transposed (default NN)")
    explain.add_argument("--precision", choices=("default", "highest"), default="default",
                         help="fp32 only: highest = full fp32 (no tf32)")
    which = explain.add_mutually_exclusive_group()
    which.add_argument("--gpu", choices=sorted(BUILTIN), type=str.lower, default=None,
                       help="built-in GPU description (default: detect, with this GPU's calibrated "
                            "profile if there is one, else h200)")
    which.add_argument("--profile", metavar="FILE", default=None,
                       help="a calibrated hardware profile (JSON written by `jtblas calibrate`)")
    explain.add_argument("--top", type=_positive_int, default=10, help="rows of the table (default 10)")
    explain.add_argument("--batch", type=_positive_int, default=1,
                         help="independent products in one launch (vmap, batched dot_general; default 1)")
    explain.add_argument("--bias", type=_dtype_key, nargs="?", const="", default=None, metavar="DTYPE",
                         help="a fused bias [N] (its dtype; default: --dtype's)")
    explain.add_argument("--activation", choices=ACTIVATIONS, default=None,
                         help="a fused activation after the bias")
    explain.add_argument("--residual", type=_dtype_key, nargs="?", const="", default=None,
                         metavar="DTYPE", help="a fused residual [M, N] added last (its dtype; default: --dtype's)")
    explain.add_argument("--gated", action="store_true",
                         help="N columns of a gate then an up projection, C [M, N/2] = activation(gate) * up")

    commands.add_parser("bench", help="benchmarks (jtblas.bench); `jtblas bench --help` for its options",
                        add_help=False)
    calibrate = commands.add_parser(
        "calibrate", help="measure this GPU (bandwidths, tensor rates, launch cost) into a hardware profile")
    calibrate.add_argument("--out", metavar="FILE", default=None,
                           help="where to write the profile (default: the cache path that detection reads, "
                                "jtblas.profiles.profile_path(device, driver))")
    calibrate.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    calibrate.add_argument("--fit-constants", action="store_true",
                           help="also apply the measured model constants (per-SM load rate, loaded latency) "
                                "and the busy-SM curve; they are always recorded under `measured`")
    calibrate.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    from jtblas.hardware import HardwareChoiceError
    from jtblas.profiles import ProfileError

    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else ""
    try:
        if command == "bench":  # everything after `bench` belongs to jtblas.bench's parser
            return _bench(argv[1:])
        args = build_parser().parse_args(argv)
        if args.command == "explain":
            return _explain(args)
        if args.command == "calibrate":
            return _calibrate(args)
    except (ProfileError, HardwareChoiceError) as error:  # a user's profile or GPU choice: one line
        print(f"{PROGRAM} {command}: error: {error}", file=sys.stderr)
        return 2
    raise AssertionError(f"unhandled command {args.command!r}")  # argparse enforces the choices


def _explain(args: argparse.Namespace) -> int:
    from jtblas import selection

    def epilogue_dtype(value: str | None) -> str | None:  # "" (the flag alone): --dtype's
        return None if value is None else DTYPES[value or args.dtype]

    try:
        result = selection.explain(
            args.m, args.n, args.k, dtype=DTYPES[args.dtype],
            out_dtype=None if args.out_dtype is None else DTYPES[args.out_dtype],
            transpose_a=args.layout[0] == "T", transpose_b=args.layout[1] == "T",
            precision="highest" if args.precision == "highest" else None,
            hardware=_profile_path(args.profile) if args.profile is not None else args.gpu, batch=args.batch,
            b_dtype=None if args.b_dtype is None else DTYPES[args.b_dtype], bias_dtype=epilogue_dtype(args.bias),
            activation=args.activation, residual_dtype=epilogue_dtype(args.residual), gated=args.gated,
        )
    except (ValueError, TypeError) as error:  # everything explain is given comes from the user
        print(f"{PROGRAM} explain: error: {error}", file=sys.stderr)
        return 2
    print(result.format(top=args.top))
    return 0


def _profile_path(text: str):
    """--profile's value as a path (loaded as a profile whatever its name ends with)."""
    from pathlib import Path

    return Path(text).expanduser()


def _bench(argv: list[str]) -> int:
    try:
        from jtblas.bench.cli import main as bench_main
    except ImportError as error:
        print(f"{PROGRAM} bench: the benchmark package is not available ({error})", file=sys.stderr)
        return 2
    return int(bench_main(argv) or 0)


def _calibrate(args: argparse.Namespace) -> int:
    from jtblas import profiles
    from jtblas.calibrate import measure, report
    from jtblas.hardware import PROFILE_ENV_VAR
    from jtblas.jax_triton_adapter import drop_blank_triton_cache_dir

    drop_blank_triton_cache_dir()  # the microbenchmarks are Triton kernels launched on torch tensors
    # One step launches through JAX: share the GPU with torch instead of XLA taking 75% up front.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

    reason = measure.find_gpu()
    if reason is not None:
        print(f"{PROGRAM} calibrate: {reason}", file=sys.stderr)
        return 1 if reason == measure.NO_GPU else 2
    run = measure.Calibration(quick=args.quick, fit_constants=args.fit_constants,
                              progress=not args.no_progress)
    print(f"{PROGRAM} calibrate: {run.device} ({run.sm_count} SMs), driver {profiles.driver_version()}, "
          f"base description {run.base.name!r}{'' if run.known_device else ' (nearest; no built-in for this GPU)'}",
          file=sys.stderr)
    profile = run.run()
    path = args.out or profiles.profile_path(profile["device"], profile["driver"])
    path = profiles.save(profile, path)
    print(report.format_table(report.comparison_rows(profile)))
    measured = profile["measured"]
    print(f"\n{len(profile['hardware'])} hardware fields measured in {measured['seconds']:.1f} s"
          f"{' (--quick)' if args.quick else ''}; model constants "
          + ("applied" if profile["constants"] else "recorded only (--fit-constants applies them)")
          + "; busy-SM curve " + ("applied" if "busy_sm_rates" in profile["hardware"] else "recorded only") + ".")
    for step, error in profile["errors"].items():
        print(f"failed: {step}: {error}")
    print(f"wrote {path}")
    if args.out is None:
        print(f"jtblas uses it automatically on this {profile['device']} under driver {profile['driver']}.")
    else:
        print(f"use it with {PROFILE_ENV_VAR}={path} (or hardware={str(path)!r}, "
              f"or copy it to {profiles.profile_path(profile['device'], profile['driver'])}).")
    return 0 if len(profile["errors"]) < len(run.steps()) else 2


if __name__ == "__main__":
    sys.exit(main())
