"""The meta-test's reading: every declared cell of a run, against the same run of the implementations' twins.

    python -m tools.perturbed_cells RUN TWIN [--old-table FILE] [--json FILE]

RUN and TWIN are report directories (or report.json files) of one command, TWIN's with --perturb-declared
(harness.api.perturb: wherever a declared deviation fires, one element it does not explain moves by twice its
allowance). A declared cell is a (subject, claim, dtype) whose verdict in RUN is a failure its deviations explained;
in TWIN it must be an unexpected failure. Each cell is one of:
- caught: unexpected in TWIN, as it must be;
- hidden: still declared in TWIN: the declaration hides an error, which must never be;
- not reached: TWIN passed it, the twin moved nothing (no example where the deviation fires reached a call the
  twin perturbs; listed, with the cell's first failed property);
- refuted: the claim's seed sentence is false, and TWIN's failure is its refutation: a property written to show that
  every implementation breaks the sentence cannot tell a wrong element from the sentence's own error (the wrong
  element is the other claims' to catch); listed apart, never counted as caught.
With --old-table (the message-pattern table before deviations: rows of `subject`, `claim`, `dtypes`, `match`, and
optional `properties`), each caught cell is also judged by that table's rule (a row of its subject, claim and dtype
whose regex is found in the failure's message, among its properties when it names some): the count of the
perturbed failures the old table would have declared, hidden. Exit status 1 when a cell is hidden.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path

from harness.engine.declarations import REFUTED


def _report(path: str) -> dict:
    found = Path(path)
    return json.loads((found / "report.json" if found.is_dir() else found).read_text(encoding="utf-8"))


def _cells(report: dict) -> dict[tuple[str, str], dict]:
    return {(v["impl"], v["claim"]): v for v in report["verdicts"]}


def declared_cells(report: dict) -> list[tuple[str, str]]:
    """The (variant, claim) cells whose failure a declared deviation explained (not a refuted seed sentence)."""
    return sorted(key for key, v in _cells(report).items()
                  if v["status"] == "fail" and v.get("declared") and not v.get("why", "").startswith(REFUTED))


def _old_rows(path: Path) -> list[dict]:
    rows = []
    for raw in tomllib.loads(path.read_text(encoding="utf-8")).get("row", []):
        subjects = [raw["subject"]] if isinstance(raw["subject"], str) else raw["subject"]
        claims = [raw["claim"]] if isinstance(raw["claim"], str) else raw["claim"]
        rows += [{"subject": s, "claim": c, "dtypes": raw["dtypes"], "match": raw.get("match", ""),
                  "properties": raw.get("properties", [])} for s in subjects for c in claims]
    return rows


def old_table_covers(rows: list[dict], variant: str, claim: str, verdict: dict) -> bool:
    """Whether the message-pattern table would have declared the twin's failure of `claim` on `variant`."""
    subject, _, dtype = variant.rpartition("[")
    dtype = dtype.rstrip("]")
    properties = set(verdict.get("failed_properties", []))
    return any(row["subject"] == subject and row["claim"] == claim and dtype in row["dtypes"]
               and (not row["properties"] or properties <= set(row["properties"]))
               and (not row["match"] or re.search(row["match"], verdict["detail"]))
               for row in rows)


def judge(run: dict, twin: dict, old_rows: list[dict] | None = None) -> dict:
    """Every declared cell of `run`, sorted into caught, hidden and not reached by `twin`'s verdicts."""
    twin_cells = _cells(twin)
    result = {"cells": 0, "caught": [], "hidden": [], "not reached": [], "refuted": [], "hidden by the old table": []}
    for key in declared_cells(run):
        result["cells"] += 1
        verdict = twin_cells.get(key)
        if verdict is None or verdict["status"] not in ("fail", "error"):
            result["not reached"].append(list(key))
        elif verdict.get("declared") and verdict.get("why", "").startswith(REFUTED):
            result["refuted"].append(list(key))
        elif verdict.get("declared"):
            result["hidden"].append(list(key))
        else:
            result["caught"].append(list(key))
            if old_rows is not None and old_table_covers(old_rows, *key, verdict):
                result["hidden by the old table"].append(list(key))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("twin")
    parser.add_argument("--old-table", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    result = judge(_report(args.run), _report(args.twin), _old_rows(args.old_table) if args.old_table else None)
    print(f"declared cells tried: {result['cells']}; caught {len(result['caught'])}, hidden {len(result['hidden'])}, "
          f"not reached {len(result['not reached'])}, refuted {len(result['refuted'])}")
    if args.old_table:
        print(f"the same perturbed failures under {args.old_table.name}: {len(result['hidden by the old table'])} "
              f"of {len(result['caught'])} declared (hidden)")
    for variant, claim in result["hidden"]:
        print(f"HIDDEN {variant} {claim}")
    for variant, claim in result["not reached"]:
        print(f"not reached {variant} {claim}")
    for variant, claim in result["refuted"]:
        print(f"refuted {variant} {claim}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 1 if result["hidden"] else 0


if __name__ == "__main__":
    sys.exit(main())
