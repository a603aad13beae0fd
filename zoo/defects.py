"""The defect zoo: deliberately wrong implementations (zoo/wrong.py, one mistake each on a correct formula;
zoo/wrong_faces.py, the same for the varlen and kv-cache faces; zoo/declared.py, six whose one bug breaks many
claims), each known by its rows of impls/expectations.toml (`[[fixture]]`, subject = its --impl target): the claims
it must break, the symptom of each, why, and the public thread where the bug class was reported. The table is the
zoo's list: a defect is a subject of those rows, and tests/suite_run/test_zoo.py requires every wrong
implementation of zoo/ to have rows.

`tox -e zoo` (python -m zoo.run) runs each against the properties of its rows' claims under the `ci` profile and
prints what the suite caught; tests/suite_run/test_zoo.py requires every row met exactly.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import impls  # noqa: F401  (registers impls/expectations.toml, the table the zoo's rows are in)
from protocol.expectations import load_table
from protocol.known_defects import Row

MODULES = ("zoo/wrong.py", "zoo/wrong_faces.py", "zoo/declared.py")  # where the zoo's wrong implementations live


@dataclass(frozen=True)
class Defect:
    target: str  # --impl target, the subject of its rows
    rows: tuple[Row, ...]  # how it must fail (empty: a new defect, not measured yet)

    @property
    def name(self) -> str:
        return self.target.rpartition(":")[2]

    @property
    def mistake(self) -> str:
        """The mistake it models: its function's docstring, first line."""
        path, _, name = self.target.partition(":")
        doc = (getattr(_module(path), name).__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    @property
    def breaks(self) -> tuple[str, ...]:
        """The claims it must break (its rows')."""
        return tuple(sorted({row.claim for row in self.rows}))

    @property
    def source(self) -> str:
        """Where its bug class was reported (its rows' `reported`)."""
        return "; ".join(dict.fromkeys(row.reported for row in self.rows))


def _module(path: str):
    return importlib.import_module(path.removesuffix(".py").replace("/", "."))


def _zoo_defects() -> tuple[Defect, ...]:
    rows = [row for row in load_table(section="fixture") if row.subject.partition(":")[0] in MODULES]
    subjects = dict.fromkeys(row.subject for row in rows)
    return tuple(Defect(subject, tuple(row for row in rows if row.subject == subject)) for subject in subjects)


DEFECTS = _zoo_defects()


def defect_named(name: str) -> Defect:
    """The zoo's defect `name` (a function of zoo/wrong.py or zoo/declared.py), with its rows (none for a new one)."""
    for defect in DEFECTS:
        if defect.name == name:
            return defect
    for path in MODULES:
        if callable(getattr(_module(path), name, None)) and not name.startswith("_"):
            return Defect(f"{path}:{name}", ())
    raise KeyError(f"no wrong implementation {name!r} in {', '.join(MODULES)}")
