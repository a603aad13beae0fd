"""Where a suite run spends its time, by property and by record, from pytest's `--durations=0` lines.

    python -m benchmarks.durations RUN.log [--top N]   # Markdown tables on stdout

Each line `12.34s call     properties/test_x.py::test_y[record[dtype]-...]` is one phase of one test; the
property is the test function, the record the first bracketed id (the variant) when the test takes one.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

_LINE = re.compile(r"^(?P<seconds>\d+(?:\.\d+)?)s (?P<phase>setup|call|teardown)\s+(?P<test>\S+)$")
_VARIANT = re.compile(r"^\[(?P<record>[\w.-]+\[[\w]+\])")


def parse(lines: list[str]) -> list[tuple[str, str, float]]:
    """(property, record or '-', seconds) for every duration line."""
    found = []
    for line in lines:
        match = _LINE.match(line.strip())
        if not match:
            continue
        path, _, name = match["test"].partition("::")
        function, bracket, ids = name.partition("[")
        variant = _VARIANT.match(bracket + ids)
        found.append((f"{Path(path).stem}::{function}", variant["record"] if variant else "-",
                      float(match["seconds"])))
    return found


def tables(found: list[tuple[str, str, float]], top: int = 25) -> str:
    total = sum(seconds for _, _, seconds in found)
    by_property, by_record = Counter(), Counter()
    for prop, record, seconds in found:
        by_property[prop] += seconds
        by_record[record] += seconds
    out = [f"Total of the test phases: {total:.1f} s (one core's time: with workers, more than the wall clock).", ""]
    for title, counts in (("property", by_property), ("record", by_record)):
        out += [f"| {title} | seconds | share |", "| --- | --- | --- |"]
        out += [f"| {name} | {seconds:.1f} | {seconds / total:.1%} |" for name, seconds in counts.most_common(top)]
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-"):
        print("usage: python -m benchmarks.durations RUN.log [--top N]  (a pytest run with --durations=0)")
        return 2
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 25
    found = parse(Path(argv[0]).read_text().splitlines())
    if not found:
        print(f"{argv[0]} has no duration lines: run pytest with --durations=0")
        return 1
    print(tables(found, top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
