"""Known defects as declarations (CONTRACT 2; OpInfo's DecorateInfo with a prediction): the one Row type and its one
parser, for the built-in records' table (impls/expectations.toml, loaded by protocol.expectations) and for an outside
implementation's own `fn.known_defects`.

A row names a claim, the dtypes and one documented deviation (specs.deviations: a named behaviour that says, for
any call, which elements it explains and what they must be). It covers the failures that deviation explains element
by element and nothing else: any other failure of the claim is an unexpected failure. An outside implementation
declares its rows on the function:

    fn.known_defects = {
        "fully-masked-rows-zero": {"why": "a fully masked row averages the values", "dtypes": ("float64",),
                                   "deviation": "keyless-row-mean"},
        "scale-keyword-domain": {"why": "...", "dtypes": ("float64",), "deviation": "rejects",
                                 "raises": "TypeError", "match": r"scale must be a float"},
        "sdpa-formula": [{...}, {...}],   # several deviations of one claim
    }

`why`, `dtypes` and `deviation` are required; the deviation's parameters sit beside them; `reported` says where the
defect was reported (required in the table). `deviation` may also be a function of the call alone returning
{output: (mask, values)} (specs.deviations.OwnDeviation). A pattern on a failure's message declares nothing but a
raised error (`rejects`) or a checker's report (`checker-reports`): a regex over a tolerance failure would cover every
failure of its claim whatever the cause, and is refused with this form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specs.deviations import CATALOGUE, Deviation, DeviationError, deviation_from_fields

SCOPED_FORM = ('{"<claim>": {"why": "...", "dtypes": ("float64",), "deviation": "<one of specs.deviations: '
               + ", ".join(CATALOGUE) + '>", <its parameters>}}')
ENTRY_FIELDS = {"why", "dtypes", "deviation", "reported"}
PARAMETERS = {name for cls in CATALOGUE.values() for name in cls.parameters}


class DefectDeclarationError(ValueError):
    """An expectation row (or known_defects entry) that does not say which deviation explains the failure."""


@dataclass(frozen=True)
class Row:
    """One documented deviation of a subject on one claim: keyed by (subject, claim, dtype, deviation)."""

    subject: str  # a record's name (no [dtype]), or an outside implementation's target
    claim: str
    why: str
    dtypes: tuple[str, ...]
    deviation: Deviation
    reported: str = ""  # where the defect was reported: "pytorch #101967", "here: properties/test_x.py"

    def applies(self, claim: str, dtype: str) -> bool:
        """Whether this row declares its deviation for `claim` on `dtype`."""
        return claim == self.claim and dtype in self.dtypes

    def describe(self) -> str:
        return f"{self.claim} (dtypes {', '.join(self.dtypes)}; deviation {self.deviation.describe()}): {self.why}"


def _strings(value: object, what: str, where: str) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (tuple, list)) or not all(isinstance(x, str) and x for x in items):
        raise DefectDeclarationError(f"{where}: {what} must be a string or a list of strings, got {value!r}")
    return tuple(items)


def _refuse_old_scopes(entry: Mapping, where: str) -> None:
    """A `properties` scope or a `match` without a pattern deviation: the form that hid failures, refused."""
    if "properties" in entry:
        raise DefectDeclarationError(f"{where}: `properties` no longer scopes a declaration (a deviation says which "
                                     f"elements it explains, whatever property reads them); form: {SCOPED_FORM}")
    named = entry.get("deviation")
    if "match" in entry and (named is None or named in CATALOGUE) and named not in ("rejects", "checker-reports"):
        raise DefectDeclarationError(
            f"{where}: a pattern on the failure message (`match`) declares only a raised error (deviation 'rejects', "
            f"with `raises`) or a checker's report ('checker-reports'): over a tolerance failure it would cover "
            f"every failure of the claim; name the deviation that explains the elements instead: {SCOPED_FORM}")


def parse_row(subject: str, claim: str, entry: object, dtypes_available: tuple[str, ...], where: str, *,
              table: bool = False) -> Row:
    """One validated row from `entry` (a known_defects entry, or a table row's fields but subject and claim).
    `table`: a row of the reviewed table, which must also say where the defect was reported."""
    if isinstance(entry, str):
        raise DefectDeclarationError(
            f"{where}: a bare string ({entry!r}) no longer declares a defect, because it would hide every "
            f"failure of '{claim}'; say which deviation explains it: {SCOPED_FORM}")
    if not isinstance(entry, Mapping):
        raise DefectDeclarationError(f"{where}: expected a dict, got {type(entry).__name__}; form: {SCOPED_FORM}")
    _refuse_old_scopes(entry, where)
    unknown = set(entry) - ENTRY_FIELDS - PARAMETERS
    if unknown:
        raise DefectDeclarationError(f"{where}: unknown fields {sorted(unknown)}; known: {sorted(ENTRY_FIELDS)} and "
                                     f"the deviations' parameters {sorted(PARAMETERS)}")
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
    if "deviation" not in entry:
        raise DefectDeclarationError(f"{where}: `deviation` is required (the documented behaviour that explains the "
                                     f"failure); form: {SCOPED_FORM}")
    params = {key: value for key, value in entry.items() if key in PARAMETERS}
    try:
        deviation = deviation_from_fields(entry["deviation"], params, where)
    except DeviationError as exc:
        raise DefectDeclarationError(str(exc)) from None
    reported = entry.get("reported", "")
    if not isinstance(reported, str):
        raise DefectDeclarationError(f"{where}: `reported` must be a string, got {reported!r}")
    if table and not reported.strip():
        raise DefectDeclarationError(f"{where}: `reported` is required (where the defect was reported: an "
                                     f"upstream issue, or 'here: <test or commit>')")
    return Row(subject, claim, why.strip(), dtypes, deviation, reported.strip())


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
