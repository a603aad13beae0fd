"""Running the suite as a user would, in a subprocess, and reading what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class SuiteRun:
    returncode: int
    output: str
    report: dict | None

    def verdict(self, claim: str, impl: str) -> dict | None:
        return next((v for v in self.report["verdicts"] if v["claim"] == claim and v["impl"] == impl), None)

    def expect_caught(self, impl: str, claims: set[str]) -> None:
        """`impl` fails each of `claims` through the property's own check, not by raising."""
        for claim in claims:
            verdict = self.verdict(claim, impl)
            assert verdict is not None and verdict["status"] == "fail", (claim, verdict, self.output[-2000:])
            assert "raised" not in verdict["detail"].splitlines()[0], verdict["detail"][:500]


def run_suite(*args: str, report_dir: Path | None = None, env: dict | None = None,
              profile: str = "ci", timeout: int = 900, root: Path = ROOT) -> SuiteRun:
    """`python -m pytest ARGS` from the repository root (or a copy of the tree at `root`) with a Hypothesis
    profile; the report if asked."""
    command = [sys.executable, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider"]
    if report_dir is not None:
        command += ["--report", str(report_dir)]
    inherited = {k: v for k, v in os.environ.items() if k not in ("ATTN_IMPLS", "ATTN_BACKENDS")}
    environment = {**inherited, "HYPOTHESIS_PROFILE": profile, **(env or {})}
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=timeout, env=environment)
    report = None
    if report_dir is not None and (report_dir / "report.json").exists():
        report = json.loads((report_dir / "report.json").read_text())
    return SuiteRun(done.returncode, done.stdout + done.stderr, report)
