"""`--accept-expectations FILE`: the rows of the expectations table as the run measured them, so a change of
expectations is a reviewed diff against impls/expectations.toml, never a hand-copied list.

The table's rows are written less what the run reports as caught by no property, dtype by dtype (the judgement of
harness.engine.verdicts.uncaught_declarations, so a file accept mode wrote never draws that report on the same run):
a row of two dtypes whose deviation explained an example in one and nothing in the other, where the claim's
properties ran, is written with the one; a row whose claim the run did not check (a run of some properties, -k, or
its long regime skipped) is kept as it stands. A deviation accept mode found for an example nothing declared
explained (harness.api.explained_runs: the narrowest that explains every element) becomes a new row, its `why` and
`reported` to be written by the reviewer. Records that did not run keep their rows; an implementation run by --impl
gets its rows under its target, for its author to move into its `known_defects`. A failure no documented deviation
explains is listed as a problem: it needs a fix, or a deviation of its own in specs.deviations. Rows are grouped back
into the table's form: one row per subject, deviation and dtypes, with its claims listed.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from harness.engine.verdicts import RunState, uncaught_declarations
from protocol.expectation_rows import Expectation
from protocol.expectations import load_table
from specs.deviations import deviation_from_fields

WIDTH = 118  # the table's lines stay within 120 characters


def measured_rows(state: RunState) -> tuple[list[Expectation], list[str]]:
    """The rows `state` (harness.engine.verdicts.RunState) measured, and one problem line per failure nothing
    explains. The table's rows, and an outside implementation's own, less each dtype in which the run reports the
    row as caught by no property (harness.engine.verdicts.uncaught_declarations, the same judgement), a row left with
    no dtype dropped; then the deviations accept mode found, as new rows."""
    uncaught = {(variant.dtype, row) for variant, row in uncaught_declarations(state)}
    outside = [row for variant in state.variants if variant.impl.target not in state.builtin
               for row in variant.impl.expectations]
    kept = []
    for row in dict.fromkeys((*load_table(), *outside)):
        dtypes = tuple(dtype for dtype in row.dtypes if (dtype, row) not in uncaught)
        if dtypes:
            kept.append(dataclasses.replace(row, dtypes=dtypes))
    new: dict[tuple[str, str, str], set[str]] = defaultdict(set)  # (subject, deviation, claim) -> dtypes
    fields: dict[str, tuple[str, dict]] = {}
    for (name, claim), found in state.accepted.items():
        variant = next(v for v in state.variants if v.name == name)
        for deviation_name, params in found:
            deviation = deviation_from_fields(deviation_name, params, "accept")
            fields[deviation.describe()] = (deviation_name, params)
            new[(variant.impl.name, deviation.describe(), claim)].add(variant.dtype)
    for (subject, described, claim), dtypes in new.items():
        name, params = fields[described]
        deviation = deviation_from_fields(name, params, "accept")
        kept.append(Expectation(subject, claim, "measured by accept mode (say why)", tuple(sorted(dtypes)), deviation,
                        "here: accepted from a run (say where)"))
    problems = [f"({name}, {claim}): no documented deviation explains {outcome.detail.splitlines()[0][:160]}"
                for (claim, name), found in state.outcomes.items() for outcome in found
                if outcome.status == "fail" and not outcome.expected]
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


def write_accepted(path: str | Path, state: RunState) -> list[str]:
    """Write the measured rows of `state` (harness.engine.verdicts.RunState) to `path`; the failures nothing
    explains."""
    rows, problems = measured_rows(state)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(table_text(rows), encoding="utf-8")
    return problems

