"""`--accept-expectations FILE`: what a run measured, written as rows of the expectations table, so a change of
expectations is a reviewed diff against impls/expectations.toml, never a hand-copied list.

For every built-in record that ran: a row that covered a failure is written as it stands; a row nothing
covered is left out; an unexpected failure becomes a new row whose symptom is generated from its messages
(their first lines, numbers generalised) and must be specific (`unspecific`): it never matches the empty
string, nor every failure message of the run that is not its own. Records that did not run keep their rows.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from protocol.expectations import load_table
from protocol.known_defects import Row

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
NUMBER_PATTERN = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"


def headline_pattern(message: str) -> str:
    """A regex for the first line of `message`, anchored at its start, with every number generalised."""
    line = message.splitlines()[0] if message else ""
    parts = _NUMBER.split(line)
    return "^" + NUMBER_PATTERN.join(re.escape(part).replace("\\ ", " ") for part in parts)


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


def measured_rows(variants: list, outcomes: dict, builtin: frozenset[str]) -> tuple[list[Row], list[str]]:
    """The rows a run measured for the built-in `variants` (harness.engine.verdicts.RunState's variants and outcomes),
    and one problem line per generated symptom that is not specific."""
    ran = {variant.impl.name for variant in variants if variant.impl.target in builtin}
    kept: list[Row] = [row for row in load_table() if row.subject not in ran]
    failures: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    everything: list[tuple[str, str, str]] = []  # (subject, claim, message) of every failure
    for variant in (v for v in variants if v.impl.target in builtin):
        for (claim, name), found in outcomes.items():
            if name != variant.name:
                continue
            for outcome in (o for o in found if o.status == "fail"):
                everything.append((variant.impl.name, claim, outcome.detail))
                covering = [row for row in variant.impl.known_defects
                            if row.covers(claim, variant.dtype, outcome.prop, outcome.detail)]
                if covering:
                    kept += [row for row in covering if row not in kept]
                elif not outcome.expected:  # neither a row nor a refuted seed sentence explains it
                    failures[(variant.impl.name, claim)][variant.dtype].append(outcome.detail)
    generated, problems = [], []
    for (subject, claim), by_dtype in sorted(failures.items()):
        messages = [m for found in by_dtype.values() for m in found]
        pattern = symptom(messages)
        others = [m for s, c, m in everything if (s, c) != (subject, claim)]
        reason = unspecific(pattern, others)
        if reason:
            problems.append(f"({subject}, {claim}): {reason}")
        generated.append(Row(subject, claim, f"measured: {messages[0].splitlines()[0]} (say why)",
                             tuple(sorted(by_dtype)), (), pattern, "here: accepted from a run (say where)"))
    return sorted(kept + generated, key=lambda row: (row.subject, row.claim, row.dtypes)), problems


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def table_text(rows: Iterable[Row]) -> str:
    """The rows as impls/expectations.toml's TOML, one [[row]] each."""
    blocks = ["# Written by --accept-expectations: compare with impls/expectations.toml and review the diff."]
    for row in rows:
        lines = ["[[row]]", f"subject = {_toml_string(row.subject)}", f"claim = {_toml_string(row.claim)}",
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
