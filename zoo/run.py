"""Run the defect zoo: `python -m zoo.run [--profile ci] [--jobs 2] [NAME ...]` (what `tox -e zoo` runs).

Defects that break the same claims share a pytest process, at most BATCH of them (`--impl` each, `--claims` the
claims of their catches in zoo/catches.toml); each runs on exactly the properties it ran on alone. One defect's crash
or hang cannot hide another's verdict: the calls of an implementation named with --impl run in a worker process
(--isolate auto), cut at --impl-timeout. A defect is caught when its catches are met exactly
(harness.reporting.catches): each catch's claim fails, unexpectedly, and nothing fails outside them, and each failure's
repro snippet, run on its own in a fresh interpreter, fails with the failure's message (harness.reporting.repro_runs;
`--repros smallest` checks the smallest failure's only). Prints, per
defect: the mistake, the claims expected, the claims broken, the Hypothesis examples the first failure needed, the
shrunk input, what was missed; then `caught N of M`. Exit status 0 only when every defect is caught.

`--write-catches FILE` writes the catches the runs measured (the claims each defect broke), for a reviewed diff
against zoo/catches.toml; with `--claims` a new defect (no catches yet) runs on the claims named.
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

from harness.reporting.catches import Catch, catches_text, missed
from harness.reporting.repro_runs import repro_mismatch
from zoo.defects import DEFECTS, Defect, defect_named

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Caught:
    defect: Defect
    broken: tuple[str, ...]
    examples: int | None
    shrunk: str
    output: str  # the run's output tail, for a defect that was not caught
    missed: tuple[str, ...]  # what keeps it from being caught exactly (empty: caught)
    measured: tuple[Catch, ...] = ()  # the catches the run measured: the claims it broke, in the dtypes it failed

    @property
    def caught(self) -> bool:
        return bool(self.defect.catches) and not self.missed


BATCH = 5  # defects per process: startup (imports, collection: about 3 s) paid once, and batches that stay even
REPROS = ("all", "smallest", "none")  # which failures' repro snippets are run on their own
REPRO_TIMEOUT = 120  # seconds a repro may take (a failure that was a call past its limit runs past it)


def batches(defects: tuple[Defect, ...],
            claims: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], tuple[Defect, ...]]]:
    """The defects grouped by the claims they run on (`claims`, or each one's catches'), in their order, at most
    BATCH to a group: (the claims, the group) pairs."""
    groups: dict[tuple[str, ...], list[Defect]] = {}
    for defect in defects:
        groups.setdefault(claims or tuple(sorted(defect.breaks)), []).append(defect)
    return [(key, tuple(group[i:i + BATCH])) for key, group in groups.items() for i in range(0, len(group), BATCH)]


def run_batch(defects: tuple[Defect, ...], claims: tuple[str, ...], profile: str, workdir: Path,
              repros: str = "all") -> list[Caught]:
    """One pytest process: the properties of `claims` on each defect, with a report; then the repros."""
    report_dir = workdir / defects[0].name
    command = [sys.executable, "-m", "pytest", "properties", "interpretations", "-q", "-p", "no:cacheprovider",
               *(arg for defect in defects for arg in ("--impl", defect.target)),
               "--claims", ",".join(claims), "--long-regimes", "no", "--report", str(report_dir)]
    env = {k: v for k, v in os.environ.items() if k not in ("ATTN_IMPLS", "ATTN_BACKENDS")}
    env["HYPOTHESIS_PROFILE"] = profile
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1200 * len(defects))
    output = (done.stdout + done.stderr)[-3000:]
    path = report_dir / "report.json"
    if not path.exists():
        return [Caught(defect, (), None, "", output, ("the run wrote no report",)) for defect in defects]
    report = json.loads(path.read_text())
    return [_caught(defect, report, output, repros) for defect in defects]


def _unreproduced(verdict: dict) -> str | None:
    """Why the verdict's repro does not fail with its message when run on its own (None: it does)."""
    counterexample = verdict.get("counterexample") or {}
    if not counterexample.get("repro"):
        return "it has no repro snippet"
    return repro_mismatch(counterexample["repro"], verdict["detail"].splitlines()[0], counterexample["details"],
                          cwd=ROOT, timeout=REPRO_TIMEOUT)


def _caught(defect: Defect, report: dict, output: str, repros: str = "all") -> Caught:
    """What the run's report says of one defect of its batch."""
    subject = f"{defect.target}["
    failed = [v for v in report["verdicts"] if v["impl"].startswith(subject) and v["status"] == "fail"]
    dtypes: dict[str, list[str]] = {}
    for verdict in failed:
        dtypes.setdefault(verdict["claim"], []).append(verdict["impl"].rpartition("[")[2].rstrip("]"))
    measured = tuple(Catch(defect.target, claim, tuple(sorted(found)), defect.mistake or "(say why)",
                           defect.source or "(say where)") for claim, found in sorted(dtypes.items()))
    smallest = min(failed, key=_input_size, default=None)
    shrunk = ""
    if smallest is not None and smallest.get("counterexample"):
        shrunk = smallest["counterexample"].get("problem") or smallest["counterexample"].get("shapes") or ""
    checked = failed if repros == "all" else [smallest] if repros == "smallest" and smallest is not None else []
    unreproduced = tuple(f"the repro of {v['claim']} ({v['impl']}) does not fail with its message: {why}"
                         for v in checked if (why := _unreproduced(v)) is not None)
    return Caught(defect, tuple(sorted({v["claim"] for v in failed})),
                  min((v["examples_to_failure"] for v in failed if v.get("examples_to_failure")), default=None),
                  shrunk, output, missed(defect.target, defect.catches, report) + unreproduced, measured)


def _input_size(verdict: dict) -> int:
    """Elements of q, k and v in a verdict's counterexample (from its "q (b, h, n, d), ..." shapes)."""
    shapes = (verdict.get("counterexample") or {}).get("shapes") or ""
    sizes = [math.prod(int(n) for n in found.split(",") if n.strip())
             for found in re.findall(r"\(([\d, ]+)\)", shapes)[:3]]
    return sum(sizes) if sizes else sys.maxsize


def run_zoo(defects: tuple[Defect, ...] = DEFECTS, *, profile: str = "ci", jobs: int = 2,
            claims: tuple[str, ...] = (), repros: str = "all") -> list[Caught]:
    """Every defect's result, in the order given (`repros`: whose repro snippets are run, REPROS)."""
    if repros not in REPROS:
        raise ValueError(f"repros is one of {REPROS}, got {repros!r}")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=jobs) as pool:
        found = [caught for results in pool.map(
                     lambda batch: run_batch(batch[1], batch[0], profile, Path(tmp), repros),
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
    parser.add_argument("--repros", choices=REPROS, default="all",
                        help="run every failure's repro snippet on its own (default), the smallest failure's, or none")
    parser.add_argument("--write-catches", metavar="FILE", default=None,
                        help="write the catches the runs measured to FILE, to review against zoo/catches.toml")
    args = parser.parse_args(argv)
    try:
        chosen = tuple(defect_named(name) for name in args.names) or DEFECTS
    except KeyError as exc:
        parser.error(str(exc))
    claims = tuple(c for c in args.claims.split(",") if c)
    unmeasured = [d.name for d in chosen if not d.catches]
    if unmeasured and not claims:
        parser.error(f"{unmeasured} have no catches in zoo/catches.toml yet: name the claims to run (--claims)")
    results = run_zoo(chosen, profile=args.profile, jobs=args.jobs, claims=claims, repros=args.repros)
    print("\n".join(table(results)))
    if args.write_catches:
        measured = [catch for result in results for catch in result.measured]
        Path(args.write_catches).write_text(catches_text(measured), encoding="utf-8")
        print(f"measured catches written to {args.write_catches}: review their diff against zoo/catches.toml")
    for r in results:
        if not r.caught:
            print(f"\n--- {r.defect.name} (not caught): run output tail ---\n{r.output}")
    return 0 if all(r.caught for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
