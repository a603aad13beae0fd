"""`--accept-expectations FILE`: what a run measured, written as rows of the expectations table, so a change of
expectations is a reviewed diff against impls/expectations.toml, never a hand-copied list.

For every implementation that ran: a row of the table that covered a failure is written as it stands; a row
nothing covered is left out; an unexpected failure becomes a new row whose symptom is generated from its messages
(their first lines, numbers generalised) and must be specific (`unspecific`): it never matches the empty
string, nor every failure message of the run that is not its own. Implementations that did not run keep their
rows. A built-in record's rows are written in the `[[row]]` section, any other implementation's (the tests' and the
zoo's, run by --impl) in `[[fixture]]`; an outside implementation's own `fn.known_defects` stay on the function.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

from protocol.expectations import SECTIONS, load_table
from protocol.known_defects import Row

# a number standing alone: the digits of a name (float64, sm_80, d_v2) are part of the name
_NUMBER = re.compile(r"(?<![A-Za-z_\d.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
NUMBER_PATTERN = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
# in a pattern: a bracketed list of (generalised) numbers
_NUMBERS = re.compile(rf"(?<=\\\[)(?:{re.escape(NUMBER_PATTERN)}, )*{re.escape(NUMBER_PATTERN)}(?=\\\])")


def headline_pattern(message: str) -> str:
    """A regex for the first line of `message`, anchored at its start, with every number generalised (not the
    digits of a name: float64 stays float64) and every bracketed list of numbers generalised to any length."""
    line = message.splitlines()[0] if message else ""
    parts = _NUMBER.split(line)
    pattern = NUMBER_PATTERN.join(re.escape(part).replace("\\ ", " ") for part in parts)
    # a bracketed list of numbers (an index, the keys a row sees) stands for a list of any length
    return "^" + _NUMBERS.sub(lambda _: f"{NUMBER_PATTERN}(?:, {NUMBER_PATTERN})*", pattern)


def symptom(messages: Iterable[str]) -> str:
    """One regex matching each of `messages` by its first line (an alternation when the lines differ)."""
    patterns = sorted({headline_pattern(m) for m in messages})
    if not patterns:
        raise ValueError("a symptom needs at least one failure message")
    return patterns[0] if len(patterns) == 1 else "|".join(patterns)


def unspecific(pattern: str, others: list[str]) -> str | None:
    """Why `pattern` is not a specific symptom (None when it is): it matches the empty string, or it matches every
    one of `others`, the failure messages that are not its own."""
    if re.search(pattern, "") is not None:
        return f"/{pattern}/ matches the empty string"
    if others and all(re.search(pattern, message) for message in others):
        return f"/{pattern}/ matches every other failure message ({len(others)})"
    return None


def measured_rows(variants: list, outcomes: dict, builtin: frozenset[str]) -> tuple[dict[str, list[Row]], list[str]]:
    """The rows a run measured for every one of `variants` (harness.engine.verdicts.RunState's variants and
    outcomes), by section of the table (`builtin`: the built-in records' targets), and one problem line per
    generated symptom that is not specific."""
    section_of = {v.impl.name: "row" if v.impl.target in builtin else "fixture" for v in variants}
    table = {section: load_table(section=section) for section in SECTIONS}
    tabled = {row for rows in table.values() for row in rows}
    kept = {section: [row for row in rows if row.subject not in section_of] for section, rows in table.items()}
    failures: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    everything: list[tuple[str, str, str]] = []  # (subject, claim, message) of every failure
    for variant in variants:
        for (claim, name), found in outcomes.items():
            if name != variant.name:
                continue
            for outcome in (o for o in found if o.status == "fail"):
                everything.append((variant.impl.name, claim, outcome.detail))
                covering = [row for row in variant.impl.known_defects
                            if row.covers(claim, variant.dtype, outcome.prop, outcome.detail)]
                section = section_of[variant.impl.name]
                # a record's rows are all the table's; another implementation's own known_defects stay on it
                kept[section] += [row for row in covering if (section == "row" or row in tabled)
                                  and row not in kept[section]]
                # each failure neither a row nor a refuted seed sentence explains, judged apart from any declared
                # one reported beside it (harness.engine.verdicts.blame)
                if outcome.undeclared:
                    failures[(variant.impl.name, claim)][variant.dtype] += outcome.undeclared
    problems = []
    for (subject, claim), by_dtype in sorted(failures.items()):
        messages = [m for found in by_dtype.values() for m in found]
        pattern = symptom(messages)
        others = [m for s, c, m in everything if (s, c) != (subject, claim)]
        reason = unspecific(pattern, others)
        if reason:
            problems.append(f"({subject}, {claim}): {reason}")
        kept[section_of[subject]].append(Row(subject, claim, f"measured: {messages[0].splitlines()[0]} (say why)",
                                             tuple(sorted(by_dtype)), (), pattern,
                                             "here: accepted from a run (say where)"))
    ordered = {section: sorted(rows, key=lambda row: (row.subject, row.claim, row.dtypes))
               for section, rows in kept.items()}
    return ordered, problems


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def table_text(sections: Mapping[str, Iterable[Row]]) -> str:
    """The rows of each section as impls/expectations.toml's TOML, one [[<section>]] each."""
    blocks = ["# Written by --accept-expectations: compare with impls/expectations.toml and review the diff."]
    for section, row in ((section, row) for section, rows in sections.items() for row in rows):
        lines = [f"[[{section}]]", f"subject = {_toml_string(row.subject)}", f"claim = {_toml_string(row.claim)}",
                 f"dtypes = [{', '.join(map(_toml_string, row.dtypes))}]", f"match = {_toml_string(row.match)}"]
        if row.properties:
            lines.append(f"properties = [{', '.join(map(_toml_string, row.properties))}]")
        lines += [f"why = {_toml_string(row.why)}", f"reported = {_toml_string(row.reported)}"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def write_accepted(path: str | Path, variants: list, outcomes: dict, builtin: frozenset[str]) -> list[str]:
    """Write the measured rows to `path`; the problems of generated symptoms that are not specific."""
    rows, problems = measured_rows(variants, outcomes, builtin)
    Path(path).write_text(table_text(rows), encoding="utf-8")
    return problems
