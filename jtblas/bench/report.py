"""Table, summary and plots from a `jtblas bench` results JSON (runs on any machine, no GPU).

    python -m jtblas.bench --report-only bench-out/results.json --out bench-out

Ratios are speed ratios, higher is better for jtblas:
  pick_over_oracle    oracle time / pick time      (≤ 1; 1 means the model found the best config;
                                                    left out where the model repacks operands: the
                                                    oracle searches the caller's problem only)
  repack_over_oracle  the same ratio where the model repacks (> 1: the copies plus the kernel on
                      the padded problem beat every config on the caller's operands)
  jtblas_over_xla     XLA time / jtblas time       (> 1: jtblas is faster than XLA's dot)
  jtblas_over_cublas  cuBLAS time / jtblas time
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

CONTENDERS = ("jtblas", "oracle", "xla", "cublas", "tutorial", "nvmmh")
LABELS = {"jtblas": "jtblas (model)", "oracle": "oracle (exhaustive)", "xla": "XLA dot", "cublas": "cuBLAS",
          "tutorial": "tutorial autotune", "nvmmh": "nvMatmulHeuristics"}
SMALL_M = 16  # shapes with M ≤ this are memory-bound: also report GB/s against the copy bandwidth


def load(results) -> dict:
    if isinstance(results, dict):
        return results
    return json.loads(Path(results).read_text())


def merge(parts: list[dict]) -> dict:
    """Results of several processes (`jtblas bench --shard`, one per GPU) as one: the first's
    meta, each part's own meta under meta["parts"], the shapes in the order of the parts."""
    if not parts:
        raise ValueError("no results to merge")
    meta = dict(parts[0].get("meta", {}))
    meta["parts"] = [p.get("meta", {}) for p in parts]
    not_run = [name for p in parts for name in p.get("meta", {}).get("not_run") or []]
    meta["not_run"] = not_run or None
    meta["stopped"] = "; ".join(p["meta"]["stopped"] for p in parts if p.get("meta", {}).get("stopped")) or None
    elapsed = [p.get("meta", {}).get("elapsed_s") for p in parts]
    meta["elapsed_s"] = max((e for e in elapsed if e is not None), default=None)
    return dict(meta=meta, shapes=[record for p in parts for record in p.get("shapes", [])])


def seconds(record: dict, name: str) -> float | None:
    entry = record.get("contenders", {}).get(name) or {}
    value = entry.get("seconds")
    return value if isinstance(value, (int, float)) and value > 0 and math.isfinite(value) else None


def tflops(record: dict, name: str) -> float | None:
    t = seconds(record, name)
    return record["flops"] / t / 1e12 if t else None


def gbps(record: dict, name: str) -> float | None:
    t = seconds(record, name)
    return record["bytes"] / t / 1e9 if t else None


def _ratio(numerator, denominator):
    return numerator / denominator if numerator and denominator else None


def ratios(record: dict) -> dict:
    """Speed ratios of this shape (None where a side is missing)."""
    pick = seconds(record, "jtblas")
    repacked = bool((record.get("contenders", {}).get("jtblas") or {}).get("repacked"))
    over_oracle = _ratio(seconds(record, "oracle"), pick)
    return dict(
        pick_over_oracle=None if repacked else over_oracle,
        repack_over_oracle=over_oracle if repacked else None,
        jtblas_over_xla=_ratio(seconds(record, "xla"), pick),
        jtblas_over_cublas=_ratio(seconds(record, "cublas"), pick),
        oracle_over_xla=_ratio(seconds(record, "xla"), seconds(record, "oracle")),
        oracle_over_cublas=_ratio(seconds(record, "cublas"), seconds(record, "oracle")),
        tutorial_over_oracle=_ratio(seconds(record, "oracle"), seconds(record, "tutorial")),
        nvmmh_over_oracle=_ratio(seconds(record, "oracle"), seconds(record, "nvmmh")),
        jax_over_torch_launch=_ratio(seconds(record, "jtblas"), seconds(record, "jtblas_jax")),
        # Like for like: jtblas.matmul and XLA's dot in the same jitted slope loop (spot checks).
        jtblas_jax_over_xla=_ratio(seconds(record, "xla"), seconds(record, "jtblas_jax")),
    )


def decode_rows(records: list[dict]) -> list[dict]:
    """Small-M shapes (M ≤ SMALL_M) with a same-size copy measured: the weight's bytes per second
    through jtblas, cuBLAS and XLA against a device-to-device copy of the weight's bytes (counted
    read + write: the practical ceiling at that size), largest weight first."""
    rows = []
    for r in records:
        copy = r.get("copy_same_bytes") or {}
        copy_bw = copy.get("bytes_per_s")
        if r["M"] > SMALL_M or not copy_bw:
            continue
        row = dict(name=r["name"], shape=_shape(r), weight_bytes=copy["bytes"], copy_bytes_per_s=copy_bw)
        for name in ("jtblas", "cublas", "xla"):
            t = seconds(r, name)
            row[name] = dict(bytes_per_s=copy["bytes"] / t, copy_ratio=copy["bytes"] / t / copy_bw) if t else None
        rows.append(row)
    return sorted(rows, key=lambda x: -x["weight_bytes"])


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def percentile(values, q: float) -> float | None:
    values = sorted(v for v in values if v)
    if not values:
        return None
    pos = (len(values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def summary(results) -> dict:
    data = load(results)
    records = [r for r in data.get("shapes", []) if r.get("contenders")]
    rs = [(r, ratios(r)) for r in records]
    pick = [(x["pick_over_oracle"], r) for r, x in rs if x["pick_over_oracle"]]
    by_group = defaultdict(list)
    for r, x in rs:
        by_group[r.get("group", r.get("set"))].append(x)
    groups = {
        g: dict(
            shapes=len(xs),
            jtblas_over_xla=geomean(x["jtblas_over_xla"] for x in xs),
            jtblas_over_cublas=geomean(x["jtblas_over_cublas"] for x in xs),
            jtblas_jax_over_xla=geomean(x["jtblas_jax_over_xla"] for x in xs),
            pick_over_oracle=geomean(x["pick_over_oracle"] for x in xs),
            repacked=sum(1 for x in xs if x["repack_over_oracle"]),
        )
        for g, xs in sorted(by_group.items())
    }
    errors = defaultdict(int)
    for r in records:
        for name, entry in r["contenders"].items():
            if isinstance(entry, dict) and entry.get("error"):
                errors[name] += 1
    def first_call(name):
        values = [(r["contenders"].get(name) or {}).get("first_call_s") for r in records]
        values = [v for v in values if isinstance(v, (int, float))]
        return dict(median=statistics.median(values), total=sum(values)) if values else None
    return dict(
        shapes=len(records),
        pick_over_oracle=dict(
            count=len(pick), geomean=geomean(v for v, _ in pick), p10=percentile([v for v, _ in pick], 0.1),
            min=min((v for v, _ in pick), default=None),
            worst=[dict(name=r["name"], shape=_shape(r), ratio=v,
                        pick=(r["contenders"].get("jtblas") or {}).get("config_short"),
                        best=(r["contenders"].get("oracle") or {}).get("config_short"))
                   for v, r in sorted(pick, key=lambda x: x[0])[:10]],
        ),
        geomeans={k: geomean(x[k] for _, x in rs) for k in (
            "jtblas_over_xla", "jtblas_over_cublas", "oracle_over_xla", "oracle_over_cublas",
            "tutorial_over_oracle", "nvmmh_over_oracle", "jax_over_torch_launch", "jtblas_jax_over_xla",
            "repack_over_oracle")},
        repacked=sum(1 for _, x in rs if x["repack_over_oracle"]),
        groups=groups,
        decode=_decode_summary(decode_rows(records)),
        first_call_s={name: first_call(name) for name in CONTENDERS},
        errors=dict(errors),
    )


def _decode_summary(rows: list[dict]) -> dict:
    """jtblas's copy ratio by weight size: ≥ 50 MB, 20-50 MB and < 20 MB (the decode targets' classes)."""
    classes = {"weight >= 50 MB": (50e6, math.inf), "20-50 MB": (20e6, 50e6), "< 20 MB": (0, 20e6)}
    out = {}
    for label, (lo, hi) in classes.items():
        ratios_ = [r["jtblas"]["copy_ratio"] for r in rows if lo <= r["weight_bytes"] < hi and r["jtblas"]]
        out[label] = dict(shapes=len(ratios_), geomean=geomean(ratios_), min=min(ratios_, default=None))
    return out


def _shape(r: dict) -> str:
    return f"{r['M']}x{r['N']}x{r['K']} {r['layout']}"


def _f(value, digits=2, suffix="") -> str:
    return "–" if value is None else f"{value:.{digits}f}{suffix}"


def summary_text(results) -> str:
    s = summary(results)
    p = s["pick_over_oracle"]
    g = s["geomeans"]
    lines = [
        f"shapes: {s['shapes']}",
        (f"pick/oracle: geomean {_f(p['geomean'], 3)}, p10 {_f(p['p10'], 3)}, min {_f(p['min'], 3)} "
         f"over {p['count']} shapes"),
        f"jtblas/XLA geomean {_f(g['jtblas_over_xla'], 3)}; jtblas/cuBLAS geomean {_f(g['jtblas_over_cublas'], 3)}",
        f"jtblas through JAX/XLA, same loop (spot checks) geomean {_f(g['jtblas_jax_over_xla'], 3)}",
    ]
    return "\n".join(lines)


def markdown(results) -> str:
    data = load(results)
    meta = data.get("meta", {})
    records = [r for r in data.get("shapes", []) if r.get("contenders")]
    s = summary(data)
    copy_bw = (meta.get("copy_bandwidth") or {}).get("bytes_per_s")
    out = ["# jtblas bench", ""]
    versions = ", ".join(f"{k} {v}" for k, v in (meta.get("versions") or {}).items() if v)
    out.append(f"{meta.get('gpu', '?')}, {meta.get('date', '?')}; {versions}.")
    if copy_bw:
        out.append(f"Device-to-device copy bandwidth (read + write): {copy_bw / 1e12:.2f} TB/s.")
    if meta.get("xla_empty_iteration_s") is not None and not isinstance(meta.get("xla_empty_iteration_s"), dict):
        out.append(f"XLA slope loop, empty iteration: {meta['xla_empty_iteration_s'] * 1e6:.2f} µs "
                   "(included in every XLA and jtblas-through-JAX number).")
    if meta.get("stopped"):
        out.append(f"**Run stopped early** ({meta['stopped']}).")
    out += ["", "Timing methods: " + "; ".join(f"{k}: {v}" for k, v in (meta.get("methods") or {}).items()), ""]

    p = s["pick_over_oracle"]
    g = s["geomeans"]
    out += [
        "## Summary", "",
        "Speed ratios (higher is better for the first-named); geometric means over the shapes where both ran.", "",
        "| statistic | value |", "|---|---|",
        f"| shapes | {s['shapes']} |",
        f"| pick ÷ oracle, geomean | {_f(p['geomean'], 3)} (over {p['count']}) |",
        f"| pick ÷ oracle, 10th percentile | {_f(p['p10'], 3)} |",
        f"| pick ÷ oracle, min | {_f(p['min'], 3)} |",
        f"| jtblas ÷ XLA | {_f(g['jtblas_over_xla'], 3)} |",
        f"| jtblas ÷ cuBLAS | {_f(g['jtblas_over_cublas'], 3)} |",
        f"| oracle ÷ XLA | {_f(g['oracle_over_xla'], 3)} |",
        f"| oracle ÷ cuBLAS | {_f(g['oracle_over_cublas'], 3)} |",
        f"| tutorial autotune ÷ oracle | {_f(g['tutorial_over_oracle'], 3)} |",
        f"| nvMatmulHeuristics ÷ oracle | {_f(g['nvmmh_over_oracle'], 3)} |",
        f"| jtblas via torch launch ÷ via JAX (spot checks; ≈1 expected) | {_f(g['jax_over_torch_launch'], 3)} |",
        f"| jtblas through JAX ÷ XLA, both in the same jitted loop (spot checks) | "
        f"{_f(g['jtblas_jax_over_xla'], 3)} |",
        f"| repacked picks ÷ oracle on the caller's operands ({s['repacked']} shapes, not in pick ÷ oracle) | "
        f"{_f(g['repack_over_oracle'], 3)} |",
        "",
    ]
    fc = s["first_call_s"]
    out += ["First call (compile, tuning or search) seconds, median / total over shapes:", ""]
    out += ["| contender | median s | total s |", "|---|---|---|"]
    for name in CONTENDERS:
        if fc.get(name):
            out.append(f"| {LABELS[name]} | {fc[name]['median']:.3f} | {fc[name]['total']:.1f} |")
    out += ["", "### Worst ten pick ÷ oracle", "", "| shape | M×N×K layout | pick÷oracle | pick | best |",
            "|---|---|---|---|---|"]
    for w in p["worst"]:
        out.append(f"| {w['name']} | {w['shape']} | {w['ratio']:.3f} | {w['pick']} | {w['best']} |")
    out += ["", "### By group", "",
            "| group | shapes | jtblas÷XLA | jtblas÷cuBLAS | through JAX ÷ XLA, same loop | pick÷oracle |",
            "|---|---|---|---|---|---|"]
    for name, grp in s["groups"].items():
        out.append(f"| {name} | {grp['shapes']} | {_f(grp['jtblas_over_xla'], 3)} | "
                   f"{_f(grp['jtblas_over_cublas'], 3)} | {_f(grp['jtblas_jax_over_xla'], 3)} | "
                   f"{_f(grp['pick_over_oracle'], 3)} |")
    rows = decode_rows(records)
    if rows:
        out += ["", "### Small M: the weight streamed vs a copy of the same bytes", "",
                ("Bytes of the weight (K×N) per second; the copy is `dst.copy_(src)` of the weight's bytes in "
                 "the same run (read + write counted), the practical ceiling at that size."), "",
                "| shape | M×N×K layout | weight MB | copy GB/s | jtblas GB/s (÷ copy) | cuBLAS GB/s (÷ copy) "
                "| XLA GB/s (÷ copy) |", "|---|---|---|---|---|---|---|"]
        for row in rows:
            cells = [f"{row[c]['bytes_per_s'] / 1e9:.0f} ({row[c]['copy_ratio']:.0%})" if row[c] else "–"
                     for c in ("jtblas", "cublas", "xla")]
            out.append(f"| {row['name']} | {row['shape']} | {row['weight_bytes'] / 1e6:.0f} | "
                       f"{row['copy_bytes_per_s'] / 1e9:.0f} | " + " | ".join(cells) + " |")
        out += ["", "jtblas ÷ copy by weight size: " + "; ".join(
            f"{label}: {_f(v['geomean'], 2)} geomean, {_f(v['min'], 2)} min over {v['shapes']}"
            for label, v in s["decode"].items() if v["shapes"])]
    if s["errors"]:
        out += ["", "Errors per contender: " + ", ".join(f"{k} {v}" for k, v in s["errors"].items())
                + " (details in results.json)."]

    out += ["", "## Per shape", "",
            ("TFLOP/s of each contender; ratios are speed ratios. For M ≤ 16: jtblas GB/s "
             "(compulsory bytes: A, B and C once) and its fraction of the copy bandwidth."), "",
            "| shape | M×N×K layout | " + " | ".join(LABELS[c] for c in CONTENDERS)
            + " | pick÷oracle | jtblas÷XLA | jtblas÷cuBLAS | GB/s (M≤16) | pick config |",
            "|---|---|" + "---|" * (len(CONTENDERS) + 5)]
    for r in records:
        x = ratios(r)
        cells = [_f(tflops(r, c), 1) if tflops(r, c) else ("err" if (r["contenders"].get(c) or {}).get("error")
                                                             else "–") for c in CONTENDERS]
        bw = ""
        if r["M"] <= SMALL_M and gbps(r, "jtblas"):
            bw = f"{gbps(r, 'jtblas'):.0f}"
            ceiling = (r.get("copy_same_bytes") or {}).get("bytes_per_s") or copy_bw
            if ceiling:
                bw += f" ({gbps(r, 'jtblas') * 1e9 / ceiling:.0%})"
        pick = (r["contenders"].get("jtblas") or {}).get("config_short", "")
        out.append(f"| {r['name']} | {_shape(r)} | " + " | ".join(cells)
                   + f" | {_f(x['pick_over_oracle'], 3)} | {_f(x['jtblas_over_xla'], 2)} | "
                   f"{_f(x['jtblas_over_cublas'], 2)} | {bw} | {pick} |")
    spots = [r for r in records if seconds(r, "jtblas_jax")]
    if spots:
        out += ["", "### Spot checks: jtblas.matmul through JAX vs the torch launch of the same config", "",
                ("JAX slope: jtblas.matmul in XLA's own timing loop, so its ratio to XLA is like for like."), "",
                "| shape | config | torch launch µs | JAX slope µs | torch ÷ JAX | XLA slope µs | JAX slope ÷ XLA |",
                "|---|---|---|---|---|---|---|"]
        for r in spots:
            x = ratios(r)
            out.append(f"| {r['name']} | {(r['contenders']['jtblas_jax']).get('config_short', '')} | "
                       f"{_f(_us(seconds(r, 'jtblas')), 1)} | {_f(_us(seconds(r, 'jtblas_jax')), 1)} | "
                       f"{_f(x['jax_over_torch_launch'], 3)} | {_f(_us(seconds(r, 'xla')), 1)} | "
                       f"{_f(x['jtblas_jax_over_xla'], 3)} |")
    if meta.get("not_run"):
        out += ["", f"Not run (time budget): {len(meta['not_run'])} shapes."]
    return "\n".join(out) + "\n"


def _us(value):
    return value * 1e6 if value else None


def plots(results, out_dir) -> dict:
    """Writes square.png, pick_vs_oracle.png and vs_xla_by_group.png; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = load(results)
    records = [r for r in data.get("shapes", []) if r.get("contenders")]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    gpu = data.get("meta", {}).get("gpu", "")

    # 1. square sweep: TFLOP/s vs size, every contender.
    fig, ax = plt.subplots(figsize=(7, 4.5))
    square = sorted((r for r in records if r.get("set") == "square"), key=lambda r: r["M"])
    plotted = False
    for name in CONTENDERS:
        pts = [(r["M"], tflops(r, name)) for r in square if tflops(r, name)]
        if pts:
            ax.plot(*zip(*pts), marker="o", label=LABELS[name])
            plotted = True
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M = N = K")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Square GEMMs, bf16 NN {gpu}")
    if plotted:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no square-set results", ha="center", transform=ax.transAxes)
    ax.grid(alpha=0.3)
    paths["square"] = save_figure(fig, out_dir / "square.png", plt)

    # 2. pick ÷ oracle: histogram and CDF.
    values = sorted(v for v in (ratios(r)["pick_over_oracle"] for r in records) if v)
    fig, (h, c) = plt.subplots(1, 2, figsize=(10, 4))
    if values:
        h.hist(values, bins=min(30, max(5, len(values) // 2)), range=(min(0.5, values[0]), 1.0))
        c.plot(values, [(i + 1) / len(values) for i in range(len(values))], drawstyle="steps-post")
    else:
        h.text(0.5, 0.5, "no oracle results", ha="center", transform=h.transAxes)
    h.set_xlabel("pick ÷ oracle (speed)")
    h.set_ylabel("shapes")
    c.set_xlabel("pick ÷ oracle (speed)")
    c.set_ylabel("fraction of shapes ≤ x")
    c.grid(alpha=0.3)
    fig.suptitle(f"Model pick vs exhaustive search ({len(values)} shapes)")
    paths["pick_vs_oracle"] = save_figure(fig, out_dir / "pick_vs_oracle.png", plt)

    # 3. jtblas ÷ XLA (and ÷ cuBLAS) per group, geometric means.
    groups = summary(data)["groups"]
    names = [g for g, v in groups.items() if v["jtblas_over_xla"] or v["jtblas_over_cublas"]]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(names) + 2), 4.5))
    if names:
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], [groups[g]["jtblas_over_xla"] or 0 for g in names], 0.4, label="÷ XLA")
        ax.bar([x + 0.2 for x in xs], [groups[g]["jtblas_over_cublas"] or 0 for g in names], 0.4, label="÷ cuBLAS")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no XLA/cuBLAS comparisons", ha="center", transform=ax.transAxes)
    ax.set_ylabel("jtblas speed ratio (geomean)")
    ax.set_title("jtblas vs XLA and cuBLAS by shape group")
    paths["vs_xla_by_group"] = save_figure(fig, out_dir / "vs_xla_by_group.png", plt)
    return paths


def save_figure(fig, path: Path, plt) -> Path:
    """Writes `fig` to `path` (PNG, 110 dpi) and closes it."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(results, out_dir) -> dict:
    """report.md, summary.json and the three plots in `out_dir`; returns the paths."""
    data = load(results)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"table": out_dir / "report.md", "summary": out_dir / "summary.json"}
    paths["table"].write_text(markdown(data))
    paths["summary"].write_text(json.dumps(summary(data), indent=1))
    paths.update(plots(data, out_dir))
    return paths
