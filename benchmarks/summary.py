"""The benchmark summary: rates, ratios, fitted exponents, target verdicts, and the files that hold them.

Pure functions of the timings and peaks one run measured (benchmarks/conftest.py collects them and calls
`summarise` and `write` when the session ends); `python -m benchmarks.summary RESULTS.json` renders the
Markdown and the plot again from a results file.

FLOPs follow FlashAttention's benchmarks: a forward pass is 4 * batch * heads * n_q * n_k * d (two matrix
products of 2 * n_q * n_k * d each; the softmax is not counted); its backward pass is 2.5 forwards, so forward
plus backward is 3.5 forwards. The matmul cases are the forward's two products, one each (2 * b * h * n^2 * d
FLOPs): the faster one's rate is the peak attention's matrix products reach on this machine at that size.

Ratios are speeds: `vs_sdpa_flash` is SDPA flash's time in the same mode and size over this time (1.0: as
fast; above 1: faster); `vs_matmul_peak` is this GFLOP/s over the faster matmul's GFLOP/s at the same size.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FWD_BWD_FACTOR = 3.5  # FlashAttention's benchmarks: backward = 2.5 x forward FLOPs, forward + backward = 3.5 x
REFERENCE = "sdpa-flash"
PEAKS = ("matmul-qk", "matmul-pv")
NAIVE = "numpy-naive"
OURS = "torch-tiled"
SCHEMA = 1
# The time every rate and ratio uses: the fastest round. These machines are shared, and interference only ever
# adds time (a round that waited for a core); the median is in the table too.
TIME = "min_s"


def forward_flops(batch: int, heads: int, n_q: int, n_k: int, d: int) -> float:
    return 4.0 * batch * heads * n_q * n_k * d


def flops(mode: str, batch: int, heads: int, n: int, d: int) -> float:
    """FLOPs one call of the mode counts (a forward's; fwd+bwd: 3.5 of them; one of its two matmuls: half)."""
    factor = {"forward": 1.0, "matmul": 0.5, "fwd+bwd": FWD_BWD_FACTOR}[mode]
    return factor * forward_flops(batch, heads, n, n, d)


@dataclass(frozen=True)
class Target:
    """A number the run reports against a threshold (never asserts)."""

    name: str
    impl: str
    mode: str
    n: int
    d: int
    threshold: float
    kind: str  # "speed": reference / ours time >= threshold; "memory": ours / naive peak < threshold;
    # "cost": ours / reference time <= threshold
    reference: str = REFERENCE  # what a "speed" or "cost" target's time is compared with


TARGETS = (
    Target("torch tiled forward vs SDPA flash forward", OURS, "forward", 4096, 64, 0.8, "speed"),
    Target("torch tiled fwd+bwd vs SDPA flash fwd+bwd", OURS, "fwd+bwd", 4096, 64, 0.6, "speed"),
    Target("torch tiled forward peak memory / naive NumPy peak", OURS, "forward", 8192, 64, 0.1, "memory"),
    # a window of 256 keys reads at most window + block_rows + block_cols keys per query block (defaults 256, 512)
    Target("torch tiled forward, window of 256, time / its dense forward", "torch-tiled-window", "forward", 8192, 64,
           (256 + 256 + 512) / 8192, "cost", reference=OURS),
)


def fit_exponent(ns: Iterable[float], values: Iterable[float]) -> dict | None:
    """Least squares of log(value) on log(n): value ~ c * n^exponent. None below two usable points."""
    pairs = [(float(n), float(v)) for n, v in zip(ns, values, strict=True) if n > 0 and v is not None and v > 0]
    if len(pairs) < 2 or len({n for n, _ in pairs}) < 2:
        return None
    x = np.log([n for n, _ in pairs])
    y = np.log([v for _, v in pairs])
    slope, intercept = np.polyfit(x, y, 1)
    stderr = math.nan
    if len(pairs) > 2:
        from scipy import stats

        stderr = float(stats.linregress(x, y).stderr)
    return {"exponent": float(slope), "stderr": stderr, "coefficient": float(math.exp(intercept)), "points": len(pairs)}


def add_rates(timings: list[dict], batch: int, heads: int) -> list[dict]:
    """Each timing with its GFLOP/s and its two ratios (None where the run lacks the point it compares with)."""
    rows = [dict(t) for t in timings]
    for row in rows:
        row["gflops"] = flops(row["mode"], batch, heads, row["n"], row["d"]) / row[TIME] / 1e9
    index = {(r["impl"], r["mode"], r["n"], r["d"]): r for r in rows}
    for row in rows:
        ref_mode = "forward" if row["mode"] == "matmul" else row["mode"]
        ref = index.get((REFERENCE, ref_mode, row["n"], row["d"]))
        peaks = [index[key]["gflops"] for key in ((p, "matmul", row["n"], row["d"]) for p in PEAKS) if key in index]
        row["vs_sdpa_flash"] = ref[TIME] / row[TIME] if ref and row["mode"] != "matmul" else None
        row["vs_matmul_peak"] = row["gflops"] / max(peaks) if peaks else None
    return rows


def _series(rows: list[dict], value: str) -> dict[tuple, list[tuple[int, float]]]:
    series: dict[tuple, list[tuple[int, float]]] = {}
    for r in rows:
        if r.get(value) is not None:
            series.setdefault((r["impl"], r["mode"], r["d"]), []).append((r["n"], r[value]))
    return series


def exponents(rows: list[dict], value: str) -> list[dict]:
    """Per (implementation, mode, d): the fitted exponent of `value` against n."""
    out = []
    for (impl, mode, d), pairs in _series(rows, value).items():
        pairs.sort()
        fit = fit_exponent([n for n, _ in pairs], [v for _, v in pairs])
        if fit:
            out.append({"impl": impl, "mode": mode, "d": d, **fit, "n": [n for n, _ in pairs]})
    return out


def verdicts(rows: list[dict], memory: list[dict], targets: Iterable[Target] = TARGETS) -> list[dict]:
    """Each target's ratio and PASS / MISS, or n/a with what is missing."""
    timing = {(r["impl"], r["mode"], r["n"], r["d"]): r for r in rows}
    peaks = {(m["impl"], m["mode"], m["n"], m["d"]): m.get("peak_bytes") for m in memory}
    out = []
    for t in targets:
        value, missing = None, None
        if t.kind in ("speed", "cost"):
            ours, ref = timing.get((t.impl, t.mode, t.n, t.d)), timing.get((t.reference, t.mode, t.n, t.d))
            if ours and ref:
                value = ref[TIME] / ours[TIME] if t.kind == "speed" else ours[TIME] / ref[TIME]
            else:
                missing = f"{t.impl if not ours else t.reference} {t.mode} at n={t.n} d={t.d} was not timed"
            passed = value is not None and (value >= t.threshold if t.kind == "speed" else value <= t.threshold)
            relation = ">=" if t.kind == "speed" else "<="
        else:
            ours, naive = peaks.get((t.impl, t.mode, t.n, t.d)), peaks.get((NAIVE, "forward", t.n, t.d))
            if ours is not None and naive:
                value = ours / naive
            else:
                missing = f"{t.impl if ours is None else NAIVE} peak memory at n={t.n} d={t.d} was not measured"
            passed = value is not None and value < t.threshold
            relation = "<"
        verdict = "n/a" if value is None else ("PASS" if passed else "MISS")
        out.append({"name": t.name, "n": t.n, "d": t.d, "mode": t.mode, "threshold": t.threshold,
                    "relation": relation, "value": value, "verdict": verdict, "missing": missing})
    return out


def summarise(timings: list[dict], memory: list[dict], *, settings: dict, environment: dict | None = None,
              profile: dict | None = None, notes: Iterable[str] = ()) -> dict:
    """Everything the results files hold, as one JSON-ready dict."""
    rows = add_rates(timings, settings["batch"], settings["heads"])
    return {
        "schema": SCHEMA,
        "settings": {**settings, "fwd_bwd_flops_factor": FWD_BWD_FACTOR},
        "environment": environment or {},
        "timings": rows,
        "memory": memory,
        "exponents": {"time": exponents(rows, TIME), "memory": exponents(memory, "peak_bytes")},
        "targets": verdicts(rows, memory),
        "profile": profile,
        "notes": list(notes),
    }


# -- rendering ---------------------------------------------------------------------------------------------------
def _num(x, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _mib(x) -> str:
    return "-" if x is None else f"{x / 2**20:.1f}"


def _name(row: dict) -> str:
    return f"{row['impl']} {row['mode']}" if row["mode"] != "matmul" else row["impl"]


def timing_table(data: dict) -> list[list[str]]:
    header = ["n", "d", "implementation", "min ms", "median ms", "rounds", "GFLOP/s", "x SDPA flash",
              "x matmul peak", "load"]
    lines = [header]
    for r in sorted(data["timings"], key=lambda r: (r["d"], r["n"])):
        lines.append([str(r["n"]), str(r["d"]), _name(r), _num(r["min_s"] * 1e3, ".2f"),
                      _num(r["median_s"] * 1e3, ".2f"), str(r["rounds"]),
                      _num(r["gflops"], ".1f"), _num(r["vs_sdpa_flash"], ".2f"), _num(r["vs_matmul_peak"], ".2f"),
                      _num(r.get("load_1min"), ".1f")])
    return lines


def loaded_note(data: dict) -> str | None:
    """Which sizes were timed while the machine's 1-minute load exceeded its CPU count (others' work ran too)."""
    cpus = data.get("environment", {}).get("cpus")
    if not cpus:
        return None
    loaded = sorted({(r["d"], r["n"]) for r in data["timings"] if (r.get("load_1min") or 0) > cpus})
    if not loaded:
        return None
    sizes = ", ".join(f"n={n} d={d}" for d, n in loaded)
    return (f"Timed while the 1-minute load average exceeded the {cpus} CPUs (other work shared the machine): "
            f"{sizes}. Read those rows with care: interference adds time, unevenly across implementations.")


def busy_note(data: dict) -> str:
    """What --bench-busy did: every time here was taken with that many spinning processes sharing the cores."""
    return (f"Timed under load: {data['settings']['busy_processes']} process(es) spinning on the CPU for the whole "
            "run (--bench-busy), as when another job shares the machine; ratios compare how each implementation "
            "degrades.")


def memory_table(data: dict) -> list[list[str]]:
    sizes = sorted({m["n"] for m in data["memory"]})
    fits = {(e["impl"], e["mode"]): e for e in data["exponents"]["memory"]}
    header = ["implementation", *(f"n={n} MiB" for n in sizes), "exponent"]
    lines = [header]
    keys = list(dict.fromkeys((m["impl"], m["mode"]) for m in data["memory"]))
    cells = {(m["impl"], m["mode"], m["n"]): m for m in data["memory"]}
    for impl, mode in keys:
        row = [f"{impl} {mode}"]
        for n in sizes:
            m = cells.get((impl, mode, n))
            row.append("-" if m is None else (_mib(m.get("peak_bytes")) if m.get("peak_bytes") is not None
                                               else "error"))
        fit = fits.get((impl, mode))
        row.append(_num(fit["exponent"], ".2f") if fit else "-")
        lines.append(row)
    return lines


def exponent_table(data: dict) -> list[list[str]]:
    dims = sorted({e["d"] for e in data["exponents"]["time"]})
    header = ["implementation", *(f"time exponent d={d}" for d in dims)]
    fits = {(e["impl"], e["mode"], e["d"]): e for e in data["exponents"]["time"]}
    lines = [header]
    for impl, mode in dict.fromkeys((e["impl"], e["mode"]) for e in data["exponents"]["time"]):
        row = [_name({"impl": impl, "mode": mode})]
        for d in dims:
            e = fits.get((impl, mode, d))
            row.append("-" if e is None else f"{e['exponent']:.2f} ± {_num(e['stderr'], '.2f')} ({e['points']} n)")
        lines.append(row)
    return lines


def target_lines(data: dict) -> list[str]:
    out = []
    for t in data["targets"]:
        value = "n/a" if t["value"] is None else f"{t['value']:.3f}"
        tail = f" ({t['missing']})" if t["missing"] else ""
        out.append(f"{t['verdict']:4}  {t['name']} at n={t['n']} d={t['d']}: {value} "
                   f"(target {t['relation']} {t['threshold']}){tail}")
    return out


def _markdown_table(lines: list[list[str]]) -> str:
    head, *body = lines
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(rows)


def _text_table(lines: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in lines) for i in range(len(lines[0]))]
    return "\n".join("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths,
                                                                                                strict=True)))
                     for r in lines)


def terminal_text(data: dict) -> str:
    s = data["settings"]
    parts = [f"attention benchmarks side by side ({s['dtype']}, batch {s['batch']}, {s['heads']} heads)",
             _text_table(timing_table(data))]
    if data["memory"]:
        parts += [f"peak memory (RSS added by one call, d={data['settings'].get('memory_d')})",
                  _text_table(memory_table(data))]
    if data["exponents"]["time"]:
        parts += ["time against n (least squares on log-log)", _text_table(exponent_table(data))]
    parts += ["targets (reported, not asserted)\n" + "\n".join(target_lines(data))]
    if loaded_note(data):
        parts.append(loaded_note(data))
    if s.get("busy_processes"):
        parts.append(busy_note(data))
    return "\n\n".join(parts)


def markdown(data: dict, plot_name: str | None = None) -> str:
    s, env = data["settings"], data["environment"]
    out = ["# Attention benchmarks side by side", ""]
    out += [f"{s['dtype']}, batch {s['batch']}, {s['heads']} heads, n in {s['sizes_n']}, d in {s['sizes_d']}. "
            f"Rates and ratios use the fastest round (`min`; the machine may be shared, and interference only "
            f"adds time); GFLOP/s counts 4·b·h·n²·d per forward and {FWD_BWD_FACTOR}× that "
            "for forward+backward (FlashAttention's rule: the backward is 2.5 forwards); `x SDPA flash` is SDPA "
            "flash's time in the same mode over this time (above 1: faster); `x matmul peak` is this rate over "
            "the rate of the faster of attention's two bare matrix products (torch.bmm QKᵀ (8,n,d)x(8,d,n), "
            "PV (8,n,n)x(8,n,d), 2·b·h·n²·d FLOPs each) at the same size, timed in the same run.", ""]
    if s.get("busy_processes"):
        out += [busy_note(data), ""]
    if env:
        out += ["Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()), ""]
    out += ["## Targets (reported, not asserted)", "", *(f"- {line}" for line in target_lines(data)), ""]
    if plot_name:
        out += [f"![GFLOP/s and peak memory against n]({plot_name})", ""]
    out += ["## Time", "", _markdown_table(timing_table(data)), ""]
    if data["exponents"]["time"]:
        out += ["## Time against n", "", "Least squares of log(time) on log(n), ± its standard error.", "",
                _markdown_table(exponent_table(data)), ""]
    if data["memory"]:
        out += ["## Peak memory", "",
                f"Resident memory one call added at its peak (VmHWM after /proc/self/clear_refs, "
                f"harness/api/peak_memory.py), one child process per implementation and n, one thread, "
                f"d={s.get('memory_d')}. The exponent is the log-log slope against n (tiled: O(n·B), naive: O(n²)).",
                "", _markdown_table(memory_table(data)), ""]
    prof = data.get("profile")
    if prof:
        out += [f"## What limits {prof['impl']} forward (torch.profiler, n={prof['n']}, d={prof['d']})", "",
                f"One call: {prof['wall_s'] * 1e3:.1f} ms wall, {prof['ops_self_s'] * 1e3:.1f} ms inside torch ops "
                f"(self time, {prof['threads']} threads); the difference is Python and dispatch.", "",
                _markdown_table([["op", "self ms", "share of op time", "calls"],
                                 *([p["op"], f"{p['self_s'] * 1e3:.1f}", f"{p['share']:.0%}", str(p["calls"])]
                                   for p in prof["top"])]), ""]
        if prof.get("reading"):
            out += [prof["reading"], ""]
    notes = [*filter(None, [loaded_note(data)]), *data["notes"]]
    if notes:
        out += ["## Notes", "", *(f"- {note}" for note in notes), ""]
    return "\n".join(out)


def plot(data: dict, path: Path) -> None:
    """GFLOP/s against n (one panel per d) and peak memory against n, one line per implementation and mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dims = sorted({r["d"] for r in data["timings"]})
    fig, axes = plt.subplots(1, len(dims) + 1, figsize=(6 * (len(dims) + 1), 5), squeeze=False)
    keys = list(dict.fromkeys((r["impl"], r["mode"]) for r in data["timings"]))
    colours = {impl: plt.cm.tab10(i % 10) for i, impl in enumerate(dict.fromkeys(k[0] for k in keys))}
    style = {"forward": "-", "fwd+bwd": "--", "matmul": ":"}
    for ax, d in zip(axes[0], dims, strict=False):
        for impl, mode in keys:
            pts = sorted((r["n"], r["gflops"]) for r in data["timings"]
                         if r["impl"] == impl and r["mode"] == mode and r["d"] == d)
            if pts:
                ax.plot(*zip(*pts, strict=True), style.get(mode, "-"), marker="o", color=colours[impl],
                        label=_name({"impl": impl, "mode": mode}))
        ax.set(xscale="log", yscale="log", xlabel="n", ylabel="GFLOP/s", title=f"{data['settings']['dtype']}, d={d}")
        _n_ticks(ax, sorted({r["n"] for r in data["timings"]}))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    ax = axes[0][-1]
    for impl, mode in dict.fromkeys((m["impl"], m["mode"]) for m in data["memory"]):
        pts = sorted((m["n"], m["peak_bytes"] / 2**20) for m in data["memory"]
                     if m["impl"] == impl and m["mode"] == mode and m.get("peak_bytes"))
        if pts:
            ax.plot(*zip(*pts, strict=True), style.get(mode, "-"), marker="s",
                    color=colours.get(impl, "black"), label=f"{impl} {mode}")
    ax.set(xscale="log", yscale="log", xlabel="n", ylabel="peak MiB added by one call",
           title=f"peak memory, d={data['settings'].get('memory_d')}")
    ax.grid(True, which="both", alpha=0.3)
    _n_ticks(ax, sorted({m["n"] for m in data["memory"]}))
    if data["memory"]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _n_ticks(ax, sizes: list[int]) -> None:
    if sizes:
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.minorticks_off()


def write(data: dict, directory: Path, stem: str) -> list[Path]:
    """stem.json, stem.md and (with matplotlib) stem.png in directory; the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{stem}.json"]
    paths[0].write_text(json.dumps(data, indent=1, default=float) + "\n")
    png = directory / f"{stem}.png"
    try:
        plot(data, png)
    except ImportError as exc:
        data = {**data, "notes": [*data["notes"], f"no plot: {exc}"]}
        png = None
    else:
        paths.append(png)
    md = directory / f"{stem}.md"
    md.write_text(markdown(data, png.name if png else None))
    paths.append(md)
    return paths


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m benchmarks.summary RESULTS.json  (writes RESULTS.md and RESULTS.png again)")
        return 2
    path = Path(argv[0])
    data = json.loads(path.read_text())
    for written in write(data, path.parent, path.stem):
        print(written)
    print(terminal_text(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
