"""The defect zoo: deliberately wrong implementations (zoo/wrong.py, one mistake each on a correct formula;
zoo/wrong_faces.py, the same for the varlen and kv-cache faces; zoo/declared.py, six whose one bug breaks many
claims), each known by its catches in zoo/catches.toml (harness.reporting.catches; subject = its --impl target): the
claims it must break, why, and the public thread where the bug class was reported. A wrong implementation declares
nothing: it is there to be caught. The catches file is the zoo's list: a defect is a subject of its catches, and
tests/suite_run/test_zoo.py requires every wrong implementation of zoo/ to have some.

`tox -e zoo` (python -m zoo.run) runs each against the properties of its catches' claims under the `ci` profile and
prints what the suite caught; tests/suite_run/test_zoo.py requires every one caught exactly.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from harness.reporting.catches import Catch, load_catches

MODULES = ("zoo/wrong.py", "zoo/wrong_faces.py", "zoo/declared.py", "zoo/wrong_triton.py",
           "zoo/wrong_sharded.py")  # the wrong implementations
CATCHES = Path(__file__).resolve().with_name("catches.toml")


@dataclass(frozen=True)
class Defect:
    target: str  # --impl target, the subject of its catches
    catches: tuple[Catch, ...]  # what it must break (empty: a new defect, not measured yet)

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
        """The claims it must break (its catches')."""
        return tuple(sorted({catch.claim for catch in self.catches}))

    @property
    def source(self) -> str:
        """Where its bug class was reported (its catches' `reported`)."""
        return "; ".join(dict.fromkeys(catch.reported for catch in self.catches))


def _module(path: str):
    return importlib.import_module(path.removesuffix(".py").replace("/", "."))


def _zoo_defects() -> tuple[Defect, ...]:
    catches = [catch for catch in load_catches(CATCHES) if catch.subject.partition(":")[0] in MODULES]
    subjects = dict.fromkeys(catch.subject for catch in catches)
    return tuple(Defect(subject, tuple(c for c in catches if c.subject == subject)) for subject in subjects)


DEFECTS = _zoo_defects()


def defect_named(name: str) -> Defect:
    """The zoo's defect `name` (a function of zoo/wrong.py or zoo/declared.py), with its catches (none for a new
    one)."""
    for defect in DEFECTS:
        if defect.name == name:
            return defect
    for path in MODULES:
        if callable(getattr(_module(path), name, None)) and not name.startswith("_"):
            return Defect(f"{path}:{name}", ())
    raise KeyError(f"no wrong implementation {name!r} in {', '.join(MODULES)}")
