"""Step 2 of gpu-check: the suite's properties and interpretations on the cupy backend (the CUDA records, on
the device and on the CPU) and the triton backend (the Triton records, natively where Triton is installed), under
the `ci` Hypothesis profile, bounded in time; what its report.json says."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from tools.bounded import run_bounded
from tools.gpu_env import ROOT

IMPL_TIMEOUT_S = 20  # --impl-timeout: one implementation call longer than this fails its property


def command(report_dir: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "properties", "interpretations", "--backend", "cupy", "--backend",
            "triton", "-p", "no:cacheprovider", "--report", report_dir, "-q", "-x", "--impl-timeout",
            str(IMPL_TIMEOUT_S)]


def per_record(report: dict) -> dict[str, dict]:
    """Verdict counts per subject, with the claims that failed unexpectedly (or errored) and those declared."""
    records: dict[str, dict] = {}
    for verdict in report.get("verdicts", []):
        entry = records.setdefault(verdict["impl"], {"pass": 0, "fail": 0, "error": 0, "skip": 0,
                                                      "failing_claims": [], "declared_failures": []})
        entry[verdict["status"]] = entry.get(verdict["status"], 0) + 1
        if verdict["status"] == "fail" and verdict.get("declared"):
            entry["declared_failures"].append(verdict["claim"])
        elif verdict["status"] in ("fail", "error"):
            detail = (verdict.get("detail") or "").strip().splitlines()
            entry["failing_claims"].append({"claim": verdict["claim"], "status": verdict["status"],
                                            "detail": detail[0][:300] if detail else ""})
    return records


def summarise(report: dict) -> dict:
    return {"summary": report.get("summary"), "records": per_record(report),
            "unavailable": report.get("unavailable", []), "kernels": report.get("kernels"),
            "uncaught_expectations": report.get("uncaught_expectations", [])}


def properties_step(reason: str | None, limit_s: float) -> dict:
    """Step 2: the command always; the run when `reason` (no device, dry run) is None."""
    report_dir = tempfile.mkdtemp(prefix="gpu-check-report-")
    step = {"status": "skipped", "reason": reason, "command": command(report_dir), "limit_s": round(limit_s, 1),
            "hypothesis_profile": "ci"}
    if reason is not None:
        return step
    finished = run_bounded(step["command"], limit_s, cwd=ROOT, env={**os.environ, "HYPOTHESIS_PROFILE": "ci"})
    step |= {"status": "timeout" if finished.timed_out else "ran", "returncode": finished.returncode,
             "seconds": round(finished.seconds, 1), "output_tail": finished.output.splitlines()[-12:]}
    path = Path(report_dir) / "report.json"
    if path.is_file():
        step |= summarise(json.loads(path.read_text()))
    else:
        step["reason"] = "pytest wrote no report.json (see output_tail)"
    return step
