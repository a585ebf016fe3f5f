"""The torch-launch contenders of `jtblas bench --torch`: our kernels launched on torch tensors
in CUDA graphs (the model's pick, the exhaustive oracle over `candidates_as_stored()`, the Triton
tutorial's autotune configs, nvMatmulHeuristics' choice) and cuBLAS through `torch.mm`.

These are a fast way to search configurations, not the benchmark of record (`through_jax`): the
same kernel ran 0.94× (0.77× at worst) of its torch-launch speed through JAX on 18 products
(H200, 2026-12-01). The first `--jax-checks` shapes also time `jtblas.matmul` through JAX in the
same process, a spot check of the oracle's launches against what a user gets. Needs torch with CUDA.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

from jtblas.bench import shapes as shapes_mod
from jtblas.bench.report import SMALL_M
from jtblas.bench.through_jax import versions
from jtblas.config import OPERAND_DTYPE_BYTES

# Seconds kept back from --time-budget for the last shape's tail, the report and the plots.
RESERVE_S = 25.0
PROGRAM = "jtblas bench --torch"


class Progress:
    """tqdm when installed, else one line per shape on stderr; both show an ETA."""

    def __init__(self, total: int):
        self.total, self.count, self.start = total, 0, time.monotonic()
        try:
            from tqdm import tqdm

            self.bar = tqdm(total=total, file=sys.stderr, unit="shape", dynamic_ncols=True)
        except Exception:  # noqa: BLE001 - tqdm is optional on the GPU machine
            self.bar = None

    def update(self, text: str, budget_left: float | None) -> None:
        self.count += 1
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.count * (self.total - self.count)
        budget = "" if budget_left is None else f", budget left {budget_left:.0f}s"
        if self.bar is not None:
            self.bar.set_postfix_str(f"{text[:60]}{budget}", refresh=False)
            self.bar.update(1)
        else:
            print(f"[{self.count}/{self.total}] {elapsed:.0f}s elapsed, ETA {eta:.0f}s{budget} | {text}",
                  file=sys.stderr, flush=True)

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@dataclasses.dataclass
class ShapeRun:
    """What is known about a shape before its timing starts."""

    shape: shapes_mod.Shape
    problem: object
    pick: object = None
    repack: object = None  # the model's jtblas.model.ProductPlan when it copies operands first
    select_s: float | None = None
    pick_error: str | None = None
    candidates: list = dataclasses.field(default_factory=list)
    candidates_s: float | None = None
    cand_hash: str | None = None
    cached: dict | None = None
    earlier: dict | None = None  # a cached search over another candidate list (its overlap is reused)
    known: list = dataclasses.field(default_factory=list)  # its first pass, as (config, s, error)
    oracle_configs: list = dataclasses.field(default_factory=list)  # what the oracle will time
    nvmmh_config: object = None
    nvmmh_raw: dict | None = None
    nvmmh_s: float | None = None
    nvmmh_error: str | None = None
    keys: dict = dataclasses.field(default_factory=dict)  # config -> compile key


class Runner:
    def __init__(self, args):
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.results_path = self.out / "results.json"
        self.contenders = {c.strip() for c in args.contenders.split(",") if c.strip()}
        if args.no_oracle:
            self.contenders.discard("oracle")
        self.start = time.monotonic()
        self.deadline = None if args.time_budget is None else self.start + args.time_budget - RESERVE_S
        self.nvmmh = None
        self.compiler = None
        self.records: list[dict] = []
        self.meta: dict = {}
        self.jax_ok = True
        self.jax_triton_error = None

    # ---------------------------------------------------------------- setup

    def close(self) -> None:
        if self.compiler is not None:
            self.compiler.shutdown()
            self.compiler = None

    def budget_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def _setup(self) -> None:
        import torch

        from jtblas.bench import contenders as C
        from jtblas import timing
        from jtblas.bench import oracle

        self.torch = torch
        self.C, self.oracle_mod, self.timing = C, oracle, timing
        torch.manual_seed(0)
        props = torch.cuda.get_device_properties(0)
        self.gpu_name = torch.cuda.get_device_name(0)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 50 * 2**20) or 50 * 2**20)
        self.timer = timing.GraphTimer()
        self.meta = dict(
            date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            gpu=self.gpu_name, sm_count=props.multi_processor_count, l2_bytes=self.l2_bytes,
            argv=sys.argv, args=vars(self.args), host=platform.node(), python=platform.python_version(),
            versions=versions(), contenders=sorted(self.contenders),
            methods=dict(
                torch="CUDA graph of n launches (n so the graph spans >= 2 ms), replayed between CUDA "
                      "events; median of 7 replays / n. Operand sets rotate to cover 2.5x L2.",
                oracle_first_pass="event-timed loop of 2 launches (kernels >= 0.2 ms) or a CUDA graph "
                                  "spanning >= 0.3 ms, one replay; the best 5 re-timed like the pick",
                xla="slope (t(2R) - t(R)) / R of a jitted lax.fori_loop running lax.dot_general once per "
                    "operand set per iteration, chained through A[0,0], every C a loop output; median of 5 per R; "
                    f"compiled once, timed in {self.args.jax_rounds} rounds in turn with the spot check, the "
                    "median of the rounds",
                jtblas_jax="jtblas.matmul (jax-triton, the model's whole plan) in the same slope loop as XLA, "
                           "in the same rounds",
                copy=("dst.copy_(src) of 256 MiB in a CUDA graph, after 0.5 s of copies; bandwidth counts read + "
                      "write; M <= 16 shapes: also a copy of the weight's bytes (same rotation of buffers)"),
            ),
        )
        import jtblas
        from jtblas import selection

        # The oracle times configs on the operands as stored (unrepacked), so it ranks their space.
        self.select, self.candidates_fn = jtblas.select, selection.candidates_as_stored
        from jtblas import hardware

        self.hw = hardware.detect()
        self.meta["hardware_model"] = self.hw.name
        if "nvmmh" in self.contenders:
            try:
                self.nvmmh = C.Nvmmh(self.gpu_name)
            except ImportError:
                print(f"{PROGRAM}: nvMatmulHeuristics not installed (pip install nvidia-matmul-heuristics); "
                      "skipping that contender", file=sys.stderr)
                self.contenders.discard("nvmmh")
            except Exception as error:  # noqa: BLE001
                print(f"{PROGRAM}: nvMatmulHeuristics unusable ({_short_error(error)}); skipping it",
                      file=sys.stderr)
                self.contenders.discard("nvmmh")
        self.cache = oracle.OracleCache(self.args.cache or (self.out / "oracle_cache.json"))
        self.compiler = oracle.Compiler(self.args.workers)
        self.meta["workers"] = self.compiler.workers

    def _measure_device(self) -> None:
        """Copy bandwidth and the JAX checks (while the pool compiles the first shapes)."""
        C, timing = self.C, self.timing
        self.meta["copy_bandwidth"] = self._safe(lambda: timing.copy_bandwidth(self.timer, warm_s=0.5))
        import jax

        try:
            jax_gpus = jax.devices("gpu")
        except RuntimeError as error:
            jax_gpus, self.meta["jax_error"] = [], _short_error(error)
        self.jax_ok = bool(jax_gpus) and jax.default_backend() == "gpu"
        self.meta["jax_device"] = str(jax_gpus[0].device_kind) if jax_gpus else None
        if not self.jax_ok:
            print(f"{PROGRAM}: JAX sees no GPU ({self.meta.get('jax_error', jax.default_backend())}); "
                  "XLA and the JAX spot checks are skipped", file=sys.stderr)
        elif "xla" in self.contenders or self.args.jax_checks:
            self.meta["xla_empty_iteration_s"] = self._safe(C.empty_iteration_seconds)

    def _safe(self, fn):
        try:
            return fn()
        except Exception as error:  # noqa: BLE001
            return dict(error=_short_error(error))

    # ---------------------------------------------------------------- planning

    def _plan(self, shape) -> ShapeRun:
        C, oracle = self.C, self.oracle_mod
        from jtblas.model import resources

        problem = shape.problem()
        plan = ShapeRun(shape=shape, problem=problem)
        kw = dict(dtype=_np_dtype(shape.dtype), transpose_a=shape.transpose_a, transpose_b=shape.transpose_b)
        try:
            t = time.perf_counter()
            plan.pick = self.select(shape.m, shape.n, shape.k, **kw)
            plan.select_s = time.perf_counter() - t
            plan.repack = C.repack_plan(problem)
        except Exception as error:  # noqa: BLE001
            plan.pick_error = _short_error(error)
        if "oracle" in self.contenders:
            try:
                t = time.perf_counter()
                plan.candidates = list(self.candidates_fn(shape.m, shape.n, shape.k, **kw))
                plan.candidates_s = time.perf_counter() - t
                if self.args.max_candidates:
                    plan.candidates = plan.candidates[: self.args.max_candidates]
                plan.cand_hash = oracle.candidates_hash(plan.candidates)
                plan.cached = self.cache.get(oracle.cache_key(shape.key(), self.gpu_name, plan.cand_hash))
                if plan.cached:  # re-time the cached leaders side by side with the others
                    plan.oracle_configs = [C.config_from_dict(d) for d in plan.cached.get("top", [])[:3]]
                else:
                    plan.earlier = self.cache.earlier(shape.key(), self.gpu_name, plan.candidates)
                    by_name = {c.short(): c for c in plan.candidates}
                    if plan.earlier:  # time only what the earlier search lacks
                        plan.known = [(by_name[name], t, e) for name, t, e in plan.earlier["first"]]
                    known = {c for c, _, _ in plan.known}
                    plan.oracle_configs = [c for c in plan.candidates if c not in known]
            except Exception as error:  # noqa: BLE001
                plan.candidates = []
                plan.oracle_configs = []
                plan.cand_hash = f"error: {_short_error(error)}"
        if self.nvmmh is not None:
            try:
                plan.nvmmh_raw, plan.nvmmh_s = self.nvmmh.query(problem)
                plan.nvmmh_config = C.config_from_nvmmh(
                    plan.nvmmh_raw, problem, split_k_ok=True,
                    fits=lambda c: not resources.fit_errors(c, problem, self.hw),
                )
            except Exception as error:  # noqa: BLE001
                plan.nvmmh_error = _short_error(error)
        # Compile order = the order the parent needs binaries in (queued later, by `_submit`).
        wanted = []
        if plan.pick is not None and "jtblas" in self.contenders:
            wanted.append(plan.pick)
        if "tutorial" in self.contenders:
            wanted += list(C.TUTORIAL_CONFIGS)
        if plan.nvmmh_config is not None:
            wanted.append(plan.nvmmh_config)
        wanted += plan.oracle_configs
        # The earlier search's leaders are re-timed carefully: compile them too.
        timed = sorted((x for x in plan.known if x[1] is not None), key=lambda x: x[1])
        wanted += [c for c, _, _ in timed[:oracle.CAREFUL_TOP]]
        for config in wanted:
            if config not in plan.keys:
                try:
                    plan.keys[config] = (oracle.compile_key(problem, config), config)
                except Exception as error:  # noqa: BLE001
                    plan.keys[config] = ("error", _short_error(error))
        return plan

    def _submit(self, plan: ShapeRun) -> None:
        for config, key in plan.keys.items():  # insertion order = the order they are needed in
            if key[0] != "error":
                self.compiler.submit(plan.problem, config, key)

    def _compiled(self, plan: ShapeRun, config) -> dict:
        key = plan.keys.get(config)
        if key is None:
            key = plan.keys[config] = self.compiler.submit(plan.problem, config)
        if key[0] == "error":
            return dict(ok=False, error=key[1])
        deadline = None if self.deadline is None else self.deadline + RESERVE_S / 2
        return self.compiler.result(key, deadline)

    # ---------------------------------------------------------------- the run

    def run(self, shapes: list) -> int:
        """Times every contender on `shapes` (already selected by the command line)."""
        self._setup()
        args = self.args
        print(f"{PROGRAM}: {len(shapes)} shapes on {self.gpu_name}; contenders {sorted(self.contenders)}; "
              f"{self.compiler.workers} compile workers", file=sys.stderr)
        t = time.perf_counter()
        plans = []
        for shape in shapes:
            plans.append(self._plan(shape))
            if shape.quick:  # the quick subset runs first: start compiling it now
                self._submit(plans[-1])
        # The quick subset first (as listed), then the shape that needs the fewest new compiles.
        quick = sum(1 for p in plans if p.shape.quick)
        keysets = {id(p): {k for k in p.keys.values() if k[0] != "error"} for p in plans}
        plans = self.oracle_mod.order_by_new_work(plans, lambda p: keysets[id(p)], first=quick)
        for plan in plans:
            self._submit(plan)
        self.meta["plan_s"] = time.perf_counter() - t
        self._measure_device()
        print(f"{PROGRAM}: copy bandwidth {_fmt_bw(self.meta.get('copy_bandwidth'))}; XLA loop iteration "
              f"{self.meta.get('xla_empty_iteration_s')}", file=sys.stderr)
        self.meta["order"] = [p.shape.name for p in plans]
        self.meta["compile_jobs"] = self.compiler.submitted
        print(f"{PROGRAM}: planned in {self.meta['plan_s']:.1f}s; {self.compiler.submitted} distinct "
              "compile jobs queued", file=sys.stderr)
        progress = Progress(len(plans))
        durations = []
        stopped = None
        jax_checks_left = args.jax_checks
        for index, plan in enumerate(plans):
            left = self.budget_left()
            typical = statistics.median(durations) if durations else 0.0
            if left is not None and left < 0.5 * typical:
                stopped = f"time budget: {len(plans) - index} shapes not run"
                break
            t = time.monotonic()
            spot = jax_checks_left > 0
            record = self._run_shape(plan, jax_check=spot)
            jax_checks_left -= int(spot)
            durations.append(time.monotonic() - t)
            record["wall_s"] = durations[-1]
            self.records.append(record)
            self._write()
            progress.update(_line(record), self.budget_left())
            if left is not None and self.budget_left() is not None and self.budget_left() < 0:
                stopped = f"time budget: {len(plans) - index - 1} shapes not run"
                break
        progress.close()
        if stopped:
            done = {(r["set"], r["name"]) for r in self.records}
            self.meta["not_run"] = [p.shape.name for p in plans if (p.shape.set, p.shape.name) not in done]
            print(f"{PROGRAM}: stopped by the {stopped}", file=sys.stderr)
        self.meta["stopped"] = stopped
        self.meta["elapsed_s"] = time.monotonic() - self.start
        self.meta["compile_jobs_done"] = self.compiler.done_count()
        self.close()
        self._write()
        try:
            from jtblas.bench import report

            paths = report.write_report(self.results_path, self.out)
            print(f"{PROGRAM}: wrote {self.results_path} and " + ", ".join(str(p) for p in paths.values()),
                  file=sys.stderr)
            print(report.summary_text(json.loads(self.results_path.read_text())))
        except Exception as error:  # noqa: BLE001
            print(f"{PROGRAM}: report failed: {_short_error(error)}", file=sys.stderr)
            traceback.print_exc()
        return 0

    def _write(self) -> None:
        from jtblas.bench import report

        for record in self.records:
            record["ratios"] = report.ratios(record)
        payload = dict(meta=self.meta, shapes=self.records)
        tmp = self.results_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(payload, indent=1, default=_json_default))
        os.replace(tmp, self.results_path)

    # ---------------------------------------------------------------- one shape

    def _run_shape(self, plan: ShapeRun, *, jax_check: bool) -> dict:
        C, oracle, torch = self.C, self.oracle_mod, self.torch
        shape, problem = plan.shape, plan.problem
        nbuf = C.operand_sets(shape.bytes_moved, self.l2_bytes)
        record = dict(
            name=shape.name, set=shape.set, group=shape.group, M=shape.m, N=shape.n, K=shape.k,
            layout=shape.layout, dtype=shape.dtype, flops=shape.flops, bytes=shape.bytes_moved,
            operand_sets=nbuf, contenders={},
        )
        cont = record["contenders"]
        try:
            ops = C.TorchOperands(torch, shape, nbuf)
        except Exception as error:  # noqa: BLE001 - e.g. out of memory: nothing else can run
            record["error"] = _short_error(error)
            torch.cuda.empty_cache()
            return record
        careful = lambda launch: oracle.careful_time(self.timer, launch, nbuf)

        def ours(config, extra=None) -> dict:
            """Our kernel with `config`: compile result, careful time, error vs fp32."""
            entry = dict(config=dataclasses.asdict(config), config_short=config.short(), **(extra or {}))
            repack = plan.repack if extra and "select_s" in extra else None
            if repack is not None:  # the model's pick copies operands first: time copies + kernel
                launch = C.repacked_launcher(ops, repack)
                entry.update(repacked=repack.copies,
                             method_note=repack.reason)
                entry["seconds"] = careful(launch)
                entry["method"] = self.timer.last_method
                entry["max_rel_err"] = ops.error(launch)
                return entry
            compiled = self._compiled(plan, config)
            entry["compile_s"] = compiled.get("seconds")
            if not compiled.get("ok"):
                entry["error"] = "compile: " + str(compiled.get("error"))
                return entry
            launch = C.kernel_launcher(ops, problem, config)
            entry["seconds"] = careful(launch)
            entry["method"] = self.timer.last_method
            entry["max_rel_err"] = ops.error(launch)
            return entry

        # cuBLAS first: its time sizes the XLA loop.
        if "cublas" in self.contenders:
            cont["cublas"] = self._guard(lambda: self._cublas(ops, careful))
        if "jtblas" in self.contenders:
            if plan.pick is None:
                cont["jtblas"] = dict(error="select: " + str(plan.pick_error))
            else:
                cont["jtblas"] = self._guard(lambda: ours(plan.pick, dict(select_s=plan.select_s)))
                c = cont["jtblas"]
                if c.get("compile_s") is not None and plan.select_s is not None:
                    c["first_call_s"] = plan.select_s + c["compile_s"]
        if "tutorial" in self.contenders:
            cont["tutorial"] = self._guard(lambda: self._tutorial(plan, ops, nbuf, ours))
        if "nvmmh" in self.contenders:
            if plan.nvmmh_config is None:
                cont["nvmmh"] = dict(error=str(plan.nvmmh_error))
            else:
                cont["nvmmh"] = self._guard(lambda: ours(plan.nvmmh_config, dict(
                    query_s=plan.nvmmh_s, nvmmh=plan.nvmmh_raw)))
                c = cont["nvmmh"]
                if c.get("compile_s") is not None:
                    c["first_call_s"] = (plan.nvmmh_s or 0) + c["compile_s"]
        if "oracle" in self.contenders:
            cont["oracle"] = self._guard(lambda: self._oracle(plan, ops, nbuf, cont.get("jtblas"), ours))
        estimate = min((c["seconds"] for c in cont.values() if _ok(c)), default=shape.flops / 500e12)
        ops.free()  # the closures above keep `ops`; its buffers go now
        torch.cuda.empty_cache()
        if shape.m <= SMALL_M:  # the practical ceiling of streaming the weight: a copy of its bytes
            weight_bytes = shape.k * shape.n * OPERAND_DTYPE_BYTES[shape.dtype]
            record["copy_same_bytes"] = self._safe(
                lambda: self.timing.copy_bandwidth(self.timer, nbytes=weight_bytes, nbuf=nbuf))
        jax_dots = {}
        if "xla" in self.contenders:
            jax_dots["xla"] = C.xla_dot(shape)
        if jax_check and plan.pick is not None and self.jax_triton_error is None:
            # config=None: what a user's jtblas.matmul runs, the model's whole plan (a forced
            # config would run the pick on the caller's operands, never repacked).
            jax_dots["jtblas_jax"] = C.jtblas_dot(shape, None)
        if jax_dots and self.jax_ok:  # XLA and the spot check timed in turn, in the same rounds
            cont.update(self._jax(shape, jax_dots, nbuf, estimate))
        elif "xla" in self.contenders:
            cont["xla"] = dict(error="JAX sees no GPU")
        if "jtblas_jax" in cont:
            c = cont["jtblas_jax"]
            if c.get("error") and ("jax_triton" in c["error"] or "jax-triton" in c["error"]):
                self.jax_triton_error = c["error"]
            c["config_short"] = plan.pick.short()
        ours_entry = cont.get("jtblas") or {}
        transposes = plan.repack is not None and (plan.repack.transpose_a or plan.repack.transpose_b)
        if transposes and _ok(ours_entry) and self.jax_ok:
            # A transposed copy: torch's copy_ from a transposed view streams at a fraction
            # of the bandwidth XLA's transpose reaches (4096x4096x14336 NT on the H200: 1032 µs
            # emulated, 620 µs through jax.jit), so the pick is timed as jtblas.matmul runs it.
            through_jax = cont.get("jtblas_jax") or self._jax(shape, {"ours": C.jtblas_dot(shape, None)}, nbuf,
                                                               estimate)["ours"]
            if _ok(through_jax):
                ours_entry.update(torch_emulation_seconds=ours_entry["seconds"], seconds=through_jax["seconds"],
                                  method="jtblas.matmul through jax.jit, XLA's slope loop (the transposed copy "
                                         "runs in XLA): " + str(through_jax.get("method")))
        return record

    def _guard(self, fn) -> dict:
        try:
            return fn()
        except Exception as error:  # noqa: BLE001 - one contender failing must not end the run
            with contextlib.suppress(Exception):  # a broken context: the error below says enough
                self.torch.cuda.synchronize()
            return dict(error=_short_error(error))

    def _cublas(self, ops, careful) -> dict:
        torch = self.torch
        launch = self.C.cublas_launcher(ops)
        torch.cuda.synchronize()
        t = time.perf_counter()
        launch(0)
        torch.cuda.synchronize()
        first = time.perf_counter() - t
        seconds = careful(launch)
        return dict(seconds=seconds, method=self.timer.last_method, first_call_s=first,
                    max_rel_err=ops.error(launch))

    def _tutorial(self, plan, ops, nbuf, ours) -> dict:
        """What `@triton.autotune` over the tutorial configs does: time each, keep the best.
        tune_s = compile time of all of them (worker-measured) + the parent's timing time."""
        C, oracle = self.C, self.oracle_mod
        t = time.perf_counter()
        trials, compile_s = [], 0.0
        for config in C.TUTORIAL_CONFIGS:
            compiled = self._compiled(plan, config)
            compile_s += compiled.get("seconds") or 0.0
            if not compiled.get("ok"):
                trials.append((config.short(), None, str(compiled.get("error"))[:200]))
                continue
            try:
                launch = C.kernel_launcher(ops, plan.problem, config)
                trials.append((config.short(), oracle.first_pass_time(self.timer, launch, nbuf), None))
            except Exception as error:  # noqa: BLE001 - the autotuner also skips configs that fail
                trials.append((config.short(), None, _short_error(error)))
        timing_s = time.perf_counter() - t
        timed = [(s, i) for i, (_, s, _) in enumerate(trials) if s is not None]
        if not timed:
            return dict(error="no tutorial config ran", trials=trials)
        best = C.TUTORIAL_CONFIGS[min(timed)[1]]
        entry = ours(best)
        entry.update(trials=trials, tune_compile_s=compile_s, tune_timing_s=timing_s,
                     first_call_s=compile_s + timing_s)
        return entry

    def _oracle(self, plan, ops, nbuf, pick_entry, ours) -> dict:
        C, oracle = self.C, self.oracle_mod
        if not plan.oracle_configs and not plan.known:
            return dict(error=f"no candidates ({plan.cand_hash})")
        t = time.perf_counter()
        launcher = lambda config: C.kernel_launcher(ops, plan.problem, config)
        waited = [0.0]

        def compiled(config):
            start = time.perf_counter()
            try:
                return self._compiled(plan, config)
            finally:
                waited[0] += time.perf_counter() - start

        jobs = {plan.keys[c] for c in plan.oracle_configs if c in plan.keys}
        found = oracle.search(plan.oracle_configs, launcher=launcher, compiled=compiled, timer=self.timer,
                              nbuf=nbuf, deadline=self.deadline, top=3 if plan.cached else oracle.CAREFUL_TOP,
                              known=plan.known)
        search_s = time.perf_counter() - t
        timing_s = search_s - waited[0]  # the parent's own work: loading binaries and timing
        # Compile seconds of every job this shape needed (some were shared with earlier shapes).
        compile_cpu = sum(
            (self.compiler.futures[k].result() or {}).get("seconds") or 0.0
            for k in jobs if k in self.compiler.futures and self.compiler.futures[k].done()
            and not self.compiler.futures[k].cancelled()
        )
        # The pick is one of the candidates and was timed by the same careful method: reuse that
        # measurement for it, and if it beats the searched best (noise, or a config outside the
        # first pass's top few), the oracle is the pick. So pick / oracle <= 1, and == 1 when the
        # model found the best.
        pick = plan.pick
        pick_in = pick is not None and pick in set(plan.candidates)
        # (Not when the pick repacked its operands: that time is of another, padded product.)
        if pick_in and _ok(pick_entry) and not pick_entry.get("repacked"):
            found["careful"][pick] = pick_entry["seconds"]
        best = min(found["careful"], key=found["careful"].get) if found["careful"] else None
        best_s = found["careful"].get(best) if best is not None else None
        if best is None:
            return dict(error="no candidate ran", n_candidates=len(plan.candidates), search_s=search_s,
                        first_errors=[e for _, _, e in found["first"] if e][:5])
        compile_jobs = len(jobs)
        if plan.earlier:  # the whole search's cost: the earlier part plus this extension
            e = plan.earlier
            compile_jobs += e.get("compile_jobs") or 0
            compile_cpu += e.get("compile_cpu_s") or 0.0
            search_s += e.get("search_s") or 0.0
            timing_s += e.get("timing_s") or 0.0
        entry = dict(
            seconds=best_s, config=dataclasses.asdict(best), config_short=best.short(),
            method=f"careful time of the best {len(found['careful'])} of the first pass",
            n_candidates=len(plan.candidates), timed=len(found["first"]) - found["errors"],
            failed=found["errors"], compile_jobs=compile_jobs, compile_cpu_s=compile_cpu,
            search_s=search_s, timing_s=timing_s, complete=found["complete"],
            # What the search would cost on its own: its compiles spread over the pool, plus timing.
            first_call_s=compile_cpu / self.compiler.workers + timing_s,
            cached=bool(plan.cached), extended=len(plan.known), candidates_hash=plan.cand_hash,
            candidates_s=plan.candidates_s, pick_in_candidates=pick_in,
            pick_rank=oracle.rank_of(pick, found["first"]) if pick_in else None,
            top=[dict(config_short=c.short(), seconds=s) for c, s in sorted(found["careful"].items(),
                                                                            key=lambda x: x[1])],
        )
        if not plan.cached and found["complete"] and found["best"] is not None:
            ordered = sorted(found["careful"].items(), key=lambda x: x[1])
            self.cache.put(oracle.cache_key(plan.shape.key(), self.gpu_name, plan.cand_hash), dict(
                best=dataclasses.asdict(ordered[0][0]), best_s=ordered[0][1],
                top=[dataclasses.asdict(c) for c, _ in ordered],
                first=[[c.short(), s, e] for c, s, e in found["first"]],
                n_candidates=len(plan.candidates), compile_jobs=compile_jobs, compile_cpu_s=compile_cpu,
                search_s=search_s, timing_s=timing_s, workers=self.compiler.workers,
                date=self.meta["date"], gpu=self.gpu_name,
            ))
        elif plan.cached:  # the cost of the search is the one the cached run paid
            c = plan.cached
            entry.update(cached_search_s=c.get("search_s"), compile_jobs=c.get("compile_jobs"),
                         compile_cpu_s=c.get("compile_cpu_s"))
            if c.get("timing_s") is not None and c.get("compile_cpu_s") is not None:
                entry["first_call_s"] = c["compile_cpu_s"] / (c.get("workers") or 1) + c["timing_s"]
        return entry

    def _jax(self, shape, dots: dict, nbuf: int, estimate: float) -> dict:
        """{name: result} for each of `dots` in XLA's slope loop on the same operands: each loop
        compiled once, then timed `--jax-rounds` times in turn (the order reversed every other
        round; one slope moves by a few % between runs), the median of the rounds kept. A dot
        that fails to compile or run gets an error entry; the others still run."""
        import jax

        C = self.C
        rounds = max(1, self.args.jax_rounds)
        try:
            as_, bs = C.jax_operands(shape, nbuf)
        except Exception as error:  # noqa: BLE001 - e.g. out of memory: every dot gets the error
            return {name: dict(error=_short_error(error)) for name in dots}
        try:
            results, timers = {}, {}
            for name, dot in dots.items():
                try:
                    timers[name], results[name] = C.slope_timer_jax(dot, as_, bs, estimate_s=estimate)
                    results[name]["first_call_s"] = results[name]["compile_s"]
                except Exception as error:  # noqa: BLE001 - one contender failing must not end the run
                    results[name] = dict(error=_short_error(error))
            samples = {name: [] for name in timers}
            for index in range(rounds):
                for name in (list(timers) if index % 2 == 0 else reversed(list(timers))):
                    if name in samples:
                        try:
                            samples[name].append(timers[name](5))
                        except Exception as error:  # noqa: BLE001
                            results[name] = dict(error=_short_error(error))
                            del samples[name]
            for name, taken in samples.items():
                seconds = [t["seconds"] for t in taken]
                results[name].update(taken[-1], seconds=statistics.median(seconds), round_seconds=seconds)
                if rounds > 1:
                    results[name]["method"] += f"; median of {rounds} rounds timed in turn with {sorted(samples)}"
            return results
        finally:
            del as_, bs
            jax.clear_caches()


def _short_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:400]


def _np_dtype(name: str):
    import jax.numpy as jnp

    return jnp.dtype(name)


def _ok(entry) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("seconds"), (int, float)) and entry["seconds"] > 0


def _fmt_bw(bw) -> str:
    if isinstance(bw, dict) and bw.get("bytes_per_s"):
        return f"{bw['bytes_per_s'] / 1e12:.2f} TB/s"
    return "unknown"


def _line(record: dict) -> str:
    r = record.get("ratios", {})
    parts = [record["name"]]
    for name in ("jtblas", "oracle", "xla", "cublas"):
        c = record["contenders"].get(name, {})
        if _ok(c):
            parts.append(f"{name} {record['flops'] / c['seconds'] / 1e12:.0f}")
    if r.get("pick_over_oracle"):
        parts.append(f"pick/oracle {r['pick_over_oracle']:.2f}")
    return " ".join(parts)


def _json_default(value):
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, (set, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)

