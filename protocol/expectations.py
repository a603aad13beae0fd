"""The table of expected failures (impls/expectations.toml): every known defect of the built-in records, as
data, in one reviewed file.

Schema: one `[[row]]` per expected failure,

    [[row]]
    subject = "torch-sdpa-flash-cpu"      # a record's name (no [dtype]); a list stands for one row per subject
    claim = "mask-keyword-domain"         # a catalogued claim; a list stands for one row per claim
    dtypes = ["float64", "float32"]       # the precisions that fail (among the record's dtypes)
    match = '''raised IndexError'''       # the symptom: a regex searched in the failure message (required)
    why = "..."                           # the defect, in a sentence
    reported = "here: properties/..."     # where it was reported: an upstream issue, or "here: <test or commit>"
    properties = ["test_..."]             # OPTIONAL: only where a message cannot tell two failures apart

A row is keyed by (subject, claim, dtype): no two rows share a key, so each failure has one row to blame. A
row covers exactly its symptom: its claim, its dtypes, a message its `match` finds, and one of its
`properties` when it names some (protocol.known_defects.Row.covers). A record (a function decorated with
protocol.registry.attention_impl) takes the rows of its name when it is loaded; an outside implementation
declares its own rows in `fn.known_defects`, parsed into the same Row (protocol.known_defects.parse_known_defects).
The harness (harness.engine.verdicts) makes a built-in row nothing caught under the `ci` profile an error, an
outside one a warning.

TOML rather than a Python module: the table is data a reviewer reads as a diff, with no code that could
compute a row, and the same rows are written back by a run that measures them.
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

from protocol.known_defects import DefectDeclarationError, Row, parse_row
from specs.tolerance import SUPPORTED_DTYPES

_TABLES: list[Path] = []  # the tables of the records' packages (impls registers impls/expectations.toml)


class ExpectationTableError(ValueError):
    """An expectations table is malformed."""


def register_table(path: Path) -> None:
    """Make `path` one of the tables records take their rows from: a records package registers its own when it is
    imported (impls/__init__.py), so the protocol reads the table without importing the package."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ExpectationTableError(f"no expectations table at {path}")
    if path not in _TABLES:
        _TABLES.append(path)
        load_table.cache_clear()


def tables() -> tuple[Path, ...]:
    """The registered tables, in registration order."""
    return tuple(_TABLES)


def _names(entry: dict, key: str, where: str) -> tuple[str, ...]:
    value = entry.pop(key, None)
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(x, str) and x for x in names):
        raise ExpectationTableError(f"{where}: `{key}` must be a name or a non-empty list of names, got {value!r}")
    return tuple(names)


def parse_table(text: str, source: str = "the expectations table") -> tuple[Row, ...]:
    """Every row of a table's TOML `text`, validated; `source` names it in error messages."""
    try:
        entries = tomllib.loads(text).get("row", [])
    except tomllib.TOMLDecodeError as exc:
        raise ExpectationTableError(f"{source}: not valid TOML ({exc})") from None
    rows: list[Row] = []
    seen: dict[tuple[str, str, str], str] = {}
    for number, raw in enumerate(entries, 1):
        where = f"{source}: row {number}"
        entry = dict(raw)
        subjects, claims = _names(entry, "subject", where), _names(entry, "claim", where)
        for subject in subjects:
            for claim in claims:
                try:
                    row = parse_row(subject, claim, entry, SUPPORTED_DTYPES, f"{where} ({subject}, {claim})",
                                    table=True)
                except DefectDeclarationError as exc:
                    raise ExpectationTableError(str(exc)) from None
                for dtype in row.dtypes:
                    key = (subject, claim, dtype)
                    if key in seen:
                        raise ExpectationTableError(f"{where}: ({subject}, {claim}, {dtype}) is already a key of "
                                                    f"{seen[key]}: one row per (subject, claim, dtype)")
                    seen[key] = where
                rows.append(row)
    return tuple(rows)


@functools.cache
def load_table(path: Path | None = None) -> tuple[Row, ...]:
    """The rows of the table at `path`, or of every registered table (read once)."""
    if path is None:
        return tuple(row for table in _TABLES for row in load_table(table))
    return parse_table(path.read_text(encoding="utf-8"), str(path.name))


def rows_for(subject: str, dtypes: tuple[str, ...], path: Path | None = None) -> tuple[Row, ...]:
    """The table's rows of `subject` (every registered table's, or the one at `path`), a record that runs in
    `dtypes` (a row naming another dtype is an error)."""
    rows = tuple(row for row in load_table(path) if row.subject == subject)
    for row in rows:
        stray = [d for d in row.dtypes if d not in dtypes]
        if stray:
            raise DefectDeclarationError(f"the expectations table's row ({subject}, {row.claim}) names dtypes "
                                         f"{stray}, which are not among the record's {dtypes}")
    return rows
