"""Run the defect zoo: `python -m zoo.run [--profile ci] [--jobs 2] [NAME ...]` (what `tox -e zoo` runs).

Each defect runs in its own pytest process (`--impl` it, `--claims` the claims it must break), so one
defect's crash or slowness cannot hide another's verdict. Prints, per defect: the mistake, the claims
expected, the claims broken, the Hypothesis examples the first failure needed, the shrunk input; then
`caught N of M`. Exit status 0 only when every defect broke every claim it is expected to break.
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

from zoo.defects import DEFECTS, Defect

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Caught:
    defect: Defect
    broken: tuple[str, ...]
    examples: int | None
    shrunk: str
    output: str  # the run's output tail, for a defect that was not caught

    @property
    def caught(self) -> bool:
        return set(self.defect.breaks) <= set(self.broken)


def run_defect(defect: Defect, profile: str, workdir: Path) -> Caught:
    """One pytest process: the defect's claims' properties on the defect, with a report."""
    report_dir = workdir / defect.name
    command = [sys.executable, "-m", "pytest", "properties", "interpretations", "-q", "-p", "no:cacheprovider",
               "--impl", defect.target, "--claims", ",".join(defect.breaks),
               "--long-regimes", "no", "--report", str(report_dir)]
    env = {k: v for k, v in os.environ.items() if k not in ("ATTN_IMPLS", "ATTN_BACKENDS")}
    env["HYPOTHESIS_PROFILE"] = profile
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=1200)
    path = report_dir / "report.json"
    if not path.exists():
        return Caught(defect, (), None, "", (done.stdout + done.stderr)[-3000:])
    verdicts = [v for v in json.loads(path.read_text())["verdicts"] if v["impl"].startswith(defect.target)]
    failed = [v for v in verdicts if v["status"] == "fail"]
    smallest = min(failed, key=_input_size, default=None)
    shrunk = ""
    if smallest is not None and smallest.get("counterexample"):
        shrunk = smallest["counterexample"].get("problem") or smallest["counterexample"].get("shapes") or ""
    return Caught(defect, tuple(sorted({v["claim"] for v in failed})),
                  min((v["examples_to_failure"] for v in failed if v.get("examples_to_failure")), default=None),
                  shrunk, (done.stdout + done.stderr)[-3000:])


def _input_size(verdict: dict) -> int:
    """Elements of q, k and v in a verdict's counterexample (from its "q (b, h, n, d), ..." shapes)."""
    shapes = (verdict.get("counterexample") or {}).get("shapes") or ""
    sizes = [math.prod(int(n) for n in found.split(",") if n.strip())
             for found in re.findall(r"\(([\d, ]+)\)", shapes)[:3]]
    return sum(sizes) if sizes else sys.maxsize


def run_zoo(defects: tuple[Defect, ...] = DEFECTS, *, profile: str = "ci", jobs: int = 2) -> list[Caught]:
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda d: run_defect(d, profile, Path(tmp)), defects))


def table(results: list[Caught]) -> list[str]:
    lines = []
    for r in results:
        mark = "caught" if r.caught else "MISSED"
        lines += [f"{mark:<7} {r.defect.name}: {r.defect.mistake}",
                  f"        expected: {', '.join(r.defect.breaks)}",
                  f"        broken:   {', '.join(r.broken) or '-'}",
                  f"        examples to the first failure: {r.examples or 'none drawn (a fixed regime)'}; "
                  f"shrunk input: {r.shrunk or '-'}",
                  f"        reported: {r.defect.source}"]
    lines.append(f"caught {sum(r.caught for r in results)} of {len(results)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="run only these defects (function names)")
    parser.add_argument("--profile", default="ci", help="Hypothesis profile (default ci)")
    parser.add_argument("--jobs", type=int, default=2, help="defects run side by side (default 2)")
    args = parser.parse_args(argv)
    chosen = tuple(d for d in DEFECTS if not args.names or d.name in args.names)
    unknown = set(args.names) - {d.name for d in DEFECTS}
    if unknown:
        parser.error(f"unknown defects {sorted(unknown)}")
    results = run_zoo(chosen, profile=args.profile, jobs=args.jobs)
    print("\n".join(table(results)))
    for r in results:
        if not r.caught:
            print(f"\n--- {r.defect.name} (not caught): run output tail ---\n{r.output}")
    return 0 if all(r.caught for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
