"""`--accept-expectations FILE`: the rows of the expectations table as the run measured them, so a change of
expectations is a reviewed diff against impls/expectations.toml, never a hand-copied list.

For every implementation that ran: a row whose deviation explained an example is written as it stands, a row whose
claim the run checked on that implementation (in one of the row's dtypes) and that explained nothing is left out, a
row whose claim the run did not check (a run of some properties, -k) is kept as it stands, and a deviation accept
mode found for an example nothing declared explained (harness.api.explained_runs: the narrowest that explains every
element) becomes a new row, its `why` and `reported` to be written by the reviewer. Records that did not run keep
their rows; an implementation run by --impl gets its rows under its target, for its author to move into its
`known_defects`. A failure no documented deviation explains is listed as a problem: it needs a fix, or a deviation
of its own in specs.deviations. Rows are grouped back into the table's form: one row per subject, deviation and
dtypes, with its claims listed.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from protocol.expectation_rows import Expectation
from protocol.expectations import load_table
from specs.deviations import deviation_from_fields

WIDTH = 118  # the table's lines stay within 120 characters


def measured_rows(variants: list, outcomes: dict, triggered: set, accepted: dict,
                  builtin: frozenset[str]) -> tuple[list[Expectation], list[str]]:
    """The rows a run measured for `variants` (harness.engine.verdicts.RunState's variants, outcomes, triggered and
    accepted; `builtin`: the records' targets, whose table rows it rewrites), and one problem line per failure
    nothing explains."""
    ran = {v.impl.name for v in variants if v.impl.target in builtin}
    checked = {(variant.impl.name, variant.dtype, claim) for variant in variants for (claim, name) in outcomes
               if name == variant.name}
    kept = [row for row in load_table() if row.subject not in ran
            or not any((row.subject, dtype, row.claim) in checked for dtype in row.dtypes)]
    for variant in variants:
        for index, row in enumerate(variant.impl.expectations):
            if (variant.name, index) in triggered and row not in kept:
                kept.append(row)
    new: dict[tuple[str, str, str], set[str]] = defaultdict(set)  # (subject, deviation, claim) -> dtypes
    fields: dict[str, tuple[str, dict]] = {}
    for (name, claim), found in accepted.items():
        variant = next(v for v in variants if v.name == name)
        for deviation_name, params in found:
            deviation = deviation_from_fields(deviation_name, params, "accept")
            fields[deviation.describe()] = (deviation_name, params)
            new[(variant.impl.name, deviation.describe(), claim)].add(variant.dtype)
    for (subject, described, claim), dtypes in new.items():
        name, params = fields[described]
        deviation = deviation_from_fields(name, params, "accept")
        kept.append(Expectation(subject, claim, "measured by accept mode (say why)", tuple(sorted(dtypes)), deviation,
                        "here: accepted from a run (say where)"))
    problems = []
    for variant in variants:
        for (claim, name), found in outcomes.items():
            if name != variant.name:
                continue
            for outcome in found:
                if outcome.status == "fail" and not outcome.expected:
                    problems.append(f"({variant.name}, {claim}): no documented deviation explains "
                                    f"{outcome.detail.splitlines()[0][:160]}")
    return _merged(kept), sorted(set(problems))


def _merged(rows: Iterable[Expectation]) -> list[Expectation]:
    """Rows of one subject, claim and deviation with several dtypes joined; sorted for a stable diff."""
    dtypes: dict[tuple, dict[str, None]] = defaultdict(dict)
    first: dict[tuple, Expectation] = {}
    for row in rows:
        key = (row.subject, row.claim, row.deviation.describe())
        dtypes[key].update(dict.fromkeys(row.dtypes))
        first.setdefault(key, row)
    merged = [Expectation(row.subject, row.claim, row.why, tuple(dtypes[key]), row.deviation, row.reported)
              for key, row in first.items()]
    return sorted(merged, key=lambda row: (row.subject, row.deviation.describe(), row.dtypes, row.claim))


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def _toml_value(value: object) -> str:
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return repr(value)


def _listed(key: str, items: list[str]) -> list[str]:
    """`key = [...]`, folded to the table's width."""
    one = f"{key} = [{', '.join(map(_toml_string, items))}]"
    if len(one) <= WIDTH:
        return [one]
    lines, line = [f"{key} = ["], "   "
    for item in items:
        part = f" {_toml_string(item)},"
        if len(line) + len(part) > WIDTH:
            lines.append(line)
            line = "   "
        line += part
    return [*lines, line, "]"]


def table_text(rows: Iterable[Expectation]) -> str:
    """`rows` as impls/expectations.toml's TOML: one [[row]] per subject, deviation, dtypes, why and reported, its
    claims listed."""
    groups: dict[tuple, list[Expectation]] = defaultdict(list)
    for row in rows:
        groups[(row.subject, row.deviation.describe(), row.dtypes, row.why, row.reported)].append(row)
    blocks = ["# Written by --accept-expectations: compare with impls/expectations.toml and review the diff."]
    for (subject, _, dtypes, why, reported), members in groups.items():
        deviation = members[0].deviation
        lines = ["[[row]]", f"subject = {_toml_string(subject)}",
                 *_listed("claim", sorted(row.claim for row in members)),
                 f"dtypes = [{', '.join(map(_toml_string, dtypes))}]",
                 f"deviation = {_toml_string(deviation.name)}",
                 *(f"{key} = {_toml_value(value)}" for key, value in sorted(deviation.params.items())),
                 f"why = {_toml_string(why)}", f"reported = {_toml_string(reported)}"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def write_accepted(path: str | Path, state) -> list[str]:
    """Write the measured rows of `state` (harness.engine.verdicts.RunState) to `path`; the failures nothing
    explains."""
    rows, problems = measured_rows(state.variants, state.outcomes, state.triggered, state.accepted, state.builtin)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(table_text(rows), encoding="utf-8")
    return problems

