"""`jtblas bench` (also `python -m jtblas.bench`): jtblas against XLA as a JAX user runs both.

    jtblas bench                                  # the quick rows of every set (23 shapes), ~1 min
    jtblas bench --all --out bench-out            # every row: 17 families, odd, deep-K, square, batched, misaligned
    jtblas bench --shapes models --max-m 16       # the decode rows
    jtblas bench --models                         # also whole Flax model steps (flax.linen.Dense vs jtblas.nn.Dense)
    jtblas bench --torch                          # also the torch-launch contenders (oracle, cuBLAS, tutorial)
    jtblas bench --report-only bench-out/results.json --out bench-out   # any machine

The headline (`through_jax`): `jtblas.matmul` under `jax.jit` beside `lax.dot_general` in the
same jitted slope loop, every distinct product once, rounds in turn. It needs JAX with a GPU and
nothing else. `--torch` adds columns that need torch (cuBLAS by `torch.mm`, the exhaustive
oracle over our own kernels, the Triton tutorial's autotune, nvMatmulHeuristics); their ratios
are torch launches against torch launches and are reported apart. `--models` times whole model
steps. Without a GPU the command prints the model's plans and checks a few products on the CPU.

The run writes `results.json` after every product (a killed run keeps what it finished), then
`report.md` and the plots.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from jtblas.bench import shapes as shapes_mod
from jtblas.jax_triton_adapter import drop_blank_triton_cache_dir

PROGRAM = "jtblas bench"
TORCH_CONTENDERS = ("jtblas", "oracle", "cublas", "tutorial", "nvmmh")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROGRAM, description="jtblas.matmul against XLA's dot through JAX, on "
                                "the products of public models; optionally whole model steps and torch-launch "
                                "contenders (cuBLAS, an exhaustive search over our kernels).")
    p.add_argument("--shapes", default=None,
                   help="comma-separated shape sets (default: "
                   f"{','.join(shapes_mod.SET_NAMES)}, their quick rows unless --all)")
    p.add_argument("--shapes-dir", default=str(shapes_mod.SHAPES_DIR), help="where the CSV sets are")
    p.add_argument("--quick", action="store_true",
                   help="only the rows marked quick (23 shapes; the default without --shapes)")
    p.add_argument("--all", action="store_true",
                   help="every row of the sets (the default when --shapes names sets)")
    p.add_argument("--families", default=None,
                   help="comma-separated model families (e.g. gpt2,llama3-8b): only their rows")
    p.add_argument("--max-shapes", type=int, default=None, help="stop after this many shape rows")
    p.add_argument("--max-m", type=int, default=None, metavar="M",
                   help="only the rows with M <= this (e.g. --shapes models --max-m 16: the decode products)")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="stop starting new products once this many seconds are spent")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds in turn per product through JAX (the median is kept; default 3)")
    p.add_argument("--trials", type=int, default=5, help="slope samples per round (default 5)")
    p.add_argument("--out", default="bench-out", help="output directory (default: bench-out/)")
    p.add_argument("--resume", default=None, metavar="RESULTS_JSON",
                   help="keep the products of an earlier results.json and time only the others")
    p.add_argument("--shard", type=_shard, default=None, metavar="I/N",
                   help="run only rows I, I+N, I+2N, ... (0 <= I < N): one process per GPU")
    p.add_argument("--no-products", action="store_true", help="skip the products (e.g. with --models alone)")
    p.add_argument("--models", action="store_true",
                   help="also time whole model steps (training and one-token decode of Flax models, "
                   "flax.linen.Dense against jtblas.nn.Dense)")
    p.add_argument("--model-names", default=None, help="comma-separated subset of the model steps' models")
    p.add_argument("--report-only", default=None, metavar="RESULTS_JSON[,RESULTS_JSON...]",
                   help="rebuild report.md and the plots from results files (several: merged); no GPU needed")
    torch = p.add_argument_group("torch-launch contenders (--torch; need torch with CUDA)")
    torch.add_argument("--torch", action="store_true",
                       help="also run the torch-launch contenders on the same rows, into OUT/torch/")
    torch.add_argument("--no-oracle", action="store_true", help="skip the exhaustive search")
    torch.add_argument("--max-candidates", type=int, default=None,
                       help="cap the oracle's candidate list (testing only: the oracle is then not exhaustive)")
    torch.add_argument("--contenders", default=",".join(TORCH_CONTENDERS),
                       help=f"comma-separated subset of {','.join(TORCH_CONTENDERS)},xla")
    torch.add_argument("--jax-checks", type=int, default=3,
                       help="time jtblas.matmul through JAX beside the torch launches on the first this many shapes")
    torch.add_argument("--jax-rounds", type=int, default=3, help="rounds of those JAX spot checks")
    torch.add_argument("--cache", default=None,
                       help="oracle cache JSON (default: OUT/torch/oracle_cache.json); reruns skip cached searches")
    torch.add_argument("--workers", type=int, default=None, help="compile processes (default: one per CPU core)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # A parent that imported jax-triton 0.3.1 passes TRITON_CACHE_DIR="" on; the torch-launch
    # contenders' Triton kernels then fail to compile ("Could not create or locate cache dir").
    drop_blank_triton_cache_dir()
    if args.report_only:
        return _report_only(args)
    # Before anything initialises JAX's GPU backend: leave memory for torch and the model steps
    # instead of letting XLA take 75% of the GPU up front.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        rows = select_rows(args)
    except (OSError, ValueError) as error:
        print(f"{PROGRAM}: {error}", file=sys.stderr)
        return 2
    problem = gpu_problem()
    if problem:
        from jtblas.bench import cpu

        skipped = "the products through JAX" + (", the model steps" if args.models else "") + (
            ", the torch-launch contenders" if args.torch else "")
        print(f"{PROGRAM}: {problem}: skipping {skipped}; printing the model's plans and checking products on "
              "the CPU backend instead", file=sys.stderr)
        return cpu.run(rows[: args.max_shapes] if args.max_shapes else rows, args.out, problem)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = lambda text: print(text, file=sys.stderr, flush=True)
    if not args.no_products:
        from jtblas.bench import through_jax

        through_jax.run(rows, out, rounds=args.rounds, trials=args.trials, time_budget=args.time_budget,
                        resume=args.resume, log=log)
    if args.models:
        from jtblas.bench import model_steps

        names = [n.strip() for n in args.model_names.split(",")] if args.model_names else None
        model_steps.run(names=names, out=out / "model_steps.json", log=log)
    if args.torch:
        _torch(args, rows, out, log)
    return _write_report(out, log)


def _torch(args, rows, out: Path, log) -> None:
    """The torch-launch contenders into OUT/torch/, or one line saying why they are skipped."""
    why = torch_problem()
    if why:
        log(f"{PROGRAM}: skipping the cuBLAS, oracle, tutorial and nvMatmulHeuristics columns: {why}")
        return
    from jtblas.bench import torch_runner

    batched = [r for r in rows if r.batch > 1]
    if batched:  # the torch launcher times one product per launch
        log(f"{PROGRAM}: the torch-launch contenders skip the {len(batched)} batched rows (timed through JAX only)")
        rows = [r for r in rows if r.batch == 1]
    torch_args = argparse.Namespace(**vars(args))
    torch_args.out = str(out / "torch")
    runner = torch_runner.Runner(torch_args)
    try:
        runner.run(rows)
    finally:
        runner.close()
    if runner.nvmmh is not None:  # its destructor crashes at exit (0.1.0.27): leave without it
        _write_report(out, log)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _write_report(out: Path, log) -> int:
    from jtblas.bench import jax_report

    try:
        paths = jax_report.write_report(out)
    except (OSError, ValueError) as error:
        log(f"{PROGRAM}: report failed: {error}")
        return 1
    log(f"{PROGRAM}: wrote " + ", ".join(str(p) for p in paths.values()))
    results = out / "results.json"
    if results.exists():
        print(jax_report.summary_text(json.loads(results.read_text())))
    return 0


def _report_only(args) -> int:
    from jtblas.bench import jax_report

    sources = [Path(x.strip()) for x in args.report_only.split(",") if x.strip()]
    out = Path(args.out)
    try:
        parts = [json.loads(path.read_text()) for path in sources]
        merged = jax_report.merge(parts)
    except (OSError, ValueError, KeyError) as error:
        print(f"{PROGRAM}: cannot read the results: {type(error).__name__}: {error}"[:400], file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    if [p.resolve() for p in sources] != [(out / "results.json").resolve()]:
        (out / "results.json").write_text(json.dumps(merged, indent=1))
    for name in ("model_steps.json",):
        for path in sources:
            if (path.parent / name).exists() and path.parent.resolve() != out.resolve():
                (out / name).write_text((path.parent / name).read_text())
    return _write_report(out, lambda text: print(text, file=sys.stderr))


def select_rows(args) -> list:
    """The shape rows the arguments ask for, in run order."""
    sets, quick = shape_selection(args)
    unknown = [f"{s}.csv" for s in sets if not (Path(args.shapes_dir) / f"{s}.csv").exists()]
    if unknown:
        raise ValueError(f"--shapes: no {', '.join(unknown)} in {args.shapes_dir} "
                         f"(the package's sets: {', '.join(shapes_mod.SET_NAMES)})")
    rows = rows_up_to_max_m(shapes_mod.load(sets, quick=quick, directory=Path(args.shapes_dir)), args)
    if args.families:
        wanted = {f.strip() for f in args.families.split(",") if f.strip()}
        known = {r.family for r in shapes_mod.load(sets, directory=Path(args.shapes_dir))}
        if wanted - known:
            raise ValueError(f"--families: unknown {sorted(wanted - known)} (known: {', '.join(sorted(known))})")
        rows = [r for r in rows if r.family in wanted]
    if args.shard is not None:
        index, count = args.shard
        rows = rows[index::count]
    if args.max_shapes is not None:
        rows = rows[: args.max_shapes]
    return rows


def shape_selection(args) -> tuple[list[str], bool]:
    """(shape sets, quick rows only) from the arguments: with no --shapes, every set's quick rows
    (the default run) unless --all; with --shapes, every row unless --quick."""
    if args.quick and args.all:
        raise SystemExit(f"{PROGRAM}: --quick and --all exclude each other")
    if args.shapes is None:
        return list(shapes_mod.SET_NAMES), not args.all
    return [s.strip() for s in args.shapes.split(",") if s.strip()], args.quick


def rows_up_to_max_m(shapes: list, args) -> list:
    """The shapes with M <= --max-m (all of them without it)."""
    if args.max_m is None:
        return shapes
    if args.max_m < 1:
        raise SystemExit(f"{PROGRAM}: --max-m must be >= 1, got {args.max_m}")
    return [shape for shape in shapes if shape.m <= args.max_m]


def _shard(text: str) -> tuple[int, int]:
    """'I/N' -> (I, N) with 0 <= I < N."""
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard wants I/N (e.g. 0/2), got {text!r}") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"--shard {text}: I must satisfy 0 <= I < N")
    return index, count


def gpu_problem() -> str | None:
    """Why JAX cannot time products on a GPU here, or None."""
    try:
        import jax

        if jax.default_backend() != "gpu":
            return f"JAX sees no GPU (its backend is {jax.default_backend()!r})"
    except Exception as error:  # noqa: BLE001
        return f"JAX is not usable ({type(error).__name__}: {error})"[:300]
    return None


def torch_problem() -> str | None:
    """Why the torch-launch contenders cannot run here, or None."""
    try:
        import torch
    except Exception as error:  # noqa: BLE001
        return f"torch is not installed (pip install torch; import failed: {error})"[:300]
    try:
        if not torch.cuda.is_available():
            return "torch sees no CUDA GPU"
    except Exception as error:  # noqa: BLE001
        return f"CUDA is not usable from torch ({error})"[:300]
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
