"""What report.md and report.html both say: a verdict's symbol, a claim's tally over the implementations,
a reading's claims in this run, and the evidence tables the properties recorded (harness.api.exhibits)."""

from __future__ import annotations

from collections import defaultdict

from specs.readings import Reading

SYMBOLS = {"pass": "+", "fail": "F", "expected": "x", "error": "E", "skip": "s", None: "."}


def verdict_symbol(verdict: dict | None) -> str:
    if verdict is None:
        return SYMBOLS[None]
    if verdict["status"] == "fail" and verdict["expected"]:
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
