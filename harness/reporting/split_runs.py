"""The suite split across machines (pytest-split: `--splits N --group i`): each group writes the outcomes of its own
tests, and `attention-spec merge` folds every group's into one run and judges it there.

A group cannot judge alone: a claim's properties, and the one property that catches a declared row, may run in
another group, so a group's verdict of a claim, or its "no property caught this declaration", would be wrong. So a
split run writes outcomes.json to its --report directory (what it selected and every test's contribution, the plain
data the pytest-xdist workers already send: harness.engine.verdicts.Contribution) and no verdicts; the merge
rebuilds the run's state from the groups (their selections must agree), folds every contribution, judges the
declarations nothing caught and writes the one report, as an unsplit run would have.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.engine.verdicts import Contribution, RunState
from protocol.registry import Unavailable, Variant, load_impl
from specs.catalogue import load_claims

OUTCOMES = "outcomes.json"
SCHEMA = "attention-spec split outcomes 1"


class SplitError(ValueError):
    """Groups that cannot be merged (a missing file, another schema, selections that disagree)."""


def write_outcomes(directory: str | Path, state: RunState, contributions: list[dict], *, group: str, profile: str,
                   derandomized: bool, duration_s: float) -> Path:
    """This group's outcomes.json in `directory`."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    data = {"schema": SCHEMA, "group": group, "profile": profile, "derandomized": derandomized,
            "duration_s": duration_s,
            "variants": [[v.impl.target, v.dtype] for v in state.variants],
            "unavailable": [[u.target, u.reason] for u in state.unavailable],
            "builtin": sorted(state.builtin), "contributions": contributions}
    path = target / OUTCOMES
    path.write_text(json.dumps(data, default=str))
    return path


@dataclass(frozen=True)
class Merged:
    state: RunState
    profile: str
    derandomized: bool
    duration_s: float
    groups: tuple[str, ...]


def _load(directory: Path) -> dict:
    path = directory / OUTCOMES if directory.is_dir() else directory
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SplitError(f"{path}: not a split group's outcomes ({exc})") from None
    if data.get("schema") != SCHEMA:
        raise SplitError(f"{path}: schema {data.get('schema')!r}, expected {SCHEMA!r}")
    return data


def merge_outcomes(directories: list[Path]) -> Merged:
    """The run the groups make together, its contributions folded (not yet judged)."""
    groups = [_load(Path(d)) for d in directories]
    if not groups:
        raise SplitError("no group to merge")
    first = groups[0]
    for key in ("variants", "unavailable", "builtin", "profile", "derandomized"):
        different = [g["group"] for g in groups if g[key] != first[key]]
        if different:
            raise SplitError(f"the groups disagree on {key}: {first['group']} and {different[0]} selected "
                             "differently (run every group with the same arguments)")
    names = [g["group"] for g in groups]
    if len(set(names)) != len(names):
        raise SplitError(f"a group is given twice: {names}")
    variants = [Variant(load_impl(target), dtype) for target, dtype in first["variants"]]
    unavailable = [Unavailable(target, reason) for target, reason in first["unavailable"]]
    state = RunState(variants, unavailable, load_claims(), builtin=frozenset(first["builtin"]))
    for group in groups:
        for data in group["contributions"]:
            state.fold(Contribution.from_data(data))
    return Merged(state, first["profile"], first["derandomized"], sum(g["duration_s"] for g in groups),
                  tuple(names))
