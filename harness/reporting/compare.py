"""Two runs' report.json side by side: which verdicts changed, and whether any got worse.

A verdict reads as pass, skip, declared (a failure a documented deviation or a false seed sentence
explains), fail (unexpected) or error. Severity: pass and skip 0, declared 1, fail and error 2; a
verdict got worse when its severity rose (pass -> fail, declared -> fail, pass -> declared), better
when it fell, and otherwise changed. Verdicts only one report has are added or removed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.engine.verdicts import STATUSES
from harness.reporting.report import SCHEMA

SEVERITY = {"pass": 0, "skip": 0, "declared": 1, "fail": 2, "error": 2}
READABLE_SCHEMAS = (SCHEMA - 1, SCHEMA)  # this layout and the one before (schema 1: `expected` for `declared`)
KINDS = ("worse", "better", "changed", "added", "removed")


class ReportError(Exception):
    """A report that cannot be compared: missing, not JSON, or of a layout this version does not read."""


def _label(verdict: object, file: Path) -> tuple[tuple[str, str], str]:
    """A verdict's (claim, impl) and its label."""
    if not isinstance(verdict, dict) or not {"claim", "impl", "status"} <= verdict.keys():
        raise ReportError(f"{file}: a verdict lacks claim, impl or status: {verdict!r:.200}")
    status = verdict["status"]
    if status not in STATUSES:
        raise ReportError(f"{file}: {verdict['claim']} on {verdict['impl']} has status {status!r}, "
                          f"not one of {', '.join(STATUSES)}")
    declared = verdict.get("declared", verdict.get("expected"))  # schema 1 called it `expected`
    label = "declared" if status == "fail" and declared else status
    return (verdict["claim"], verdict["impl"]), label


def load_verdicts(path: Path) -> dict[tuple[str, str], str]:
    """(claim, impl) -> label, from a report.json or the --report directory holding one."""
    file = path / "report.json" if path.is_dir() else path
    try:
        report = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(f"{file}: no such file (write one with --report DIR)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{file}: cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{file}: not JSON ({exc})") from None
    schema = report.get("schema") if isinstance(report, dict) else None
    if schema is None:
        raise ReportError(f"{file}: no schema field (not a report.json, or one written before reports had a "
                          f"schema): write it again with this version, which writes schema {SCHEMA}")
    if schema not in READABLE_SCHEMAS:
        raise ReportError(f"{file}: schema {schema!r}, which this version of attention-spec does not read "
                          f"(it reads schemas {', '.join(map(str, READABLE_SCHEMAS))}): compare with the version that "
                          "wrote it")
    verdicts = report.get("verdicts")
    if not isinstance(verdicts, list):
        raise ReportError(f"{file}: no list of verdicts")
    return dict(_label(verdict, file) for verdict in verdicts)


@dataclass(frozen=True)
class Change:
    claim: str
    impl: str
    old: str | None  # None: only the new report has it
    new: str | None  # None: only the old report has it

    @property
    def kind(self) -> str:
        if self.old is None:
            return "added"
        if self.new is None:
            return "removed"
        rise = SEVERITY[self.new] - SEVERITY[self.old]
        return "worse" if rise > 0 else "better" if rise < 0 else "changed"


def changes(old: dict[tuple[str, str], str], new: dict[tuple[str, str], str]) -> list[Change]:
    """Every verdict that differs between the two, worst kind first, then by claim and implementation."""
    found = [Change(claim, impl, old.get((claim, impl)), new.get((claim, impl)))
             for claim, impl in old.keys() | new.keys() if old.get((claim, impl)) != new.get((claim, impl))]
    return sorted(found, key=lambda c: (KINDS.index(c.kind), c.claim, c.impl))


def summary_lines(found: list[Change], compared: int) -> list[str]:
    """One line per change, then the counts of each kind."""
    width = max((len(c.claim) for c in found), default=0)
    lines = [f"{c.kind:<8} {c.claim:<{width}}  {c.impl}  {c.old or '-'} -> {c.new or '-'}" for c in found]
    counts = ", ".join(f"{sum(c.kind == kind for c in found)} {kind}" for kind in KINDS)
    lines.append(f"{counts} (of {compared} verdicts)")
    return lines
