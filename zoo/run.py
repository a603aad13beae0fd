"""Run the defect zoo: `python -m zoo.run [--profile ci] [--jobs 2] [NAME ...]` (what `tox -e zoo` runs).

Defects that break the same claims share a pytest process, at most BATCH of them (`--impl` each, `--claims` the
claims of their rows in impls/expectations.toml); each runs on exactly the properties it ran on alone. One
defect's crash or hang cannot hide another's verdict: the calls of an implementation named with --impl run in a
worker process (--isolate auto), cut at --impl-timeout. A defect is caught when
it meets exactly its rows (harness.reporting.rows_met): each row's claim fails as the row says, and nothing fails
outside a row. Prints, per defect: the mistake, the claims expected, the claims broken, the Hypothesis examples the
first failure needed, the shrunk input, what was missed; then `caught N of M`. Exit status 0 only when every defect
is caught.

`--accept-expectations FILE` (ci profile) writes the rows the runs measured, the zoo's `[[fixture]]` rows, for a
reviewed diff against the table; with `--claims` a new defect (no rows yet) runs on the claims named.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.pytest_plugin.accept import table_text
from harness.reporting.rows_met import missed_rows
from protocol.expectations import parse_sections
from protocol.known_defects import Row
from zoo.defects import DEFECTS, Defect, defect_named

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Caught:
    defect: Defect
    broken: tuple[str, ...]
    examples: int | None
    shrunk: str
    output: str  # the run's output tail, for a defect that was not caught
    missed: tuple[str, ...]  # what keeps it from meeting exactly its rows (empty: caught)
    measured: tuple[Row, ...] = ()  # with --accept-expectations: its rows as the run measured them

    @property
    def caught(self) -> bool:
        return bool(self.defect.rows) and not self.missed


BATCH = 5  # defects per process: startup (imports, collection: about 3 s) paid once, and batches that stay even


def batches(defects: tuple[Defect, ...],
            claims: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], tuple[Defect, ...]]]:
    """The defects grouped by the claims they run on (`claims`, or each one's rows'), in their order, at most BATCH
    to a group: (the claims, the group) pairs."""
    groups: dict[tuple[str, ...], list[Defect]] = {}
    for defect in defects:
        groups.setdefault(claims or tuple(sorted(defect.breaks)), []).append(defect)
    return [(key, tuple(group[i:i + BATCH])) for key, group in groups.items() for i in range(0, len(group), BATCH)]


def run_batch(defects: tuple[Defect, ...], claims: tuple[str, ...], profile: str, workdir: Path, *,
              accept: bool = False) -> list[Caught]:
    """One pytest process: the properties of `claims` on each defect, with a report; `accept`: their rows measured
    too (--accept-expectations)."""
    report_dir = workdir / defects[0].name
    accepted = workdir / f"{defects[0].name}.toml"
    command = [sys.executable, "-m", "pytest", "properties", "interpretations", "-q", "-p", "no:cacheprovider",
               *(arg for defect in defects for arg in ("--impl", defect.target)),
               "--claims", ",".join(claims), "--long-regimes", "no", "--report", str(report_dir)]
    command += ["--accept-expectations", str(accepted)] if accept else []
    env = {k: v for k, v in os.environ.items() if k not in ("ATTN_IMPLS", "ATTN_BACKENDS")}
    env["HYPOTHESIS_PROFILE"] = profile
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1200 * len(defects))
    output = (done.stdout + done.stderr)[-3000:]
    path = report_dir / "report.json"
    if not path.exists():
        return [Caught(defect, (), None, "", output, ("the run wrote no report",)) for defect in defects]
    report = json.loads(path.read_text())
    measured = parse_sections(accepted.read_text(encoding="utf-8"), str(accepted))["fixture"] \
        if accept and accepted.exists() else ()
    return [_caught(defect, report, output, measured) for defect in defects]


def _caught(defect: Defect, report: dict, output: str, measured: tuple[Row, ...] | list[Row]) -> Caught:
    """What the run's report says of one defect of its batch."""
    subject = f"{defect.target}["
    failed = [v for v in report["verdicts"] if v["impl"].startswith(subject) and v["status"] == "fail"]
    smallest = min(failed, key=_input_size, default=None)
    shrunk = ""
    if smallest is not None and smallest.get("counterexample"):
        shrunk = smallest["counterexample"].get("problem") or smallest["counterexample"].get("shapes") or ""
    return Caught(defect, tuple(sorted({v["claim"] for v in failed})),
                  min((v["examples_to_failure"] for v in failed if v.get("examples_to_failure")), default=None),
                  shrunk, output, missed_rows(defect.target, defect.rows, report),
                  tuple(row for row in measured if row.subject == defect.target))


def _input_size(verdict: dict) -> int:
    """Elements of q, k and v in a verdict's counterexample (from its "q (b, h, n, d), ..." shapes)."""
    shapes = (verdict.get("counterexample") or {}).get("shapes") or ""
    sizes = [math.prod(int(n) for n in found.split(",") if n.strip())
             for found in re.findall(r"\(([\d, ]+)\)", shapes)[:3]]
    return sum(sizes) if sizes else sys.maxsize


def run_zoo(defects: tuple[Defect, ...] = DEFECTS, *, profile: str = "ci", jobs: int = 2,
            claims: tuple[str, ...] = (), accept: bool = False) -> list[Caught]:
    """Every defect's result, in the order given."""
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=jobs) as pool:
        found = [caught for results in pool.map(
                     lambda batch: run_batch(batch[1], batch[0], profile, Path(tmp), accept=accept),
                     batches(defects, claims))
                 for caught in results]
    by_name = {caught.defect.name: caught for caught in found}
    return [by_name[defect.name] for defect in defects]


def table(results: list[Caught]) -> list[str]:
    lines = []
    for r in results:
        mark = "caught" if r.caught else "MISSED"
        lines += [f"{mark:<7} {r.defect.name}: {r.defect.mistake}",
                  f"        expected: {', '.join(r.defect.breaks)}",
                  f"        broken:   {', '.join(r.broken) or '-'}",
                  f"        examples to the first failure: {r.examples or 'none drawn (a fixed regime)'}; "
                  f"shrunk input: {r.shrunk or '-'}",
                  f"        reported: {r.defect.source or '-'}"]
        lines += [f"        missed: {line}" for line in r.missed]
    lines.append(f"caught {sum(r.caught for r in results)} of {len(results)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="run only these defects (function names)")
    parser.add_argument("--profile", default="ci", help="Hypothesis profile (default ci)")
    parser.add_argument("--jobs", type=int, default=2, help="defects run side by side (default 2)")
    parser.add_argument("--claims", default="", help="comma-separated claims to run instead of each defect's rows'")
    parser.add_argument("--accept-expectations", metavar="FILE", default=None,
                        help="write the zoo's rows as measured ([[fixture]] rows) to FILE (ci profile)")
    args = parser.parse_args(argv)
    try:
        chosen = tuple(defect_named(name) for name in args.names) or DEFECTS
    except KeyError as exc:
        parser.error(str(exc))
    if args.accept_expectations and args.profile != "ci":
        parser.error("--accept-expectations needs the derandomized ci profile")
    claims = tuple(c for c in args.claims.split(",") if c)
    unmeasured = [d.name for d in chosen if not d.rows]
    if unmeasured and not claims:
        parser.error(f"{unmeasured} have no rows in impls/expectations.toml yet: name the claims to run (--claims)")
    results = run_zoo(chosen, profile=args.profile, jobs=args.jobs, claims=claims,
                      accept=bool(args.accept_expectations))
    print("\n".join(table(results)))
    if args.accept_expectations:
        Path(args.accept_expectations).write_text(
            table_text({"fixture": [row for r in results for row in r.measured]}), encoding="utf-8")
        print(f"measured rows written to {args.accept_expectations}: review their diff against the table")
    for r in results:
        if not r.caught:
            print(f"\n--- {r.defect.name} (not caught): run output tail ---\n{r.output}")
    return 0 if all(r.caught for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
