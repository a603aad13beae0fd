"""CONTRACT 2's outputs: the claims x implementations verdicts, as report.json / .md / .html (the terminal's
matrix: harness.reporting.report_text.terminal_lines).

report.json holds at least
  {"schema": 2, "impls": [names], "claims": [{"slug", "source", "statement"}],
   "verdicts": [{"claim", "impl", "status", "detail", "counterexample"}]}
with status one of pass, fail, skip, error; each verdict also says whether the
failure was declared (`declared`: an expectation's deviation or a false seed sentence explains it) and why.
`schema` is the version of this layout (SCHEMA), raised when a change would mislead a reader of older reports
(`attention-spec compare` reads this one and the one before, and refuses others). Schema 2 renamed two fields to the
glossary's names (docs/glossary.md); the former names are still written beside them, deprecated (DEPRECATED_ALIASES).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from harness.api.markers import ORACLE
from harness.engine.verdicts import STATUSES, RunState, aggregate
from harness.reporting.figures import draw_figures
from harness.reporting.kernel_resources import markdown_lines
from harness.reporting.report_html import render_html
from harness.reporting.report_text import exhibit_tables, grid, reading_claims, tally, verdict_symbol
from protocol.registry import Variant
from specs.readings import READINGS

SCHEMA = 2
# former field -> its glossary name, written beside it until schema 3: the verdicts' and the report's own
DEPRECATED_ALIASES = {"verdicts": {"expected": "declared"},
                      "report": {"uncaught_declared_defects": "uncaught_expectations"}}


def capabilities(variants: list[Variant]) -> dict[str, dict]:
    """What each implementation can be asked to do (so a reader sees why a cell is a skip), by record name."""
    listed = {}
    for variant in variants:
        impl = variant.impl
        listed.setdefault(impl.name, {"target": impl.target, "backend": impl.backend,
                                      **dataclasses.asdict(impl.capabilities)})
    return listed


def _subjects(state: RunState) -> list[str]:
    names = [v.name for v in state.variants]
    others = sorted({subject for _, subject in state.outcomes} - set(names) - {ORACLE})
    seen = {subject for _, subject in state.outcomes}
    return names + ([ORACLE] if ORACLE in seen else []) + others


def build_report(state: RunState, duration_s: float, profile: str | None = None, kernels: dict | None = None) -> dict:
    """The report of the run; `kernels`: harness.reporting.kernel_resources' section (None when the run touched
    no CUDA)."""
    verdicts = [{"claim": slug, "impl": subject, **aggregate(outcomes)}
                for (slug, subject), outcomes in state.outcomes.items()]
    order = {slug: i for i, slug in enumerate(state.claims)}
    subjects = _subjects(state)
    verdicts.sort(key=lambda v: (order.get(v["claim"], len(order)), subjects.index(v["impl"])))
    summary = {status: sum(v["status"] == status for v in verdicts) for status in STATUSES}
    summary["expected_fail"] = sum(v["status"] == "fail" and v["declared"] for v in verdicts)
    summary["unexpected_fail"] = summary["fail"] - summary["expected_fail"]
    return _with_deprecated_aliases({
        "schema": SCHEMA,
        "impls": subjects,
        "claims": [
            {"slug": c.slug, "source": c.source, "statement": c.statement, "original": c.original,
             "kind": c.kind, "holds": c.holds, "why": c.why, "note": c.note, "also": list(c.also),
             "properties": sorted(state.registered.get(c.slug, ()))}
            for c in state.claims.values()
        ],
        "verdicts": verdicts,
        "unavailable": [{"target": u.target, "reason": u.reason} for u in state.unavailable],
        "uncaught_expectations": list(state.warnings),
        "capabilities": capabilities(state.variants),
        # largest error / allowed among comparisons that passed, per implementation variant
        "headroom": {name: round(ratio, 4) for name, ratio in sorted(state.headroom.items())},
        # seconds per subject: its tests (oracle and tolerance included) and, inside them, its own calls
        "time_s": {name: {"tests": round(state.seconds.get(name, 0.0), 2),
                          "calls": round(state.call_seconds.get(name, 0.0), 2)} for name in subjects},
        "summary": summary,
        # evidence the properties showed (harness.api.exhibits), drawn by harness.reporting.figures
        "exhibits": state.exhibits,
        # ptxas resources of the catalogued CUDA kernels (harness.reporting.kernel_resources); null: no CUDA in this run
        "kernels": kernels,
        "profile": profile,
        "duration_s": round(duration_s, 1),
    })


def _with_deprecated_aliases(report: dict) -> dict:
    """`report` with each former field name beside its glossary name (DEPRECATED_ALIASES), same value."""
    for former, current in DEPRECATED_ALIASES["report"].items():
        report[former] = report[current]
    for verdict in report["verdicts"]:
        for former, current in DEPRECATED_ALIASES["verdicts"].items():
            verdict[former] = verdict[current]
    return report


def _markdown_figure(figure: dict) -> list[str]:
    return [f"![{figure['caption'][:80]}]({figure['file']})", "", f"*{figure['caption']}*", ""]


def _markdown_readings(report: dict) -> list[str]:
    """Each reading: its claims' tallies over the implementations, its evidence tables and its pictures."""
    figures = (report.get("figures") or {}).get("drawn", [])
    out = ["## Readings", ""]
    for reading in READINGS:
        slugs = reading_claims(report, reading)
        out += [f"### {reading.title}", "", reading.summary, ""]
        if not slugs:
            out += ["None of this reading's claims ran in this report.", ""]
        for slug in slugs:
            counts, failing = tally(report, slug)
            claim = next(c for c in report["claims"] if c["slug"] == slug)
            failing_on = f" (failing on {', '.join(failing)})" if failing else ""
            note = f". {claim['note']}" if claim["note"] else ""
            out.append(f"- `{slug}` ({claim['kind']}): {counts}{failing_on}{note}")
        out.append("")
        for caption, columns, rows in exhibit_tables(report, slugs):
            out += [f"{caption}", "", "| " + " | ".join(map(str, columns)) + " |", "|---" * len(columns) + "|"]
            out += ["| " + " | ".join(map(str, row)) + " |" for row in rows] + [""]
        for figure in figures:
            if figure["source"] == "exhibit" and set(figure["claims"]) & set(slugs):
                out += _markdown_figure(figure)
    for figure in figures:
        if figure["source"] == "worked-examples":
            out += ["## Worked examples", "", *_markdown_figure(figure)]
    return out


def _markdown_bug_reports(report: dict, unexpected: bool) -> list[str]:
    """The bug reports of the failures and errors no row declares (`unexpected`), or of the declared ones."""
    by_slug = {c["slug"]: c for c in report["claims"]}
    failures = [v for v in report["verdicts"]
                if v["status"] in ("fail", "error") and v["declared"] != unexpected]
    title = "Unexpected failures" if unexpected else "Declared failures"
    out = [f"## {title} ({len(failures)})", ""]
    if not failures:
        out += ["None." if unexpected else "None declared.", ""]
    for v in failures:
        claim = by_slug.get(v["claim"], {})
        label = "declared" if v["declared"] else "UNEXPECTED"
        out += [f"### `{v['claim']}` on `{v['impl']}` ({v['status']}, {label})", "",
                f"- claim: {claim.get('statement', '')}",
                f"- seed: {claim.get('source', '')} — {claim.get('original', '')}"]
        if v.get("why"):
            out.append(f"- why: {v['why']}")
        out += ["", "```", v["detail"], "```"]
        repro = (v.get("counterexample") or {}).get("repro")
        if repro:
            out += ["", "```python", repro, "```"]
        out.append("")
    return out


def _markdown(report: dict) -> str:
    """The report as Markdown, leading with what needs a reader: the unexpected failures, then the declared ones,
    then the readings, the claims grid and the rest."""
    claims, cells = grid(report)
    subjects = report["impls"]
    out = ["# Attention claims x implementations", ""]
    s = report["summary"]
    out.append(f"{len(claims)} claims checked on {len(subjects)} subjects in {report['duration_s']} s "
               f"(profile {report['profile']}): {s['pass']} pass, {s['expected_fail']} declared fail, "
               f"{s['unexpected_fail']} unexpected fail, {s['error']} error, {s['skip']} skip.")
    out.append("")
    out += _markdown_bug_reports(report, unexpected=True)
    out += _markdown_bug_reports(report, unexpected=False)
    out += _markdown_readings(report)
    out += ["## Claims grid", "", "Columns:", ""] + [f"{i + 1}. `{name}`" for i, name in enumerate(subjects)] + [""]
    out.append("| claim | " + " | ".join(str(i + 1) for i in range(len(subjects))) + " |")
    out.append("|---|" + "---|" * len(subjects))
    for slug in claims:
        out.append(f"| `{slug}` | " + " | ".join(verdict_symbol(cells.get((slug, x))) for x in subjects) + " |")
    out += ["", "`+` pass, `F` fail, `x` declared fail, `E` error, `s` skip, `.` not applicable", ""]
    if report.get("headroom"):
        out += ["## Headroom", "", "Largest error / allowed among the comparisons each implementation passed "
                "(1 would be at the tolerance):", ""]
        out += [f"- `{name}`: {ratio:.3g}" for name, ratio in report["headroom"].items()]
        out.append("")
    out += ["## Not checkable", ""]
    out += [f"- `{c['slug']}` ({c['source']}): {c['why']}" for c in report["claims"] if c["kind"] == "not-checkable"]
    if report["unavailable"]:
        out += ["", "## Not run on this machine", ""]
        out += [f"- `{u['target']}`: {u['reason']}" for u in report["unavailable"]]
    if report.get("kernels"):
        out += [""] + markdown_lines(report["kernels"])
    return "\n".join(out) + "\n"


def write_report(report: dict, directory: str | Path, variants: list[Variant] = ()) -> None:
    """report.json, .md and .html in `directory`, with the pictures (harness.reporting.figures) in its figures/; the
    implementations `variants` are called again to draw their failing counterexamples' weights."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    report["figures"] = draw_figures(report, target, list(variants))
    (target / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False, default=str))
    (target / "report.md").write_text(_markdown(report))
    (target / "report.html").write_text(render_html(report))
