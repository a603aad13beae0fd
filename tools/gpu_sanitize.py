"""Step 3 of gpu-check: compute-sanitizer's memcheck, racecheck and synccheck on every kernel launch of the
device records, one small shape per dtype they declare.

Per tool, one driver process (tools/sanitize_driver.py) makes every launch. When its ERROR SUMMARY is 0 and
every launch completed, each kernel has 0 errors. Otherwise each launch runs again in a process of its own,
while the tool's time lasts, so every kernel gets its own ERROR SUMMARY; a launch not reached keeps the
sanitizer lines found between its markers in the shared run, marked `attributed`.
"""

from __future__ import annotations

import re
import sys
import time

from protocol.registry import Impl
from tools.bounded import run_bounded
from tools.gpu_env import ROOT, find_sanitizer
from tools.gpu_plan import SMALL, Planned, small_plan
from tools.sanitize_driver import DONE, FAILED, LAUNCH

TOOLS = ("memcheck", "racecheck", "synccheck")
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?")
_REPORT = re.compile(r"^=========\s+(?!ERROR SUMMARY|COMPUTE-SANITIZER|RACECHECK SUMMARY|Target application)\S")
MIN_RUN_S = 3.0  # no point starting a sanitized process with less time than this


def not_launched(planned: list[Planned]) -> list[str]:
    """Catalogued kernel entries that no device record launches (so no sanitizer sees them)."""
    from impls.cuda.kernel_catalogue import KERNELS

    launched = {(p.kernel.path.resolve(), p.launch.entry) for p in planned}
    return [f"{kernel.path.name}:{entry}" for kernel in KERNELS for entry in kernel.entries
            if (kernel.path.resolve(), entry) not in launched]


def parse(output: str) -> dict:
    """ERROR SUMMARY (None if absent), the launches completed and failed, sanitizer lines per launch."""
    summary = _SUMMARY.findall(output)
    done, failed, lines, current = [], {}, {}, None
    for line in output.splitlines():
        if line.startswith(LAUNCH + " "):
            current = line[len(LAUNCH) + 1:]
        elif line.startswith(DONE + " "):
            done.append(line[len(DONE) + 1:])
        elif line.startswith(FAILED + " "):
            label, _, why = line[len(FAILED) + 1:].partition(": ")
            failed[label] = why
        elif current is not None and _REPORT.match(line):
            lines.setdefault(current, []).append(line)
    return {"summary": int(summary[-1]) if summary else None, "done": done, "failed": failed, "lines": lines}


def report_lines(output: str, limit: int = 8) -> list[str]:
    return [line for line in output.splitlines() if _REPORT.match(line)][:limit]


def _command(sanitizer: str, tool: str, targets: list[str], only: tuple[str, ...]) -> list[str]:
    command = [sanitizer, "--tool", tool, "--print-limit", "20", sys.executable, "-m", "tools.sanitize_driver"]
    for target in targets:
        command += ["--record", target]
    for label in only:
        command += ["--only", label]
    return command


def run_tool(sanitizer: str, tool: str, targets: list[str], labels: list[str], limit_s: float) -> dict:
    """One tool on every launch: {"error_summary", "seconds", "timed_out", "kernels": {label: ...}}."""
    started = time.monotonic()
    whole = run_bounded(_command(sanitizer, tool, targets, ()), limit_s, cwd=ROOT, grace_s=3)
    shared = parse(whole.output)
    result = {"error_summary": shared["summary"], "returncode": whole.returncode, "timed_out": whole.timed_out,
              "kernels": {}}
    if shared["summary"] is None:
        result["output_tail"] = whole.output.splitlines()[-15:]
    clean = shared["summary"] == 0 and set(labels) <= set(shared["done"]) | set(shared["failed"])
    for label in labels:
        if clean:
            failed = shared["failed"].get(label)
            result["kernels"][label] = {"errors": None, "launch_failed": failed} if failed else {"errors": 0}
            continue
        left = limit_s - (time.monotonic() - started)
        if left < MIN_RUN_S:
            result["kernels"][label] = {"errors": None, "reason": "skipped: time", "attributed": True,
                                        "report": shared["lines"].get(label, [])[:8]}
            continue
        alone = run_bounded(_command(sanitizer, tool, targets, (label,)), left, cwd=ROOT, grace_s=3)
        own = parse(alone.output)
        result["kernels"][label] = {"errors": own["summary"], "completed": label in own["done"],
                                    "launch_failed": own["failed"].get(label), "timed_out": alone.timed_out,
                                    "report": report_lines(alone.output)}
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def sanitizer_step(records: list[Impl], reason: str | None, limit_per_tool_s: float,
                   left_s: float | None = None) -> dict:
    """Step 3: the plan always; the sanitizer runs when `reason` (no device, dry run) is None."""
    planned, skipped = small_plan(records)
    step = {"status": "skipped", "reason": reason, "shape": list(SMALL.dims), "plan": [p.as_dict() for p in planned],
            "not_planned": skipped, "not_launched": not_launched(planned), "tools": {}}
    sanitizer = find_sanitizer()
    step["compute_sanitizer"] = sanitizer
    if reason is None and sanitizer is None:
        reason = step["reason"] = "compute-sanitizer not found (PATH, CUDA_HOME, /usr/local/cuda*)"
    if reason is None and not planned:
        reason = step["reason"] = "no device record launches a kernel"
    if reason is not None:
        return step
    step["status"] = "ran"
    targets = list(dict.fromkeys(impl.target for impl in records))
    labels = [p.label for p in planned]
    for i, tool in enumerate(TOOLS):
        limit = limit_per_tool_s if left_s is None else min(limit_per_tool_s, left_s / (len(TOOLS) - i))
        started = time.monotonic()
        step["tools"][tool] = run_tool(sanitizer, tool, targets, labels, limit)
        if left_s is not None:
            left_s -= time.monotonic() - started
    return step
