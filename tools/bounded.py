"""A child process with a time limit: SIGINT first (pytest then still writes its report), SIGKILL after a grace
period; always the output so far."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Finished:
    returncode: int | None  # negative: ended by that signal; None: still running after SIGKILL
    output: str  # stdout and stderr together
    seconds: float
    timed_out: bool


def run_bounded(command: list[str], limit_s: float, *, cwd: Path | None = None, env: dict | None = None,
                grace_s: float = 15.0) -> Finished:
    """Run `command` for at most `limit_s` seconds (then SIGINT, then SIGKILL after `grace_s`)."""
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
    timed_out = False
    try:
        output, _ = process.communicate(timeout=max(limit_s, 0.1))
    except subprocess.TimeoutExpired:
        timed_out = True
        output = _stop(process, grace_s)
    return Finished(process.returncode, output or "", time.monotonic() - started, timed_out)


def _stop(process: subprocess.Popen, grace_s: float) -> str:
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)  # the child's own session: it and what it started, nothing else
        try:
            return process.communicate(timeout=wait_s)[0]
        except subprocess.TimeoutExpired:
            continue
    return ""
