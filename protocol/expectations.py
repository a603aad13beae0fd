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

Sections: `[[row]]` rows are the built-in records' (impls.records), checked at a run's start against the
records and the properties (harness.pytest_plugin.stale_rows) and an error under `ci` when nothing caught them;
`[[fixture]]` rows are those of the implementations the suite's own tests run (tests/fixtures/: a record's name,
or a plain function's --impl target), which those tests require caught, exactly
(tests/suite_run/test_expectations_caught.py). Both follow one schema and one key rule across the file; an
implementation, record or not, takes the rows of its name from both.

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


SECTIONS = {"row": "the built-in records' rows", "fixture": "the rows of the tests' implementations (tests/fixtures/)"}


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
        _load_sections.cache_clear()


def tables() -> tuple[Path, ...]:
    """The registered tables, in registration order."""
    return tuple(_TABLES)


def _names(entry: dict, key: str, where: str) -> tuple[str, ...]:
    value = entry.pop(key, None)
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(x, str) and x for x in names):
        raise ExpectationTableError(f"{where}: `{key}` must be a name or a non-empty list of names, got {value!r}")
    return tuple(names)


def parse_sections(text: str, source: str = "the expectations table") -> dict[str, tuple[Row, ...]]:
    """Every row of a table's TOML `text` by section (SECTIONS), validated; `source` names it in error messages."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExpectationTableError(f"{source}: not valid TOML ({exc})") from None
    unknown = sorted(set(data) - set(SECTIONS))
    if unknown:
        raise ExpectationTableError(f"{source}: unknown sections {unknown}; a table holds {list(SECTIONS)}")
    sections: dict[str, tuple[Row, ...]] = {}
    seen: dict[tuple[str, str, str], str] = {}
    for section in SECTIONS:
        rows: list[Row] = []
        for number, raw in enumerate(data.get(section, []), 1):
            where = f"{source}: {section} {number}"
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
                            raise ExpectationTableError(f"{where}: ({subject}, {claim}, {dtype}) is already a key "
                                                        f"of {seen[key]}: one row per (subject, claim, dtype)")
                        seen[key] = where
                    rows.append(row)
        sections[section] = tuple(rows)
    return sections


def _check_section(section: str) -> None:
    if section not in SECTIONS:
        raise ExpectationTableError(f"no section {section!r}; a table holds {list(SECTIONS)}")


def parse_table(text: str, source: str = "the expectations table", section: str = "row") -> tuple[Row, ...]:
    """The rows of one section (the built-in records' by default) of a table's TOML `text`, validated."""
    _check_section(section)
    return parse_sections(text, source)[section]


@functools.cache
def _load_sections(path: Path) -> dict[str, tuple[Row, ...]]:
    return parse_sections(path.read_text(encoding="utf-8"), str(path.name))


def load_table(path: Path | None = None, section: str = "row") -> tuple[Row, ...]:
    """The rows of one section (the built-in records' by default) of the table at `path`, or of every registered
    table (read once)."""
    _check_section(section)
    paths = tuple(_TABLES) if path is None else (Path(path),)
    return tuple(row for table in paths for row in _load_sections(table)[section])


def rows_for(subject: str, dtypes: tuple[str, ...], path: Path | None = None) -> tuple[Row, ...]:
    """The rows of `subject` in every section of every registered table (or of the one at `path`), an
    implementation that runs in `dtypes` (a row naming another dtype is an error)."""
    rows = tuple(row for section in SECTIONS for row in load_table(path, section) if row.subject == subject)
    for row in rows:
        stray = [d for d in row.dtypes if d not in dtypes]
        if stray:
            raise DefectDeclarationError(f"the expectations table's row ({subject}, {row.claim}) names dtypes "
                                         f"{stray}, which are not among the record's {dtypes}")
    return rows
