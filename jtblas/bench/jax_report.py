"""The report of `jtblas bench`: statistics, `report.md` and the plots from the results files.

Inputs in the output directory: `results.json` (products through JAX, `through_jax`), optionally
`model_steps.json` (whole model steps) and `torch/results.json` (torch-launch contenders). Ratios
are speeds, jtblas ÷ XLA (> 1: jtblas faster), each product timed once; a product several
families share counts once overall and once in each family. Torch-launch ratios are reported in
their own section and never enter a through-JAX figure.
"""

from __future__ import annotations

import functools
import json
import math
from collections import defaultdict
from pathlib import Path

from jtblas import hardware
from jtblas.bench import report as torch_report
from jtblas.config import Config

WORST = 10
# Plans by kind, for how the model's predictions held (`model_accuracy`), in report order; and the
# predicted time below which a product is mostly launch and fill (the per-call costs of a jitted
# loop weigh there, docs/model.md), reported apart.
PLAN_KINDS = ("pointer", "TMA", "split-K", "K phases", "repacked")
SHORT_PREDICTION_S = 20e-6


def geomean(values) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def stats(values: list[float]) -> dict:
    """Geometric mean, min, max and the shares below 0.9 and 1.0 of speed ratios."""
    values = [v for v in values if v and v > 0]
    if not values:
        return dict(count=0, geomean=None, min=None, max=None, below_0_9=None, below_1_0=None)
    return dict(count=len(values), geomean=geomean(values), min=min(values), max=max(values),
                below_0_9=sum(v < 0.9 for v in values) / len(values),
                below_1_0=sum(v < 1.0 for v in values) / len(values))


def merge(parts: list[dict]) -> dict:
    """Several results files as one: products by key (a later file's wins), the first's meta."""
    if not parts:
        raise ValueError("no results to merge")
    by_key = {}
    for part in parts:
        if "products" not in part:
            raise ValueError("not a through-JAX results file (no 'products')")
        for record in part["products"]:
            by_key[record["key"]] = record
    meta = dict(parts[0].get("meta", {}))
    if len(parts) > 1:
        meta["merged_from"] = [p.get("meta", {}).get("date") for p in parts]
    return dict(meta=meta, products=list(by_key.values()))


def summary(results: dict) -> dict:
    """Everything the report states, as numbers."""
    products = results.get("products", [])
    timed = [r for r in products if r.get("speedup") and not r.get("error")]
    by_family, by_regime, by_family_regime = defaultdict(list), defaultdict(list), defaultdict(list)
    for r in timed:
        for family in r["families"]:
            by_family[family].append(r["speedup"])
        for regime in r["regimes"]:
            by_regime[regime].append(r["speedup"])
        for pair in set(_rows(r)):
            by_family_regime[pair].append(r["speedup"])
    worst = sorted(timed, key=lambda r: r["speedup"])[:WORST]
    return dict(
        all=stats([r["speedup"] for r in timed]),
        families={k: stats(v) for k, v in sorted(by_family.items())},
        regimes={k: stats(v) for k, v in sorted(by_regime.items())},
        family_regimes={f"{f} {g}": stats(v) for (f, g), v in sorted(by_family_regime.items())},
        worst=[_brief(r) for r in worst],
        model=model_accuracy(timed, results.get("meta", {}).get("hardware_model")),
        errors=[dict(key=r["key"], names=r["names"][:3], error=r.get("error") or _contender_errors(r))
                for r in products if r.get("error") or not r.get("speedup")],
        products=len(products),
        rows=sum(len(r["names"]) for r in products),
    )


def model_accuracy(timed: list[dict], hardware_name: str | None) -> list[dict]:
    """Measured ÷ predicted time of the model's plans (jtblas's through-JAX time over the plan's
    `predicted_s`), by plan kind (`plan_kind`), by whether the kernel's grid fills the GPU (one
    partial wave: fewer programs than SMs of `hardware_name`; not split for an unknown GPU) and by
    predicted time (under SHORT_PREDICTION_S or not): count, median, 10th and 90th percentiles.
    Groups with no product are left out."""
    try:
        sm_count = hardware.get(hardware_name).sm_count if hardware_name else None
    except ValueError:  # a description this jtblas does not have: no grid split
        sm_count = None
    groups = defaultdict(list)
    for record in timed:
        plan = record.get("plan", {})
        predicted, measured = plan.get("predicted_s"), record["contenders"]["jtblas"].get("seconds")
        if not (predicted and measured and plan.get("config")):
            continue
        config = Config.from_short(plan["config"])
        fill = None if sm_count is None else _programs(record, config) < sm_count
        groups[(plan_kind(config, plan.get("repack")), fill, predicted < SHORT_PREDICTION_S)].append(
            measured / predicted)
    order = {kind: i for i, kind in enumerate(PLAN_KINDS)}
    rows = []
    for kind, partial, short in sorted(groups, key=lambda g: (order[g[0]], g[1] is True, g[2])):
        ratios = sorted(groups[kind, partial, short])
        words = [kind] + ([] if partial is None else ["one partial wave" if partial else "fills the GPU"])
        length = f"{SHORT_PREDICTION_S * 1e6:.0f} µs"
        words.append(f"under {length}" if short else f"{length} or more")
        rows.append(dict(plans=", ".join(words), count=len(ratios), median=_quantile(ratios, 0.5),
                         p10=_quantile(ratios, 0.1), p90=_quantile(ratios, 0.9)))
    return rows


def plan_kind(config: Config, repack: str | None) -> str:
    """One of PLAN_KINDS for a plan's config and its repack (the record's "AB", "B", ... or None):
    copies first (repacked), then K phases, split-K, the TMA kernel, else the pointer kernel."""
    if repack:
        return "repacked"
    if config.k_phases > 1:
        return "K phases"
    if config.split_k > 1:
        return "split-K"
    return "TMA" if config.tma else "pointer"


def _programs(record: dict, config: Config) -> int:
    """Programs of the product's kernel: tiles of the caller's M and N (a batch's too), times the
    split or the K phases."""
    tiles = -(-record["M"] // config.block_m) * -(-record["N"] // config.block_n) * record.get("batch", 1)
    return tiles * config.k_slices


def _quantile(ordered: list[float], q: float) -> float:
    """The q-quantile of sorted values, linearly interpolated."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _rows(record: dict) -> list[tuple[str, str]]:
    """(family, regime) of every shape row the product stands for: as recorded, or (results
    written before rows were recorded) looked up by name in the package's shape sets."""
    if record.get("rows"):
        return [(row["family"], row["regime"]) for row in record["rows"]]
    known = _known_rows()
    return [known.get(name, (record["families"][0], record["regimes"][0])) for name in record["names"]]


@functools.cache
def _known_rows() -> dict[str, tuple[str, str]]:
    from jtblas.bench import shapes

    return {row.name: (row.family, row.regime) for row in shapes.load()}


def _contender_errors(record: dict) -> str:
    return "; ".join(f"{n}: {c['error']}" for n, c in record.get("contenders", {}).items() if c.get("error"))


def _brief(r: dict) -> dict:
    plan = r.get("plan", {})
    repack = f", repack {plan['repack']}" if plan.get("repack") else ""
    return dict(key=r["key"], names=r["names"][:3], speedup=r["speedup"],
                jtblas_us=r["contenders"]["jtblas"]["seconds"] * 1e6, xla_us=r["contenders"]["xla"]["seconds"] * 1e6,
                plan=(plan.get("config") or plan.get("error", "?")) + repack)


def _f(value, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def _stats_row(name: str, s: dict) -> str:
    return (f"| {name} | {s['count']} | {_f(s['geomean'])} | {_f(s['min'])} | {_f(s['max'])} | "
            f"{_pct(s['below_0_9'])} | {_pct(s['below_1_0'])} |")


STATS_HEADER = ["| {} | products | jtblas ÷ XLA (geomean) | min | max | below 0.9 | below 1.0 |",
                "|---|---|---|---|---|---|---|"]


def summary_text(results: dict) -> str:
    s = summary(results)
    a = s["all"]
    return (f"jtblas ÷ XLA through JAX: geomean {_f(a['geomean'])} over {a['count']} products "
            f"({_pct(a['below_0_9'])} below 0.9, {_pct(a['below_1_0'])} below 1.0; min {_f(a['min'])}, "
            f"max {_f(a['max'])}); {len(s['errors'])} not timed")


def markdown(results: dict, model_steps: dict | None = None, torch_results: dict | None = None) -> str:
    s = summary(results)
    meta = results.get("meta", {})
    versions = ", ".join(f"{k} {v}" for k, v in (meta.get("versions") or {}).items() if v)
    out = [f"# jtblas bench — {meta.get('date', '?')}, {meta.get('device', '?')}", "",
           f"Versions: {versions}; jtblas source: commit {meta.get('source_commit') or 'unknown'}, "
           f"files sha256 {meta.get('source_sha256') or 'unknown'}.", "",
           f"Method: {meta.get('method', '?')}.", "",
           f"{s['products']} distinct products ({s['rows']} shape rows). {summary_text(results)}.", ""]
    if meta.get("stopped"):
        out += [f"**Stopped early**: {meta['stopped']}.", ""]
    out += ["## By regime", ""] + [h.format("regime") for h in STATS_HEADER]
    out += [_stats_row(k, v) for k, v in s["regimes"].items()] + [_stats_row("**all**", s["all"]), ""]
    out += ["## By family", ""] + [h.format("family") for h in STATS_HEADER]
    out += [_stats_row(k, v) for k, v in s["families"].items()] + [""]
    out += ["## By family and regime", ""] + [h.format("family, regime") for h in STATS_HEADER]
    out += [_stats_row(k, v) for k, v in s["family_regimes"].items()] + [""]
    out += [f"## The {WORST} slowest against XLA", "",
            "| product | rows (first) | jtblas µs | XLA µs | jtblas ÷ XLA | plan |", "|---|---|---|---|---|---|"]
    out += [f"| {w['key']} | {', '.join(w['names'])} | {w['jtblas_us']:.1f} | {w['xla_us']:.1f} | "
            f"{w['speedup']:.2f} | {w['plan']} |" for w in s["worst"]] + [""]
    if s["model"]:
        out += ["## How the model's predictions held", "",
                "jtblas's measured time ÷ the time the model predicted for its plan (> 1: slower than "
                "predicted), by plan kind, by whether the grid fills the GPU and by predicted length.", "",
                "| plans | products | median | 10th percentile | 90th percentile |", "|---|---|---|---|---|"]
        out += [f"| {m['plans']} | {m['count']} | {m['median']:.2f} | {m['p10']:.2f} | {m['p90']:.2f} |"
                for m in s["model"]] + [""]
    if s["errors"]:
        out += ["## Not timed", ""] + [f"- {e['key']} ({', '.join(e['names'])}): {e['error']}" for e in s["errors"]]
        out += [""]
    if model_steps:
        from jtblas.bench import model_steps as steps_mod

        out += ["## Whole model steps", "", steps_mod.markdown(model_steps), ""]
    if torch_results:
        ts = torch_report.summary(torch_results)
        out += ["## Torch launches (cuBLAS, the exhaustive oracle, the tutorial's autotune)", "",
                "Our kernels launched on torch tensors in CUDA graphs, against `torch.mm` and each other: a "
                "search instrument, not what a JAX user gets. These ratios are torch launch against torch launch.",
                "", "```", json.dumps(dict(shapes=ts["shapes"], pick_over_oracle=ts["pick_over_oracle"],
                                          geomeans=ts["geomeans"]), indent=1), "```", ""]
    out += ["## All products", "",
            "| product | families | regimes | jtblas µs | XLA µs | jtblas ÷ XLA | jtblas TFLOP/s | XLA TFLOP/s "
            "| plan | first call s (jtblas / XLA) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(results.get("products", []), key=lambda r: (r["families"][0], r["regimes"][0], r["flops"])):
        c = r.get("contenders", {})
        ours, xla = c.get("jtblas", {}), c.get("xla", {})
        plan = r.get("plan", {})
        row = [r["key"], ", ".join(r["families"]), ", ".join(r["regimes"]),
               _f(_us(ours.get("seconds")), 1), _f(_us(xla.get("seconds")), 1), _f(r.get("speedup")),
               _f(_tflops(r, ours), 0), _f(_tflops(r, xla), 0),
               (plan.get("config") or "") + (f" repack {plan['repack']}" if plan.get("repack") else ""),
               f"{_f(ours.get('first_call_s'), 1)} / {_f(xla.get('first_call_s'), 1)}"]
        if r.get("error"):
            row[5] = "error"
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out) + "\n"


def _us(seconds):
    return seconds * 1e6 if seconds else None


def _tflops(record: dict, entry: dict):
    return record["flops"] / entry["seconds"] / 1e12 if entry.get("seconds") else None


def plots(results: dict, out_dir: Path, torch_results: dict | None = None) -> dict:
    """vs_xla_by_family.png, tflops_vs_size.png and (with torch results) pick_vs_oracle.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = summary(results)
    device = results.get("meta", {}).get("device", "")
    paths = {}
    families = list(s["families"])
    fig, ax = plt.subplots(figsize=(max(7, 0.45 * len(families) + 2), 4.5))
    if families:
        values = [s["families"][f]["geomean"] or 0 for f in families]
        ax.bar(range(len(families)), values, color=["tab:green" if v >= 1 else "tab:red" for v in values])
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xticks(range(len(families)))
        ax.set_xticklabels(families, rotation=50, ha="right", fontsize=8)
    ax.set_ylabel("jtblas ÷ XLA, speed (geomean)")
    ax.set_title(f"jtblas.matmul vs XLA's dot through jax.jit, per family ({device})")
    ax.grid(axis="y", alpha=0.3)
    paths["vs_xla_by_family"] = torch_report.save_figure(fig, out_dir / "vs_xla_by_family.png", plt)

    timed = [r for r in results.get("products", []) if r.get("speedup") and not r.get("error")]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for name, marker in (("xla", "x"), ("jtblas", ".")):
        pts = [(r["flops"], _tflops(r, r["contenders"][name])) for r in timed]
        if pts:
            ax.scatter(*zip(*pts), s=12, marker=marker, label="XLA dot" if name == "xla" else "jtblas.matmul",
                       alpha=0.7)
    ax.set_xscale("log")
    ax.set_xlabel("FLOPs per product")
    ax.set_ylabel("TFLOP/s (through JAX)")
    ax.set_title(f"TFLOP/s against size, every product ({device})")
    ax.grid(alpha=0.3)
    if timed:
        ax.legend()
    paths["tflops_vs_size"] = torch_report.save_figure(fig, out_dir / "tflops_vs_size.png", plt)
    if torch_results:
        paths.update({k: v for k, v in torch_report.plots(torch_results, out_dir / "torch").items()
                      if k == "pick_vs_oracle"})
    return paths


def write_report(out_dir) -> dict:
    """report.md, summary.json and the plots in `out_dir`, from the results files there."""
    out_dir = Path(out_dir)
    results_path = out_dir / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else dict(meta={}, products=[])
    steps_path = out_dir / "model_steps.json"
    model_steps = json.loads(steps_path.read_text()) if steps_path.exists() else None
    torch_path = out_dir / "torch" / "results.json"
    torch_results = json.loads(torch_path.read_text()) if torch_path.exists() else None
    paths = {"report": out_dir / "report.md", "summary": out_dir / "summary.json"}
    paths["report"].write_text(markdown(results, model_steps, torch_results))
    paths["summary"].write_text(json.dumps(summary(results), indent=1))
    paths.update(plots(results, out_dir, torch_results))
    return paths
