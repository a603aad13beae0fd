"""Expected failures as rows (CONTRACT 1 extension, DESIGN.md; OpInfo's DecorateInfo): the one Row type and
its one parser, for the built-in records' table (impls/expectations.toml, loaded by protocol.expectations) and
for an outside implementation's own `fn.known_defects`.

A row names a claim *and* how it fails, so it covers that failure and nothing else. An outside
implementation declares its rows on the function:

    fn.known_defects = {
        "sdpa-formula": {"why": "overflows on huge scores", "dtypes": ("float16",),
                         "match": r"returned (nan|inf) at out"},
        "rows-sum-to-one": [{...}, {...}],   # several ways of failing one claim
    }

`why` and `dtypes` are required; so is at least one of `match` (a regex searched in the failure's message:
the symptom) and `properties` (names of the claim's property functions: an optional refinement, for two
failures a message cannot tell apart); `reported` says where the defect was reported. A failure of the
claim outside every row of it is an unexpected failure. A bare string declares nothing and is rejected,
with this form in the message. Rows of the table must name their symptom (`match`) and where it was
reported (`reported`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

SCOPED_FORM = ('{"<claim>": {"why": "...", "dtypes": ("float64",), "match": r"regex on the failure message", '
               '"properties": ("test_...",)}} (match or properties, or both)')
ENTRY_FIELDS = {"why", "dtypes", "properties", "match", "reported"}


class DefectDeclarationError(ValueError):
    """An expectation row (or known_defects entry) that does not say how the claim fails."""


@dataclass(frozen=True)
class Row:
    """One expected way a subject fails one claim: keyed by (subject, claim, dtype), scoped by its symptom."""

    subject: str  # a record's name (no [dtype]), or an outside implementation's target
    claim: str
    why: str
    dtypes: tuple[str, ...]
    properties: tuple[str, ...] = ()  # empty: any property of the claim (then `match` is set)
    match: str = ""  # empty: any message (then `properties` is set)
    reported: str = ""  # where the defect was reported: "pytorch #101967", "here: properties/test_x.py"

    def covers(self, claim: str, dtype: str, prop: str, message: str) -> bool:
        """Whether a failure of `claim` in property `prop` on `dtype` with `message` is this row's."""
        return (claim == self.claim and dtype in self.dtypes
                and (not self.properties or prop in self.properties)
                and (not self.match or re.search(self.match, message) is not None))

    def describe(self) -> str:
        parts = [f"dtypes {', '.join(self.dtypes)}"]
        if self.properties:
            parts.append(f"properties {', '.join(self.properties)}")
        if self.match:
            parts.append(f"message matching /{self.match}/")
        return f"{self.claim} ({'; '.join(parts)}): {self.why}"


def _strings(value: object, what: str, where: str) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (tuple, list)) or not all(isinstance(x, str) and x for x in items):
        raise DefectDeclarationError(f"{where}: {what} must be a string or a list of strings, got {value!r}")
    return tuple(items)


def parse_row(subject: str, claim: str, entry: object, dtypes_available: tuple[str, ...], where: str, *,
              table: bool = False) -> Row:
    """One validated row from `entry` (a known_defects entry, or a table row's fields but subject and claim).
    `table`: a row of the reviewed table, which must also name its symptom and where it was reported."""
    if isinstance(entry, str):
        raise DefectDeclarationError(
            f"{where}: a bare string ({entry!r}) no longer declares a defect, because it would hide every "
            f"failure of '{claim}'; say how it fails: {SCOPED_FORM}")
    if not isinstance(entry, Mapping):
        raise DefectDeclarationError(f"{where}: expected a dict, got {type(entry).__name__}; form: {SCOPED_FORM}")
    unknown = set(entry) - ENTRY_FIELDS
    if unknown:
        raise DefectDeclarationError(f"{where}: unknown fields {sorted(unknown)}; known: {sorted(ENTRY_FIELDS)}")
    why = entry.get("why")
    if not isinstance(why, str) or not why.strip():
        raise DefectDeclarationError(f"{where}: `why` (a sentence) is required")
    if "dtypes" not in entry:
        raise DefectDeclarationError(f"{where}: `dtypes` is required (the precisions that fail: some of "
                                     f"{dtypes_available})")
    dtypes = _strings(entry["dtypes"], "dtypes", where)
    stray = [d for d in dtypes if d not in dtypes_available]
    if stray:
        raise DefectDeclarationError(f"{where}: dtypes {stray} are not among the implementation's {dtypes_available}")
    properties = _strings(entry["properties"], "properties", where) if "properties" in entry else ()
    match = entry.get("match", "")
    if not isinstance(match, str):
        raise DefectDeclarationError(f"{where}: `match` must be a regex string, got {match!r}")
    try:
        re.compile(match)
    except re.error as exc:
        raise DefectDeclarationError(f"{where}: `match` is not a valid regex ({exc})") from None
    reported = entry.get("reported", "")
    if not isinstance(reported, str):
        raise DefectDeclarationError(f"{where}: `reported` must be a string, got {reported!r}")
    if table and not match:
        raise DefectDeclarationError(f"{where}: a row of the table names its symptom: `match`, a regex on the "
                                     f"failure message (`properties` only refine it)")
    if table and not reported.strip():
        raise DefectDeclarationError(f"{where}: `reported` is required (where the defect was reported: an "
                                     f"upstream issue, or 'here: <test or commit>')")
    if not properties and not match:
        raise DefectDeclarationError(f"{where}: name the properties that fail or a `match` on the failure "
                                     f"message (or both); form: {SCOPED_FORM}")
    return Row(subject, claim, why.strip(), dtypes, properties, match, reported.strip())


def parse_known_defects(declared: object, dtypes_available: tuple[str, ...], target: str) -> tuple[Row, ...]:
    """Every row an outside implementation declares in `fn.known_defects`, validated; `target` is the subject."""
    if declared is None:
        return ()
    if not isinstance(declared, Mapping):
        raise DefectDeclarationError(f"{target}: known_defects must be a dict {{claim: declaration}}, "
                                     f"got {type(declared).__name__}")
    rows = []
    for claim, entries in declared.items():
        listed = entries if isinstance(entries, (list, tuple)) else [entries]
        if not listed:
            raise DefectDeclarationError(f"{target}: known_defects['{claim}'] is empty")
        for i, entry in enumerate(listed):
            where = f"{target}: known_defects['{claim}']" + (f"[{i}]" if len(listed) > 1 else "")
            rows.append(parse_row(target, claim, entry, dtypes_available, where))
    return tuple(rows)
