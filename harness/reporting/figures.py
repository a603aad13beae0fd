"""The report's pictures: PNGs (matplotlib, headless Agg) written to DIR/figures, each with one sentence.

Three sources, all from this run:
- the exhibits the properties recorded (harness.api.exhibits): one figure per exhibit name, every
  implementation's evidence in it;
- the seeds' worked examples, drawn from the float64 oracle;
- each failing verdict of a claim that holds (so the implementation, not the seed's sentence, is wrong)
  whose counterexample is small, drawn as what failed (counterexample_picture): the gradient the backward
  got wrong (oracle, implementation, difference) for a gradient failure; the output's non-finite pattern
  against the one exact arithmetic gives for a failure on non-finite inputs or outputs (poisoning, NaN
  propagation); otherwise the weights the implementation applied (read through one-hot values,
  harness.api.observe) against the oracle's, when they differ. None when nothing fits.
Without matplotlib there are no pictures, and the report says why.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from protocol.registry import Variant
from specs import examples
from specs.gradients import attention_backward
from specs.problem_code import rebuild
from specs.problems import Problem
from specs.reference import attention, repeat_kv

FOLDER = "figures"
OUTLIER = 0.05  # a curve further than 5 % (relative) from the implementations' median is drawn on its own
MAX_PANELS = 6  # heatmap exhibits of one name drawn per implementation, at most
MAX_COUNTEREXAMPLES = 40
LARGEST_COUNTEREXAMPLE = 32  # n_q and n_k of a counterexample whose weights are drawn, at most
COUNTEREXAMPLE_BUDGET_S = 60.0  # seconds for the counterexamples' pictures (calls and drawing), at most


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _file_name(*parts: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(parts)).strip("-")[:120] + ".png"


def _floats(values: list) -> np.ndarray:
    """Exhibit numbers as floats (harness.api.exhibits writes non-finite ones as strings)."""
    return np.array([float(x) for x in values], dtype=float)


class _Canvas:
    """Writes figures under DIR/figures and remembers each one's caption and claims."""

    def __init__(self, directory: Path) -> None:
        self.folder = directory / FOLDER
        self.folder.mkdir(parents=True, exist_ok=True)
        self.plt = _pyplot()
        self.drawn: list[dict] = []

    def save(self, figure, name: str, caption: str, claims: list[str], *, source: str, impl: str | None = None) -> None:
        """`source`: "exhibit", "worked-examples" or "counterexample" (where the report shows it)."""
        figure.tight_layout()
        figure.savefig(self.folder / name, dpi=90)
        self.plt.close(figure)
        self.drawn.append({"file": f"{FOLDER}/{name}", "caption": caption, "claims": list(claims), "source": source,
                           "impl": impl})


def _curve_groups(records: list[dict]) -> dict[str, list[tuple[str, np.ndarray, np.ndarray]]]:
    groups: dict[str, list] = defaultdict(list)
    for record in records:
        for label, series in record["data"]["series"].items():
            groups[label].append((record["impl"], _floats(series["x"]), _floats(series["y"])))
    return groups


def _draw_curve_label(axes, label: str, curves: list[tuple[str, np.ndarray, np.ndarray]], colour,
                      apart: bool = True) -> list[str]:
    """A median line and the range of the agreeing implementations; with `apart`, outliers drawn and named
    (returned). Without it (curves that differ by sampling noise) every curve is inside the range."""
    xs = curves[0][1]
    if len(curves) == 1 or any(len(x) != len(xs) or np.any(x != xs) for _, x, _ in curves):
        for impl, x, y in curves[:MAX_PANELS]:
            axes.plot(x, y, marker="o", ms=3, color=colour, alpha=0.7, label=f"{label}: {impl}")
        return []
    ys = np.array([y for _, _, y in curves])
    median = np.median(ys, axis=0)
    deviation = np.max(np.abs(ys - median) / np.maximum(np.abs(median), 1e-300), axis=1)
    outliers = [i for i, dev in enumerate(deviation) if dev > OUTLIER] if apart else []
    agreeing = [i for i in range(len(curves)) if i not in outliers] or list(range(len(curves)))
    axes.fill_between(xs, ys[agreeing].min(axis=0), ys[agreeing].max(axis=0), color=colour, alpha=0.25)
    axes.plot(xs, median, marker="o", ms=3, color=colour, label=f"{label} (median of {len(curves)})")
    for i in outliers[:MAX_PANELS]:
        axes.plot(xs, ys[i], ls="--", marker="x", ms=4, label=f"{label}: {curves[i][0]}")
    return [curves[i][0] for i in outliers]


def _draw_curves(canvas: _Canvas, name: str, records: list[dict]) -> None:
    plt = canvas.plt
    data = records[0]["data"]
    figure, axes = plt.subplots(figsize=(7.5, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    outliers = []
    for index, (label, curves) in enumerate(_curve_groups(records).items()):
        outliers += _draw_curve_label(axes, label, curves, colours[index % len(colours)],
                                      apart=data.get("outliers", True))
    for label, band in (data.get("band") or {}).items():
        axes.fill_between(_floats(band["x"]), _floats(band["low"]), _floats(band["high"]), color="grey", alpha=0.2,
                          label=label)
    axes.set_xlabel(data.get("x_label", "")), axes.set_ylabel(data.get("y_label", ""))
    axes.set_xscale("log" if data.get("log_x") else "linear"), axes.set_yscale("log" if data.get("log_y") else "linear")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7)
    impls = sorted({r["impl"] for r in records})
    note = (f" Drawn apart (more than {OUTLIER:.0%} from the median): {', '.join(sorted(set(outliers)))}."
            if outliers else "")
    count = f"{len(impls)} implementation{'s' * (len(impls) > 1)}"
    caption = f"{records[0]['caption']} ({count}; shaded: their range.){note}"
    canvas.save(figure, _file_name(name), caption, _claims(records), source="exhibit")


def _heatmap(axes, matrix: np.ndarray, title: str, *, diverging: bool = False, annotate: bool = True,
             labels: tuple[str, str] = ("key j", "query i"), top: float | None = None) -> None:
    """`top`: the colour map's upper end (default: the matrix's largest entry)."""
    if diverging:
        limit = float(np.nanmax(np.abs(matrix), initial=0.0)) or 1.0
        image = axes.imshow(matrix, cmap="RdBu_r", vmin=-limit, vmax=limit)
    else:
        top = max(float(np.nanmax(matrix, initial=0.0)), 1e-12) if top is None else top
        image = axes.imshow(matrix, cmap="viridis", vmin=0.0, vmax=top)
    axes.set_title(title, fontsize=8)
    axes.set_xlabel(labels[0], fontsize=7), axes.set_ylabel(labels[1], fontsize=7)
    axes.tick_params(labelsize=6)
    axes.set_xticks(range(matrix.shape[1])), axes.set_yticks(range(matrix.shape[0]))
    if annotate and matrix.size <= 36:
        bright = image.norm(matrix) > 0.6  # dark text on the bright end of either colour map
        for (i, j), value in np.ndenumerate(matrix):
            axes.text(j, i, f"{value:.2g}", ha="center", va="center", fontsize=6,
                      color="black" if bright[i, j] else "white")
    axes.figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04).ax.tick_params(labelsize=6)


def _draw_heatmaps(canvas: _Canvas, name: str, records: list[dict]) -> None:
    for record in records[:MAX_PANELS]:
        panels = record["data"]["panels"]
        figure, axes = canvas.plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.0), squeeze=False)
        for ax, (title, matrix) in zip(axes[0], panels.items(), strict=True):
            _heatmap(ax, np.array([_floats(row) for row in matrix]), title)
        canvas.save(figure, _file_name(name, record["impl"]), f"{record['caption']} ({record['impl']})",
                    record["claims"], source="exhibit", impl=record["impl"])


def _draw_histograms(canvas: _Canvas, name: str, records: list[dict]) -> None:
    figure, axes = canvas.plt.subplots(figsize=(7.5, 4.2))
    for record in records[:MAX_PANELS]:
        prefix = f"{record['impl']}: " if len(records) > 1 else ""
        for label, samples in record["data"]["samples"].items():
            axes.hist(_floats(samples), bins=60, histtype="step", density=True, label=prefix + label)
    axes.set_xlabel(records[0]["data"].get("x_label", "")), axes.set_ylabel("density")
    axes.legend(fontsize=7)
    canvas.save(figure, _file_name(name), records[0]["caption"], _claims(records), source="exhibit")


def _claims(records: list[dict]) -> list[str]:
    return sorted({slug for record in records for slug in record.get("claims", ())})


DRAWERS: dict[str, Callable[[_Canvas, str, list[dict]], None]] = {
    "curves": _draw_curves, "heatmaps": _draw_heatmaps, "histograms": _draw_histograms}


WORKED_EXAMPLES = (
    ("seed 000: 5 tokens, X 5x6, W 6x4", lambda: examples.worked_example_000(0), "worked-example-shapes"),
    ("seed 001: 3 queries x 4 keys", lambda: examples.worked_example_001(0), "worked-example-cross-shapes"),
    ("seed 001: siwuxiang against 5 animals", lambda: examples.siwuxiang(0, 2), "siwuxiang-query-result"),
    ("seed 003: wo ai ni against itself", lambda: examples.woaini(0), "woaini-self-attention-matrix"),
    ("seed 003: causal mask on seed 000's tokens", lambda: examples.worked_example_000(0).replace(causal=True),
     "causal-mask-zeroes-future"),
)


def _draw_worked_examples(canvas: _Canvas) -> None:
    figure, axes = canvas.plt.subplots(1, len(WORKED_EXAMPLES), figsize=(3.3 * len(WORKED_EXAMPLES), 3.2))
    for ax, (title, make, _) in zip(axes, WORKED_EXAMPLES, strict=True):
        p: Problem = make()
        weights = attention(p.q, p.k, p.v, scale=p.scale, causal=p.causal).weights[0, 0]
        _heatmap(ax, weights, title)
    canvas.save(figure, "worked-examples.png",
                "The weight matrices of the seeds' worked examples (float64 oracle, seeded inputs): rows sum to 1, "
                "the frog's weight is 0 only because its score is 1000 below the others, and the causal mask "
                "zeroes everything above the diagonal.", [slug for *_, slug in WORKED_EXAMPLES],
                source="worked-examples")


GRADIENT_SUMMARY = re.compile(r"^d[QKV]\b")
NON_FINITE_SUMMARY = re.compile(r"\b(nan|-?inf|NaN|non-finite)\b")


@dataclass(frozen=True)
class Picture:
    """What a counterexample's figure shows: its kind, its panels (title -> 2-D array, one head) and a caption."""

    kind: str  # "gradients", "non-finite" or "weights"
    panels: dict[str, np.ndarray]
    head: tuple[int, int]  # (batch, head) drawn
    caption: str
    labels: tuple[str, str] = ("key j", "query i")  # the panels' x and y axes
    difference: bool = True  # the last panel is implementation - oracle (a diverging colour map)


def _summary(verdict: dict) -> str:
    return next((line.strip() for line in (verdict.get("detail") or "").splitlines() if line.strip()), "")


def counterexample_kind(verdict: dict, problem: Problem) -> str:
    """The picture a failure calls for: "gradients" when the backward is what failed (its summary names dQ, dK
    or dV, it recorded the seed of its dO, or its repro calls a backward), "non-finite" when the failure is about
    NaN or Inf (non-finite inputs, or a summary naming them), else "weights"."""
    summary = _summary(verdict)
    counterexample = verdict.get("counterexample") or {}
    if (GRADIENT_SUMMARY.match(summary) or counterexample.get("cotangent_seed") is not None
            or "backward_of(" in (counterexample.get("repro") or "")):
        return "gradients"
    if NON_FINITE_SUMMARY.search(summary) or not all(np.all(np.isfinite(x)) for x in (problem.q, problem.k,
                                                                                       problem.v)):
        return "non-finite"
    return "weights"


def _worst_head(badness: np.ndarray) -> tuple[int, int]:
    """(batch, head) of the largest entry of `badness` (batch, heads, ...); NaN counts as the largest."""
    flat = np.nan_to_num(badness.astype(float), nan=np.inf)
    index = np.unravel_index(int(np.argmax(flat)), flat.shape)
    return int(index[0]), int(index[1])


def expected_non_finite(problem: Problem, allowed: np.ndarray | None) -> np.ndarray:
    """Where exact attention on the problem's inputs is NaN or Inf (batch, heads, n_q, d_v): out_ic reads q_i, the
    keys row i sees, and column c of their values."""
    group = problem.q.shape[1] // problem.k.shape[1]
    bad_q = ~np.all(np.isfinite(problem.q), axis=-1)
    bad_k = ~np.all(np.isfinite(repeat_kv(problem.k, group)), axis=-1)
    bad_v = ~np.isfinite(repeat_kv(problem.v, group))
    sees = np.broadcast_to(True if allowed is None else allowed, problem.q.shape[:3] + (problem.n_k,))
    rows = bad_q | np.any(sees & bad_k[..., None, :], axis=-1)
    return rows[..., None] | (sees.astype(float) @ bad_v.astype(float) > 0)


def _non_finite_picture(verdict: dict, variant: Variant, problem: Problem) -> Picture | None:
    from harness.api.trial import Trial

    trial = Trial(variant, problem)
    out = trial.check_output(trial.call_raw(problem), problem, finite=False)
    allowed = attention(*(x.astype(np.float64) for x in trial.inputs(problem)), **trial.oracle_kwargs(problem),
                        finite=False).allowed
    expected, got = expected_non_finite(problem, allowed), ~np.isfinite(out)
    if not (expected.any() or got.any()):
        return None
    head = _worst_head(np.sum(expected != got, axis=(-1, -2)) + 1e-3 * np.sum(got | expected, axis=(-1, -2)))
    wrong = int(np.sum(expected != got))
    return Picture("non-finite", {"non-finite in exact arithmetic": expected[head].astype(float),
                                  f"non-finite in {verdict['impl'][:32]}": got[head].astype(float)}, head,
                   f"`{verdict['claim']}` fails on {verdict['impl']}: where its output is NaN or Inf (1) against where "
                   f"exact attention on the same inputs is, on the smallest failing input (batch, head {head}); "
                   f"{wrong} element{'s' * (wrong != 1)} disagree.", ("value column c", "query i"), difference=False)


def _gradient_picture(verdict: dict, variant: Variant, problem: Problem) -> Picture | None:
    """The gradient the summary names (else the one furthest from the oracle's), for the dO the property drew (the
    counterexample's cotangent seed: specs.gradients.drawn_cotangent)."""
    from harness.api.trial import Trial
    from harness.engine.backward import backward_of

    seed = (verdict.get("counterexample") or {}).get("cotangent_seed")
    if seed is None:
        return None  # dO is not drawn as the gradient properties draw it, or the call takes more keywords
    trial = Trial(variant, problem)
    q, k, v = trial.inputs(problem)
    d_out = trial.cotangent(problem, seed)
    got = [g.astype(np.float64) for g in backward_of(variant.impl, q, k, v, d_out, **problem.kwargs())]
    exact = attention_backward(*trial.exact_inputs(problem), d_out.astype(np.float64), **trial.oracle_kwargs(problem))
    differences = [g - e for g, e in zip(got, exact, strict=True)]
    named = GRADIENT_SUMMARY.match(_summary(verdict))
    worst = [float(np.max(np.nan_to_num(np.abs(d), nan=np.inf), initial=0.0)) for d in differences]
    which = "QKV".index(named.group(0)[1]) if named else int(np.argmax(worst))
    name = f"d{'QKV'[which]}"
    head = _worst_head(np.abs(differences[which]))
    return Picture("gradients", {f"{name}, float64 oracle": exact[which][head], f"{name}, {verdict['impl'][:36]}":
                                 got[which][head], f"{name}: implementation - oracle": differences[which][head]},
                   head, f"`{verdict['claim']}` fails on {verdict['impl']}: {name} on the smallest failing input "
                         f"(batch, head {head}), largest difference {worst[which]:.3g}.", ("feature", "token"))


def _weights_picture(verdict: dict, variant: Variant, problem: Problem) -> Picture | None:
    """The weights the implementation applied against the oracle's, when they differ beyond their allowance."""
    from harness.api.observe import observe_weights
    from harness.api.trial import Trial

    if not variant.capabilities.value_dim and problem.q.shape[-1] < problem.n_k:
        return None  # one-hot values need d_v >= n_k, and this implementation takes only d_v = d
    observed = observe_weights(Trial(variant, problem))
    oracle, got = observed.oracle.weights, observed.weights
    difference = got - oracle
    over = ~(np.abs(difference) <= np.broadcast_to(observed.allowance.bound, difference.shape))
    if not over.any():
        return None  # its weights are the oracle's: a weights picture would show nothing of what failed
    head = _worst_head(np.abs(difference))
    biggest = float(np.nanmax(np.abs(difference))) if np.any(np.isfinite(difference)) else float("nan")
    return Picture("weights", {"float64 oracle": oracle[head], verdict["impl"][:40]: got[head],
                               "implementation - oracle": difference[head]}, head,
                   f"`{verdict['claim']}` fails on {verdict['impl']}: the weights it applied on the smallest failing "
                   f"input (batch, head {head}), largest difference {biggest:.3g}.")


PICTURES = {"gradients": _gradient_picture, "non-finite": _non_finite_picture, "weights": _weights_picture}


def counterexample_picture(verdict: dict, variant: Variant) -> Picture | None:
    """The picture of what failed on the verdict's counterexample (counterexample_kind), or None when nothing
    fits: the input is too large to read, the implementation fails on it otherwise, or the data shows no fault."""
    problem = rebuild(verdict["counterexample"]["problem"])
    if problem.n_q > LARGEST_COUNTEREXAMPLE or problem.n_k > LARGEST_COUNTEREXAMPLE:
        return None
    try:
        return PICTURES[counterexample_kind(verdict, problem)](verdict, variant, problem)
    except Exception:  # the implementation fails on it another way (its bug report says how)
        return None


def _draw_counterexample(canvas: _Canvas, verdict: dict, variant: Variant) -> bool:
    """Draw what failed when a picture fits; say whether it was drawn."""
    picture = counterexample_picture(verdict, variant)
    if picture is None:
        return False
    figure, axes = canvas.plt.subplots(1, len(picture.panels), figsize=(3.4 * len(picture.panels), 3.2))
    last = len(picture.panels) - 1
    for i, (ax, (title, matrix)) in enumerate(zip(axes, picture.panels.items(), strict=True)):
        _heatmap(ax, matrix, title, diverging=picture.difference and i == last, labels=picture.labels,
                 top=1.0 if picture.kind == "non-finite" else None)  # a pattern: 1 where NaN or Inf
    canvas.save(figure, _file_name("counterexample", verdict["claim"], verdict["impl"]), picture.caption,
                [verdict["claim"]], source="counterexample", impl=verdict["impl"])
    return True


def _draw_counterexamples(canvas: _Canvas, report: dict, variants: list[Variant]) -> list[str]:
    by_name = {v.name: v for v in variants}
    holds = {c["slug"]: c["holds"] for c in report["claims"]}
    tried, drawn, notes, started = set(), 0, [], time.monotonic()
    for verdict in report["verdicts"]:
        problem = (verdict.get("counterexample") or {}).get("problem")
        key = (verdict["impl"], problem)
        if (verdict["status"] != "fail" or not problem or verdict["impl"] not in by_name or key in tried
                or not holds.get(verdict["claim"], False)):  # a false seed sentence fails on the oracle too
            continue
        if drawn >= MAX_COUNTEREXAMPLES or time.monotonic() - started > COUNTEREXAMPLE_BUDGET_S:
            notes.append(f"counterexample pictures stop at {drawn} ({MAX_COUNTEREXAMPLES} or "
                         f"{COUNTEREXAMPLE_BUDGET_S:.0f} s at most)")
            break
        tried.add(key)
        if _draw_counterexample(canvas, verdict, by_name[verdict["impl"]]):
            drawn += 1
    return notes


def draw_figures(report: dict, directory: str | Path, variants: list[Variant]) -> dict:
    """Draw every picture of the run into DIR/figures; returns report.json's "figures" section:
    {"drawn": [{"file", "caption", "claims", "source", "impl"}], "notes": [why some are missing]}."""
    try:
        canvas = _Canvas(Path(directory))
    except ImportError as exc:
        return {"drawn": [], "notes": [f"no pictures: matplotlib is not installed ({exc})"]}
    by_name: dict[str, list[dict]] = defaultdict(list)
    for record in report.get("exhibits", ()):
        by_name[record["name"]].append(record)
    for name, records in by_name.items():
        drawer = DRAWERS.get(records[0]["kind"])
        if drawer is not None:
            drawer(canvas, name, records)
    _draw_worked_examples(canvas)
    notes = _draw_counterexamples(canvas, report, variants)
    return {"drawn": canvas.drawn, "notes": notes}
