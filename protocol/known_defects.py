"""Known defects as scoped declarations (CONTRACT 1 extension, DESIGN.md; OpInfo's DecorateInfo).

A declaration names a claim *and* how it fails, so it covers that failure and nothing else:

    fn.known_defects = {
        "sdpa-formula": {"why": "overflows on huge scores", "dtypes": ("float16",),
                         "properties": ("test_large_scores_give_finite_correct_outputs",),
                         "match": r"returned (nan|inf) at out"},
        "rows-sum-to-one": [{...}, {...}],   # several ways of failing one claim
    }

`why` and `dtypes` are required; so is at least one of `properties` (names of the claim's
property functions) and `match` (a regex searched in the failure's message). A failure of the
claim outside every declaration of it is an unexpected failure. A bare string declares nothing
and is rejected, with this form in the message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

SCOPED_FORM = ('{"<claim>": {"why": "...", "dtypes": ("float64",), "properties": ("test_...",), '
               '"match": r"regex on the failure message"}} (properties or match, or both)')
_FIELDS = {"why", "dtypes", "properties", "match"}


class DefectDeclarationError(ValueError):
    """A known_defects entry that does not say how the claim fails."""


@dataclass(frozen=True)
class DefectScope:
    """One declared way an implementation fails one claim."""

    claim: str
    why: str
    dtypes: tuple[str, ...]
    properties: tuple[str, ...] = ()  # empty: any property of the claim (then `match` is set)
    match: str = ""  # empty: any message (then `properties` is set)

    def covers(self, claim: str, dtype: str, prop: str, message: str) -> bool:
        """Whether a failure of `claim` in property `prop` on `dtype` with `message` is this declaration."""
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
        raise DefectDeclarationError(f"{where}: {what} must be a string or a tuple of strings, got {value!r}")
    return tuple(items)


def _scope(claim: str, entry: object, dtypes_available: tuple[str, ...], where: str) -> DefectScope:
    if isinstance(entry, str):
        raise DefectDeclarationError(
            f"{where}: a bare string ({entry!r}) no longer declares a defect, because it would hide every "
            f"failure of '{claim}'; say how it fails: {SCOPED_FORM}")
    if not isinstance(entry, Mapping):
        raise DefectDeclarationError(f"{where}: expected a dict, got {type(entry).__name__}; form: {SCOPED_FORM}")
    unknown = set(entry) - _FIELDS
    if unknown:
        raise DefectDeclarationError(f"{where}: unknown fields {sorted(unknown)}; known: {sorted(_FIELDS)}")
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
    properties = _strings(entry.get("properties", ()), "properties", where) if "properties" in entry else ()
    match = entry.get("match", "")
    if not isinstance(match, str):
        raise DefectDeclarationError(f"{where}: `match` must be a regex string, got {match!r}")
    try:
        re.compile(match)
    except re.error as exc:
        raise DefectDeclarationError(f"{where}: `match` is not a valid regex ({exc})") from None
    if not properties and not match:
        raise DefectDeclarationError(f"{where}: name the properties that fail or a `match` on the failure "
                                     f"message (or both); form: {SCOPED_FORM}")
    return DefectScope(claim, why.strip(), dtypes, properties, match)


def parse_known_defects(declared: object, dtypes_available: tuple[str, ...], target: str) -> tuple[DefectScope, ...]:
    """Every scope an implementation declares, validated; `target` names it in error messages."""
    if declared is None:
        return ()
    if not isinstance(declared, Mapping):
        raise DefectDeclarationError(f"{target}: known_defects must be a dict {{claim: declaration}}, "
                                     f"got {type(declared).__name__}")
    scopes = []
    for claim, entries in declared.items():
        listed = entries if isinstance(entries, (list, tuple)) else [entries]
        if not listed:
            raise DefectDeclarationError(f"{target}: known_defects['{claim}'] is empty")
        for i, entry in enumerate(listed):
            where = f"{target}: known_defects['{claim}']" + (f"[{i}]" if len(listed) > 1 else "")
            scopes.append(_scope(claim, entry, dtypes_available, where))
    return tuple(scopes)
