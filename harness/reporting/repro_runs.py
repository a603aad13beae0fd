"""A failure's repro snippet run as a user runs it, on its own in a fresh interpreter from the checkout's root, and
judged: does it fail with the failure's message? (The zoo's runs check every defect's snippet so; the tests use it.)"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

VIOLATION = "harness.api.evidence.PropertyViolation: "


def run_standalone(snippet: str, *, cwd: Path, timeout: float = 300,
                   env: dict | None = None) -> subprocess.CompletedProcess:
    """`snippet` run by a fresh interpreter in `cwd` (its output captured; TimeoutExpired past `timeout`)."""
    return subprocess.run([sys.executable, "-c", snippet], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False)


def repro_mismatch(repro: str, summary: str, details: Sequence[str], *, cwd: Path, timeout: float = 300,
                   env: dict | None = None) -> str | None:
    """None when `repro`, run on its own, fails with the message `summary` and `details`: it prints the verdict FAIL
    with them, or raises the violation again (a check called anew), or runs past `timeout` where the failure was a
    call past its limit; else what it did instead."""
    try:
        done = run_standalone(repro, cwd=cwd, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None if summary.startswith("the call took longer than") else f"it ran past {timeout:g} s"
    if done.returncode == 0:
        printed = done.stdout.splitlines()
        if printed[:1] == [f"FAIL: {summary}"] and printed[1:1 + len(details)] == list(details):
            return None
        return f"it printed {done.stdout[-500:]!r}"
    raised = [line.rstrip() for line in done.stderr.splitlines()]
    again = any(line.startswith(VIOLATION) and line.endswith(summary) for line in raised)
    if again and all(f"  {line}" in raised for line in details):
        return None
    return f"it exited {done.returncode}: {done.stderr[-500:]!r}"
