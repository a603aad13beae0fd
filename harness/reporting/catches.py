"""What a deliberately wrong implementation must break, and whether a run caught it exactly.

A wrong implementation (the defect zoo, the tests' fixtures) declares nothing: it is there to be caught. Its
catches, kept beside it (zoo/catches.toml, tests/fixtures/catches.toml), say which claims must fail, unexpectedly,
in which dtypes, why, and where the bug class was reported:

    [[catch]]
    subject = "zoo/wrong.py:mask_inverted"    # the --impl target, or a record's name; a list: one catch each
    claim = ["boolean-mask-hides-keys"]       # a list: one catch each
    dtypes = ["float64"]
    why = "True read as 'may NOT attend' (nn.MultiheadAttention's convention)"
    reported = "pytorch #92554"

A run caught the subject exactly when each catch's claim failed in each of its dtypes, not as a declared failure,
and no other claim of the subject failed or errored (`missed`, read from the run's report.json, so the suite's own
tests and the zoo's runner judge a run alike).
"""

from __future__ import annotations

import functools
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

FIELDS = {"subject", "claim", "dtypes", "why", "reported"}


class CatchesError(ValueError):
    """A catches file is malformed."""


@dataclass(frozen=True)
class Catch:
    """One claim a wrong implementation must break, in its dtypes."""

    subject: str
    claim: str
    dtypes: tuple[str, ...]
    why: str
    reported: str

    def describe(self) -> str:
        return f"{self.claim} ({', '.join(self.dtypes)}): {self.why}"


def _names(value: object, what: str, where: str) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(x, str) and x for x in names):
        raise CatchesError(f"{where}: `{what}` must be a name or a non-empty list of names, got {value!r}")
    return tuple(names)


def parse_catches(text: str, source: str) -> tuple[Catch, ...]:
    """Every catch of a catches file's TOML `text`, validated."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatchesError(f"{source}: not valid TOML ({exc})") from None
    if set(data) - {"catch"}:
        raise CatchesError(f"{source}: a catches file holds [[catch]] tables only, got {sorted(set(data))}")
    catches = []
    for number, entry in enumerate(data.get("catch", []), 1):
        where = f"{source}: catch {number}"
        if set(entry) != FIELDS:
            raise CatchesError(f"{where}: a catch has exactly the fields {sorted(FIELDS)}, got {sorted(entry)}")
        for field in ("why", "reported"):
            if not isinstance(entry[field], str) or not entry[field].strip():
                raise CatchesError(f"{where}: `{field}` is a sentence")
        dtypes = _names(entry["dtypes"], "dtypes", where)
        for subject in _names(entry["subject"], "subject", where):
            for claim in _names(entry["claim"], "claim", where):
                catches.append(Catch(subject, claim, dtypes, entry["why"].strip(), entry["reported"].strip()))
    return tuple(catches)


@functools.cache
def load_catches(path: Path) -> tuple[Catch, ...]:
    return parse_catches(Path(path).read_text(encoding="utf-8"), Path(path).name)


def missed(subject: str, catches: tuple[Catch, ...], report: dict) -> tuple[str, ...]:
    """What keeps `subject` (a name as the run reports it, without [dtype]) from being caught exactly by its
    `catches` in a run's `report`: a catch whose claim did not fail unexpectedly in one of its dtypes, and a failure
    or error outside its catches (an expected failure aside: a false seed sentence's refutation, or what the
    subject's own documented deviations explain)."""
    verdicts = [v for v in report["verdicts"] if v["impl"].rpartition("[")[0] == subject]
    found = {(v["claim"], v["impl"]): v for v in verdicts}
    problems = []
    expected = set()
    for catch in catches:
        for dtype in catch.dtypes:
            variant = f"{subject}[{dtype}]"
            expected.add((catch.claim, variant))
            verdict = found.get((catch.claim, variant))
            if verdict is None or verdict["status"] != "fail" or verdict["declared"]:
                problems.append(f"{variant}: {catch.claim} not caught; "
                                f"{verdict and (verdict['status'], verdict['declared'], verdict['detail'][:300])}")
    problems += [f"{v['impl']}: {v['claim']} {v['status']} outside its catches: {v['detail'][:300]}"
                 for v in verdicts if v["status"] in ("fail", "error") and (v["claim"], v["impl"]) not in expected
                 and not (v["status"] == "fail" and v["declared"])]
    return tuple(problems)


def catches_text(catches: list[Catch]) -> str:
    """`catches` as a catches file's TOML, one [[catch]] each."""
    blocks = ["# Written by the zoo's --write-catches: compare with zoo/catches.toml and review the diff."]
    for catch in catches:
        blocks.append("\n".join([
            "[[catch]]", f"subject = {json.dumps(catch.subject)}", f"claim = [{json.dumps(catch.claim)}]",
            f"dtypes = [{', '.join(map(json.dumps, catch.dtypes))}]", f"why = {json.dumps(catch.why)}",
            f"reported = {json.dumps(catch.reported)}"]))
    return "\n\n".join(blocks) + "\n"
