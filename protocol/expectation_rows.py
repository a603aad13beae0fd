"""Expectations: what an implementation is known to get wrong, declared as data (CONTRACT 2; OpInfo's DecorateInfo
with a prediction). The one Expectation type (a row) and its one parser, for the built-in records' table
(impls/expectations.toml, loaded by protocol.expectations) and for an outside implementation's own
`fn.attention_expectations` (its deprecated name `fn.known_defects` is still read, with a DeprecationWarning).

A row names a claim, the dtypes and one documented deviation (specs.deviations: a named behaviour that says, for
any call, which elements it explains and what they must be). It covers the failures that deviation explains element
by element and nothing else: any other failure of the claim is an unexpected failure. An outside implementation
declares its rows on the function:

    fn.attention_expectations = {
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

import warnings
from collections.abc import Mapping
from dataclasses import dataclass

from specs.deviations import CATALOGUE, Deviation, DeviationError, deviation_from_fields

SCOPED_FORM = ('{"<claim>": {"why": "...", "dtypes": ("float64",), "deviation": "<one of specs.deviations: '
               + ", ".join(CATALOGUE) + '>", <its parameters>}}')
ENTRY_FIELDS = {"why", "dtypes", "deviation", "reported"}
PARAMETERS = {name for cls in CATALOGUE.values() for name in cls.parameters}


class ExpectationError(ValueError):
    """An expectation (a table row or an attention_expectations entry) that does not say which deviation explains
    the failure."""


@dataclass(frozen=True)
class Expectation:
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
        raise ExpectationError(f"{where}: {what} must be a string or a list of strings, got {value!r}")
    return tuple(items)


def _refuse_old_scopes(entry: Mapping, where: str) -> None:
    """A `properties` scope or a `match` without a pattern deviation: the form that hid failures, refused."""
    if "properties" in entry:
        raise ExpectationError(f"{where}: `properties` no longer scopes a declaration (a deviation says which "
                                     f"elements it explains, whatever property reads them); form: {SCOPED_FORM}")
    named = entry.get("deviation")
    if "match" in entry and (named is None or named in CATALOGUE) and named not in ("rejects", "checker-reports"):
        raise ExpectationError(
            f"{where}: a pattern on the failure message (`match`) declares only a raised error (deviation 'rejects', "
            f"with `raises`) or a checker's report ('checker-reports'): over a tolerance failure it would cover "
            f"every failure of the claim; name the deviation that explains the elements instead: {SCOPED_FORM}")


def parse_row(subject: str, claim: str, entry: object, dtypes_available: tuple[str, ...], where: str, *,
              table: bool = False) -> Expectation:
    """One validated row from `entry` (an attention_expectations entry, or a table row's fields but subject and claim).
    `table`: a row of the reviewed table, which must also say where the defect was reported."""
    if isinstance(entry, str):
        raise ExpectationError(
            f"{where}: a bare string ({entry!r}) no longer declares a defect, because it would hide every "
            f"failure of '{claim}'; say which deviation explains it: {SCOPED_FORM}")
    if not isinstance(entry, Mapping):
        raise ExpectationError(f"{where}: expected a dict, got {type(entry).__name__}; form: {SCOPED_FORM}")
    _refuse_old_scopes(entry, where)
    unknown = set(entry) - ENTRY_FIELDS - PARAMETERS
    if unknown:
        raise ExpectationError(f"{where}: unknown fields {sorted(unknown)}; known: {sorted(ENTRY_FIELDS)} and "
                                     f"the deviations' parameters {sorted(PARAMETERS)}")
    why = entry.get("why")
    if not isinstance(why, str) or not why.strip():
        raise ExpectationError(f"{where}: `why` (a sentence) is required")
    if "dtypes" not in entry:
        raise ExpectationError(f"{where}: `dtypes` is required (the precisions that fail: some of "
                                     f"{dtypes_available})")
    dtypes = _strings(entry["dtypes"], "dtypes", where)
    stray = [d for d in dtypes if d not in dtypes_available]
    if stray:
        raise ExpectationError(f"{where}: dtypes {stray} are not among the implementation's {dtypes_available}")
    if "deviation" not in entry:
        raise ExpectationError(f"{where}: `deviation` is required (the documented behaviour that explains the "
                                     f"failure); form: {SCOPED_FORM}")
    params = {key: value for key, value in entry.items() if key in PARAMETERS}
    try:
        deviation = deviation_from_fields(entry["deviation"], params, where)
    except DeviationError as exc:
        raise ExpectationError(str(exc)) from None
    reported = entry.get("reported", "")
    if not isinstance(reported, str):
        raise ExpectationError(f"{where}: `reported` must be a string, got {reported!r}")
    if table and not reported.strip():
        raise ExpectationError(f"{where}: `reported` is required (where the defect was reported: an "
                                     f"upstream issue, or 'here: <test or commit>')")
    return Expectation(subject, claim, why.strip(), dtypes, deviation, reported.strip())


def parse_expectations(declared: object, dtypes_available: tuple[str, ...], target: str) -> tuple[Expectation, ...]:
    """Every row an outside implementation declares in `fn.attention_expectations`, validated; `target` is the
    subject."""
    if declared is None:
        return ()
    if not isinstance(declared, Mapping):
        raise ExpectationError(f"{target}: attention_expectations must be a dict {{claim: declaration}}, "
                                     f"got {type(declared).__name__}")
    rows = []
    for claim, entries in declared.items():
        listed = entries if isinstance(entries, (list, tuple)) else [entries]
        if not listed:
            raise ExpectationError(f"{target}: attention_expectations['{claim}'] is empty")
        for i, entry in enumerate(listed):
            where = f"{target}: attention_expectations['{claim}']" + (f"[{i}]" if len(listed) > 1 else "")
            rows.append(parse_row(target, claim, entry, dtypes_available, where))
    return tuple(rows)


def declared_expectations(fn: object, target: str) -> object:
    """What `fn` declares: `fn.attention_expectations`, or `fn.known_defects` (its deprecated name), not both."""
    current, former = getattr(fn, "attention_expectations", None), getattr(fn, "known_defects", None)
    if former is None:
        return current
    if current is not None:
        raise ExpectationError(f"{target}: declares both attention_expectations and known_defects (its deprecated "
                               "name): keep attention_expectations")
    warnings.warn(f"{target}: fn.known_defects is deprecated, name it fn.attention_expectations", DeprecationWarning,
                  stacklevel=3)
    return former


DefectDeclarationError = ExpectationError  # deprecated name (docs/glossary.md)
