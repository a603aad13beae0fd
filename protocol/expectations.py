"""The table of documented deviations (impls/expectations.toml): every known behaviour of the built-in records that
departs from the specification, as data, in one reviewed file.

Schema: one `[[row]]` per declaration,

    [[row]]
    subject = "hf-llama-eager"            # a record's name (no [dtype]); a list stands for one row per subject
    claim = ["sdpa-formula", "..."]       # catalogued claims; a list stands for one row per claim
    dtypes = ["float64"]                  # the precisions it is declared in (among the record's dtypes)
    deviation = "float32-softmax"         # a documented deviation (specs.deviations.CATALOGUE)
    why = "..."                           # the behaviour, in a sentence: where it comes from in the code
    reported = "here: tests/unit/..."     # where it was reported: an upstream issue, or "here: <test or commit>"
    # and the deviation's parameters, if it takes any: raises, match, masked_scores, through, across, ...

A row is keyed by (subject, claim, dtype, deviation): no two rows share a key. A cell (subject, claim, dtype) may have
several deviations; a failure of the claim is declared only when the cell's deviations explain every element of the
example (harness.engine.explanation), so a row covers what its deviation predicts and nothing else. A record (a
function decorated with protocol.registry.attention_impl) takes the rows of its name when it is loaded; an outside
implementation declares its own in `fn.attention_expectations`, parsed into the same Expectation
(protocol.expectation_rows). The harness makes a row nothing caught under the `ci` profile an error. The rows are
checked at a run's start against the records and the claims (harness.pytest_plugin.stale_rows).

TOML rather than a Python module: the table is data a reviewer reads as a diff, with no code that could compute a
row, and accept mode (harness.pytest_plugin.accept) writes the same form back from a run.
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

from protocol.expectation_rows import Expectation, ExpectationError, parse_row
from specs.tolerance import SUPPORTED_DTYPES

_TABLES: list[Path] = []  # the tables of the records' packages (impls registers impls/expectations.toml)
SECTION = "row"


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
        _load.cache_clear()


def tables() -> tuple[Path, ...]:
    """The registered tables, in registration order."""
    return tuple(_TABLES)


def _names(entry: dict, key: str, where: str) -> tuple[str, ...]:
    value = entry.pop(key, None)
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(x, str) and x for x in names):
        raise ExpectationTableError(f"{where}: `{key}` must be a name or a non-empty list of names, got {value!r}")
    return tuple(names)


def parse_table(text: str, source: str = "the expectations table") -> tuple[Expectation, ...]:
    """Every row of a table's TOML `text`, validated; `source` names it in error messages."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExpectationTableError(f"{source}: not valid TOML ({exc})") from None
    unknown = sorted(set(data) - {SECTION})
    if unknown:
        raise ExpectationTableError(f"{source}: unknown sections {unknown}; a table holds [[{SECTION}]] rows")
    rows: list[Expectation] = []
    seen: dict[tuple[str, str, str, str], str] = {}
    for number, raw in enumerate(data.get(SECTION, []), 1):
        where = f"{source}: row {number}"
        entry = dict(raw)
        subjects, claims = _names(entry, "subject", where), _names(entry, "claim", where)
        for subject in subjects:
            for claim in claims:
                try:
                    row = parse_row(subject, claim, entry, SUPPORTED_DTYPES, f"{where} ({subject}, {claim})",
                                    table=True)
                except ExpectationError as exc:
                    raise ExpectationTableError(str(exc)) from None
                for dtype in row.dtypes:
                    key = (subject, claim, dtype, row.deviation.describe())
                    if key in seen:
                        raise ExpectationTableError(f"{where}: ({subject}, {claim}, {dtype}, "
                                                    f"{row.deviation.describe()}) is already a key of {seen[key]}")
                    seen[key] = where
                rows.append(row)
    return tuple(rows)


@functools.cache
def _load(path: Path) -> tuple[Expectation, ...]:
    return parse_table(path.read_text(encoding="utf-8"), str(path.name))


def load_table(path: Path | None = None) -> tuple[Expectation, ...]:
    """The rows of the table at `path`, or of every registered table (read once)."""
    paths = tuple(_TABLES) if path is None else (Path(path),)
    return tuple(row for table in paths for row in _load(table))


def rows_for(subject: str, dtypes: tuple[str, ...], path: Path | None = None) -> tuple[Expectation, ...]:
    """The rows of `subject` in every registered table (or the one at `path`), an implementation that runs in
    `dtypes` (a row naming another dtype is an error)."""
    rows = tuple(row for row in load_table(path) if row.subject == subject)
    for row in rows:
        stray = [d for d in row.dtypes if d not in dtypes]
        if stray:
            raise ExpectationError(f"the expectations table's row ({subject}, {row.claim}) names dtypes "
                                         f"{stray}, which are not among the record's {dtypes}")
    return rows


def rows_changed(table: str, measured: str) -> tuple[list[str], list[str]]:
    """The rows (one per subject, claim, dtypes and deviation) the measured table adds to `table` and those it leaves
    out, each as a line: what a reviewer reads, whatever the two files' order, grouping and comments."""
    def rows(text: str) -> dict[tuple, str]:
        return {(row.subject, row.claim, row.dtypes, row.deviation.describe()):
                f"{row.subject} | {row.claim} | {', '.join(row.dtypes)} | {row.deviation.describe()}"
                for row in parse_table(text)}

    before, after = rows(table), rows(measured)
    return sorted(after[key] for key in after.keys() - before.keys()), sorted(
        before[key] for key in before.keys() - after.keys())
