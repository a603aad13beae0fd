"""What the report's documents and the terminal say alike: a verdict's symbol, the claims x subjects grid and
the bug reports' anchors, a claim's tally over the implementations, a reading's claims in this run, the evidence
tables the properties recorded (harness.api.exhibits), and the terminal's matrix folded to the terminal's width."""

from __future__ import annotations

import itertools
import textwrap
from collections import defaultdict

from specs.readings import Reading

SYMBOLS = {"pass": "+", "fail": "F", "expected": "x", "error": "E", "skip": "s", None: "."}
LEGEND = ("+ pass   F fail   x fail, declared (known defect or false seed sentence)   E error   s skip   "
          ". not applicable")
MIN_COLUMNS = 10  # subjects per block the claim column leaves room for, at least


def verdict_symbol(verdict: dict | None) -> str:
    if verdict is None:
        return SYMBOLS[None]
    if verdict["status"] == "fail" and verdict["declared"]:
        return SYMBOLS["expected"]
    return SYMBOLS[verdict["status"]]


def reading_claims(report: dict, reading: Reading) -> list[str]:
    """The reading's claims that this run gave a verdict, in the reading's order."""
    judged = {v["claim"] for v in report["verdicts"]}
    return [slug for slug in reading.claims if slug in judged]


def tally(report: dict, slug: str) -> tuple[str, list[str]]:
    """'pass on 60, declared fail on 2, skip on 3' for one claim, and the subjects it fails on."""
    words = {"+": "pass", "x": "declared fail", "F": "UNEXPECTED fail", "E": "error", "s": "skip"}
    counts: dict[str, int] = defaultdict(int)
    failing = []
    for verdict in report["verdicts"]:
        if verdict["claim"] == slug:
            symbol = verdict_symbol(verdict)
            counts[symbol] += 1
            if symbol in "xFE":
                failing.append(verdict["impl"])
    text = ", ".join(f"{words[s]} on {counts[s]}" for s in "+xFEs" if counts[s])
    return text, failing


def _text(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def exhibit_tables(report: dict, slugs: list[str]) -> list[tuple[str, list, list]]:
    """(caption, columns, rows) per table exhibit of these claims. Rows come from every implementation, each
    prefixed with its name; "cells" exhibits give one row per implementation, a column per cell name."""
    tables: dict[str, dict] = {}
    for record in report.get("exhibits", ()):
        if record["kind"] != "table" or not set(record.get("claims", ())) & set(slugs):
            continue
        table = tables.setdefault(record["name"], {"caption": record["caption"], "columns": [], "rows": [],
                                                   "cells": {}})
        data = record["data"]
        if "cells" in data:
            table["cells"].setdefault(record["impl"], {}).update(data["cells"])
            table["columns"] += [c for c in data["cells"] if c not in table["columns"]]
        else:
            table["columns"] = list(data["columns"])
            table["rows"] += [[record["impl"], *row] for row in data["rows"]]
    found = []
    for table in tables.values():
        rows = table["rows"] + [[impl, *(cells.get(c, "") for c in table["columns"])]
                                for impl, cells in table["cells"].items()]
        found.append((table["caption"], ["implementation", *table["columns"]], [[_text(x) for x in r] for r in rows]))
    return found


def grid(report: dict) -> tuple[list[str], dict[tuple[str, str], dict]]:
    """The claims that have a verdict (catalogue order) and the verdicts by (claim, subject)."""
    cells = {(v["claim"], v["impl"]): v for v in report["verdicts"]}
    claims = [c["slug"] for c in report["claims"] if any((c["slug"], s) in cells for s in report["impls"])]
    return claims, cells


def bug_ids(report: dict) -> dict[tuple[str, str], str]:
    """The anchor of each failure's or error's bug report in report.html, by (claim, subject)."""
    failing = [v for v in report["verdicts"] if v["status"] in ("fail", "error")]
    return {(v["claim"], v["impl"]): f"bug-{i + 1}" for i, v in enumerate(failing)}


def folded(text: str, width: int, indent: str = "") -> list[str]:
    """`text` in lines of at most `width` characters (continuations indented by `indent`)."""
    return textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False) or [""]


def _time(seconds: dict | None) -> str:
    if not seconds:
        return ""
    return f"{seconds['tests']:.1f} s" + (f" (its calls {seconds['calls']:.1f} s)" if seconds["calls"] else "")


def _subject_lines(report: dict, width: int) -> list[str]:
    """The numbered subjects with their time, one per line (folded where a line would pass `width`)."""
    times = report.get("time_s", {})
    digits = len(str(len(report["impls"])))
    indent = " " * (digits + 2)
    lines = []
    for i, name in enumerate(report["impls"]):
        head, time = f"{i + 1:>{digits}}  {name}", _time(times.get(name))
        if len(head) + 2 + len(time) <= width:
            lines.append(f"{head}  {time}".rstrip())
        else:  # the time stays whole, on a line of its own
            lines += folded(head, width, indent) + ([indent + time] if time else [])
    return lines


def matrix_blocks(report: dict, width: int) -> list[str]:
    """The claims x subjects matrix in blocks of as many subject columns as fit in `width`; a block lists the
    claims with a verdict among its subjects (a slug wider than the claim column stands on a line of its own)."""
    claims, cells = grid(report)
    subjects = report["impls"]
    cell = len(str(len(subjects))) + 1
    label = min(max((len(slug) for slug in claims), default=10), max(width - 2 - MIN_COLUMNS * cell, 10))
    per_block = max(1, (width - label - 2) // cell)
    lines = []
    for start in range(0, len(subjects), per_block):
        block = subjects[start:start + per_block]
        lines += ["", f"subjects {start + 1}-{start + len(block)} of {len(subjects)}",
                  " " * (label + 2) + "".join(f"{start + i + 1:>{cell}}" for i in range(len(block)))]
        for slug in claims:
            if not any((slug, subject) in cells for subject in block):
                continue
            row = "".join(f"{verdict_symbol(cells.get((slug, subject))):>{cell}}" for subject in block)
            if len(slug) > label:
                lines += [slug, " " * (label + 2) + row]
            else:
                lines.append(f"{slug:<{label}}  {row}")
    return lines


def _one_line(verdict: dict) -> str:
    """A failure's summary (its first line) or an error's last line of pytest's report."""
    lines = [line.strip() for line in verdict["detail"].splitlines() if line.strip()]
    if verdict["status"] == "error":
        raised = [line for line in lines if line.startswith("E ")]
        return (raised or lines or [""])[-1].removeprefix("E").strip()
    return lines[0] if lines else ""


def unexpected_lines(report: dict, width: int, directory: str | None = None) -> list[str]:
    """The unexpected failures and errors by claim, each with its one-line summary and where its bug report is
    (report.html's anchor; without a report directory, how to write one)."""
    unexpected = [v for v in report["verdicts"]
                  if v["status"] == "error" or (v["status"] == "fail" and not v["declared"])]
    if not unexpected:
        return []
    ids = bug_ids(report)
    lines = ["", f"unexpected failures and errors ({len(unexpected)}), by claim:"]
    for slug, verdicts in itertools.groupby(unexpected, key=lambda v: v["claim"]):
        lines += folded(f"  {slug}", width, "    ")
        for verdict in verdicts:
            where = (f"{directory}/report.html#{ids[(slug, verdict['impl'])]}" if directory
                     else "write it with --report DIR")
            lines += folded(f"    {verdict_symbol(verdict)} {verdict['impl']}: {_one_line(verdict)}", width, " " * 6)
            lines += folded(f"      bug report: {where}", width, " " * 8)
    return lines


def terminal_lines(report: dict, width: int, directory: str | None = None) -> list[str]:
    """The terminal summary, no line wider than `width`: the numbered subjects, the matrix in blocks that fit,
    the legend and counts, what did not run here, then the unexpected failures and errors by claim."""
    claims, _ = grid(report)
    s = report["summary"]
    lines = [*_subject_lines(report, width), *matrix_blocks(report, width), "", *folded(LEGEND, width)]
    lines += folded(f"{len(claims)} claims checked on {len(report['impls'])} subjects: {s['pass']} pass, "
                     f"{s['expected_fail']} declared fail, {s['unexpected_fail']} unexpected fail, {s['error']} error, "
                     f"{s['skip']} skip", width)
    for item in report["unavailable"]:
        lines += folded(f"not run here: {item['target']} ({item['reason']})", width, "  ")
    return lines + unexpected_lines(report, width, directory)
