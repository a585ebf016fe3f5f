"""The model's choice in words: every candidate ranked with its terms, and why the winner won.

Pure Python: no JAX, no Triton.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jtblas.config import Config, Problem
from jtblas.gpus import Hardware
from jtblas.model import cost, repack, resources
from jtblas.model.select import microseconds as _us
from jtblas.model.select import rank


# The columns of `Explanation.format` (and `jtblas explain`), each defined; times in µs unless
# the name says ns. `jtblas explain --help` and docs/model.md print this legend.
COLUMNS: dict[str, str] = {
    "rank": "position in the model's ranking; 1 is the pick",
    "config": "block_m x block_n x block_k, wN warps, sN pipeline stages, gN group_m; kN split-K, "
              "pN K phases, swap (C^T = B^T A^T), tma (the TMA kernel)",
    "pred_us": "predicted time of the product: launch + max(sm, memory) (+ the split-K reduction)",
    "TFLOP/s": "useful rate the prediction implies: 2*M*N*K / pred_us",
    "bound": "what limits it: launch, dram, l2, latency, fill, mma+smem, compute, smem, load-port",
    "tiles": "output tiles: ceil(M / block_m) * ceil(N / block_n)",
    "t/SM": "tiles (programs, with split-K) on the busiest SM: the wave quantization",
    "p/SM": "programs resident on one SM at once (occupancy, from shared memory, registers, threads)",
    "pad%": "share of the tiles' MMA work that falls outside the problem (padded tails)",
    "sm_thr": "busiest SM's time when its programs overlap perfectly: t/SM * (K steps * step + epilogue)",
    "sm_lat": "busiest SM's time as a chain: ceil(t/SM / p/SM) * (fill + K loop + epilogue) of one tile",
    "dram": "DRAM traffic (operands after L2 reuse, C) / DRAM bandwidth",
    "l2": "L2 traffic (every tile load, C) / L2 bandwidth",
    "L2hit%": "predicted share of the tile loads served by L2",
    "mma_ns": "one K step of one program on the tensor cores (or FMA units)",
    "smem_ns": "one K step's shared-memory reads of the operand tiles",
    "load_ns": "one K step's loads from global memory through the SM's load port",
    "lat_ns": "least time per K step that the loads in flight allow: memory latency / loads in flight",
}


def legend() -> str:
    """The columns of `Explanation.format`, one line each."""
    width = max(map(len, COLUMNS))
    return "\n".join(f"  {name.ljust(width)}  {text}" for name, text in COLUMNS.items())


@dataclasses.dataclass(frozen=True)
class Explanation:
    """The ranked candidates of one problem, each with its predicted time and terms.

    Attributes:
      problem: the problem ranked.
      hardware: the GPU description used.
      ranked: one `cost.Estimate` per candidate of the problem the kernel runs (the padded one
        when the plan repacks; copies not included), fastest first; `ranked[0]` is the selection.
      plan: the `repack.ProductPlan` (whether misaligned operands are copied into padded buffers, with
        the plain and repacked predicted times), or None.
    """

    problem: Problem
    hardware: Hardware
    ranked: list[cost.Estimate]
    plan: Any = None

    @property
    def winner(self) -> cost.Estimate:
        return self.ranked[0]

    @property
    def config(self) -> Config:
        """The selected configuration."""
        return self.ranked[0].config

    def tflops(self, estimate: cost.Estimate) -> float:
        """Useful TFLOP/s the estimate implies (2·M·N·K / predicted seconds / 1e12)."""
        return self.problem.flops / estimate.predicted_seconds / 1e12

    def why(self) -> str:
        """A sentence in words: what bounds the winner and why the best other tile shape lost."""
        win = self.winner
        c = win.config
        if c.split_k > 1:
            grid, unit = f"{win.programs} programs ({win.tiles} tiles x {c.split_k} splits)", "program(s)"
        else:
            grid, unit = f"{win.tiles} tiles", "tile(s)"
        text = (
            f"{c.short()} wins with {_us(win.predicted_seconds)} ({self.tflops(win):.0f} TFLOP/s): "
            f"{_bound_words(win)}; {grid} on {self.hardware.sm_count} SMs "
            f"({win.programs_per_sm} per SM) leave the busiest SM {win.tiles_per_sm} {unit}"
        )
        if win.padding_waste > 0.005:
            text += f", {100 * win.padding_waste:.0f}% of its MMA work is tail padding"
        text += ("." + self._split_words() + self._phase_words() + self._swap_words() + self._kernel_words()
                 + self._epilogue_words())
        if self.plan is not None and self.plan.reason:
            text += f" Repacking: {self.plan.reason}."  # times above are the kernel's, copies apart
        shape = (c.block_m, c.block_n, c.block_k)
        other = next(
            (e for e in self.ranked[1:]
             if (e.config.block_m, e.config.block_n, e.config.block_k) != shape
             and e.predicted_seconds > win.predicted_seconds),
            None,
        )
        if other is not None:
            slower = 100 * (other.predicted_seconds / win.predicted_seconds - 1)
            text += (
                f" The best other tile shape, {other.config.short()}, predicts "
                f"{_us(other.predicted_seconds)} ({slower:.1f}% slower): {_bound_words(other)}."
            )
        return text

    def _split_words(self) -> str:
        """Why the winner splits K, or why it does not although split-K was searched."""
        win = self.winner
        sms = self.hardware.sm_count
        if win.config.split_k > 1:
            return (
                f" K is split {win.config.split_k} ways because {win.tiles} output tile(s) alone would "
                f"keep only {min(win.tiles, sms)} of {sms} SMs busy: {win.programs} programs of "
                f"{win.k_steps} K steps each write {_megabytes(win.partial_bytes)} of fp32 partials, "
                f"which a second kernel sums in {_us(win.reduction)} (launch included)."
            )
        split = next((e for e in self.ranked if e.config.split_k > 1), None)
        if split is None:
            return ""
        slower = 100 * (split.predicted_seconds / win.predicted_seconds - 1)
        return (
            f" Not split: the best split-K candidate, {split.config.short()}, predicts "
            f"{_us(split.predicted_seconds)} ({slower:.1f}% slower), its {_megabytes(split.partial_bytes)} "
            f"of partials and the reduction ({_us(split.reduction)}) costing more than the idle SMs it fills."
        )

    def _phase_words(self) -> str:
        """What the winner's K phases cost (`Config.k_phases`): their partials, the sum, and the
        phase-major copy of A."""
        win = self.winner
        if win.config.k_phases == 1:
            return ""
        copy = f", after a phase-major copy of A ({_us(win.phase_copy)})" if win.phase_copy else ""
        return (
            f" {win.config.k_phases} K phases load the misaligned rows along K "
            f"{resources.phase_vector_bytes(self.problem, win.config.k_phases)} bytes at a time{copy}; "
            f"their {_megabytes(win.partial_bytes)} of fp32 partials are summed in {_us(win.reduction)}."
        )

    def _swap_words(self) -> str:
        """Why the winner's tile is swapped (`Config.swap_ab`), or why it is not although its
        swapped twin was ranked: what the twin predicts and how each runs its MMAs."""
        win = self.winner
        if win.config.tma:  # the TMA kernel does not swap
            return ""
        toggled = dataclasses.replace(win.config, swap_ab=not win.config.swap_ab)
        twin = next((e for e in self.ranked if e.config == toggled), None)
        if twin is None:
            return ""
        slower = 100 * (twin.predicted_seconds / win.predicted_seconds - 1)
        if win.config.swap_ab:
            return (
                f" Swapped (Cᵀ = Bᵀ·Aᵀ): its {win.config.block_n} columns are the MMA's rows, so it runs "
                f"wgmma (K steps of {win.step_chain * 1e9:.0f} ns); unswapped, mma.sync predicts "
                f"{_us(twin.predicted_seconds)} ({slower:.1f}% slower; K steps of {twin.step_chain * 1e9:.0f} ns)."
            )
        return (
            f" Not swapped: the swapped twin (wgmma) predicts {_us(twin.predicted_seconds)} "
            f"({slower:.1f}% slower{', a tie goes to the unswapped tile' if slower == 0 else ''})."
        )

    def _epilogue_words(self) -> str:
        """What the winner's fused epilogue costs: its reads and activation per tile, and the rate
        its resident warps issue the activation at; or that a split's reduction kernel applies it."""
        problem, win = self.problem, self.winner
        if not problem.has_epilogue:
            return ""
        parts = [name for name, present in (("bias", problem.bias_dtype), (problem.activation, problem.activation),
                                            ("residual", problem.residual_dtype)) if present]
        what = ", ".join(parts)
        if win.config.k_slices > 1:
            return f" Its epilogue ({what}) runs in the kernel that sums the partials."
        text = f" Its fused epilogue ({what}): {_us(win.epilogue_work)} of reads and activation per tile"
        if problem.activation:
            text += (f", the activation at {100 * win.activation_issue_rate:.0f}% of the SM's fp32 rate "
                     "(the rate its resident warps issue it at)")
        return text + "."

    def _kernel_words(self) -> str:
        """Which kernel runs the winner, against the same config on the other kernel (where both
        can run it): the TMA kernel's shorter K step and its latency chain (fill and store once per
        program, a fused epilogue's reads and activation per tile) against its set-up per launch."""
        win = self.winner
        on_pointer = dataclasses.replace(win.config, tma=False)
        twin = next((e for e in self.ranked if e.config.tma != win.config.tma
                     and dataclasses.replace(e.config, tma=False) == on_pointer), None)
        if twin is None:
            return ""
        slower = 100 * (twin.predicted_seconds / win.predicted_seconds - 1)
        kernel, other = ("TMA", "pointer") if win.config.tma else ("pointer", "TMA")
        return (
            f" The {kernel} kernel: the same config on the {other} kernel predicts {_us(twin.predicted_seconds)} "
            f"({slower:.1f}% slower; K steps of {win.step * 1e9:.0f} against {twin.step * 1e9:.0f} ns, "
            f"latency chain per SM {_us(win.sm_latency)} against {_us(twin.sm_latency)}, "
            f"launch {_us(win.launch)} against {_us(twin.launch)})."
        )

    def format(self, top: int = 10) -> str:
        """The top-`top` candidates as a table (times in µs), then `why()`."""
        kernel = self.plan.kernel_problem if self.plan is not None else self.problem
        runs = f" (repacked: the kernel runs {kernel.short()})" if kernel != self.problem else ""
        header = (
            f"{self.problem.short()} on {self.hardware.name} ({self.hardware.full_name}){runs}: "
            f"{len(self.ranked)} candidates\n"
            f"hardware: {self.hardware.source}\n"
        )
        columns = tuple(COLUMNS)
        rows = [columns]
        for position, e in enumerate(self.ranked[:top], start=1):
            rows.append((
                str(position), e.config.short(), f"{e.predicted_seconds * 1e6:.2f}",
                f"{self.tflops(e):.0f}", e.bound, str(e.tiles), str(e.tiles_per_sm),
                str(e.programs_per_sm), f"{100 * e.padding_waste:.0f}",
                f"{e.sm_throughput * 1e6:.2f}", f"{e.sm_latency * 1e6:.2f}", f"{e.dram * 1e6:.2f}",
                f"{e.l2 * 1e6:.2f}", f"{100 * e.l2_hit_rate:.0f}", f"{e.step_mma * 1e9:.1f}",
                f"{e.step_smem * 1e9:.1f}", f"{e.step_load * 1e9:.1f}", f"{e.step_latency * 1e9:.1f}",
            ))
        widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
        lines = ["  ".join(cell.rjust(width) if i != 1 else cell.ljust(width)
                           for i, (cell, width) in enumerate(zip(row, widths))) for row in rows]
        return header + "\n".join(lines) + "\n" + self.why()

    def __str__(self) -> str:
        return self.format()


def explain_problem(problem: Problem, hardware: Hardware) -> Explanation:
    """Every candidate of the planned kernel problem ranked with its terms, and the repacking plan;
    `ranked[0].config` is the plan's config (`select_for_problem`'s pick when it does not repack)."""
    plan = repack.plan_for_problem(problem, hardware)
    return Explanation(problem=problem, hardware=hardware, ranked=rank(plan.kernel_problem, hardware), plan=plan)


def _megabytes(nbytes: float) -> str:
    """Bytes in MB with one decimal, or in KB below 0.1 MB (a decode product's partials)."""
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e5 else f"{nbytes / 1e3:.0f} KB"


def _bound_words(e: cost.Estimate) -> str:
    bound = e.bound
    if bound == "launch":
        return f"launch-bound ({_us(e.launch)} launch)"
    if bound in ("dram", "l2"):
        seconds = e.dram if bound == "dram" else e.l2
        traffic = e.dram_bytes if bound == "dram" else e.l2_bytes
        return f"{bound}-bound ({traffic / 1e6:.1f} MB in {_us(seconds)}, L2 hit rate {100 * e.l2_hit_rate:.0f}%)"
    if bound == "latency":
        return (f"latency-bound ({e.config.num_stages} stages allow one K step per "
                f"{e.step_latency * 1e9:.0f} ns, more than its {e.step * 1e9:.0f} ns of work; "
                f"{e.programs_per_sm} program(s) per SM to overlap)")
    if bound == "fill":
        return (f"bound by per-tile start, pipeline fill and epilogue ({_us(e.fill + e.epilogue)} per tile, "
                f"{e.programs_per_sm} program(s) per SM to overlap them; K steps "
                f"{e.step * 1e9:.0f} ns each)")
    if bound == "mma+smem":
        return (f"bound by its warps taking turns between MMAs and shared-memory reads (one 16-row "
                f"warp per scheduler: {e.step_chain * 1e9:.0f} ns per K step, the SM's pipes "
                f"{e.step * 1e9:.0f} ns; {e.programs_per_sm} program(s) per SM to overlap)")
    unit = "wgmma" if e.uses_wgmma else "mma.sync/FMA"
    text = (f"{bound}-bound on {unit} (per K step: MMA {e.step_mma * 1e9:.0f} ns, shared memory "
            f"{e.step_smem * 1e9:.0f} ns, loads {e.step_load * 1e9:.0f} ns; busiest SM {_us(e.sm)}")
    if e.sm_latency > e.sm_throughput:
        text += f", with {_us(e.fill + e.epilogue)} of fill and epilogue per tile exposed"
    return text + ")"
