"""The suite's own speed: time to verdict for one implementation of each kind, and the main job.

Each case is the command a user runs (`attention-spec check TARGET`, long regimes on, or the main job as
`tox -e report` runs it), started from a checkout's root in a fresh process. With a baseline checkout
(--suite-baseline, e.g. a `git worktree` of the previous HEAD) each case runs there too, in turn with ours, and
the result is the ratio of the two: these machines are shared, and only times taken side by side compare.
The results file (suite-<date>.json/.md beside the attention benchmarks' bench-<date>.*) keeps the times, the
ratios, and the per-record times of each run's report.json (time to verdict per record).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    target: str | None  # None: the main job (every built-in implementation)

    def command(self, report: Path) -> list[str]:
        if self.target is None:
            return [sys.executable, "-m", "pytest", "properties", "interpretations", "-n", "auto", "-q",
                    "-p", "no:cacheprovider", "--report", str(report)]
        return [sys.executable, "-m", "harness.command_line.cli", "check", self.target, "--report", str(report),
                "--", "-q"]


# the issue 20 targets: at most 30 s, 60 s, 90 s and 150 s on a 2-core machine
CASES = {
    "numpy": Case("numpy", "one NumPy implementation (attention-spec check, long regimes on)",
                  "impls.numpy.numpy_reference:reference_attention"),
    "torch": Case("torch", "one torch implementation with gradients and dropout (attention-spec check, long "
                  "regimes on)", "impls.torch.torch_flash_records:flash_tiled"),
    "cuda": Case("cuda", "one CUDA kernel executed on the CPU, with its checkers (attention-spec check, long "
                 "regimes on)", "impls.cuda.cuda_flash_simt:flash_simt_on_cpu"),
    "main": Case("main", "the main job (every claim on every built-in implementation, the report)", None),
}


def choose(names: str) -> list[Case]:
    """The cases named in a comma-separated list, in CASES' order."""
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    unknown = sorted(set(wanted) - set(CASES))
    if unknown:
        raise ValueError(f"unknown suite cases {unknown}; valid: {', '.join(CASES)}")
    return [case for name, case in CASES.items() if name in wanted]


def run(case: Case, root: Path) -> dict:
    """The case's command from `root`, timed (wall clock); its pytest status, verdict counts and record times."""
    with tempfile.TemporaryDirectory() as work:
        report = Path(work) / "report"
        environment = {k: v for k, v in os.environ.items() if k not in ("ATTN_IMPLS", "ATTN_BACKENDS")}
        environment |= {"HYPOTHESIS_PROFILE": "ci", "PYTHONPATH": str(root)}
        started = time.perf_counter()
        done = subprocess.run(case.command(report), cwd=root, env=environment, capture_output=True, text=True,
                              timeout=3600)
        seconds = time.perf_counter() - started
        found = report / "report.json"
        data = json.loads(found.read_text()) if found.exists() else {}
    statuses: dict[str, int] = {}
    for verdict in data.get("verdicts", []):
        statuses[verdict["status"]] = statuses.get(verdict["status"], 0) + 1
    return {"seconds": round(seconds, 2), "exit": done.returncode, "verdicts": statuses,
            "records": {name: times["tests"] for name, times in data.get("time_s", {}).items() if times["tests"]},
            "tail": "" if found.exists() else (done.stdout + done.stderr)[-2000:]}


def summarise(rows: list[dict], *, baseline: str | None, environment: dict) -> dict:
    for row in rows:
        before = row.get("baseline")
        row["ratio"] = round(row["ours"]["seconds"] / before["seconds"], 3) if before else None
    return {"kind": "suite-speed", "baseline": baseline, "environment": environment, "cases": rows}


def markdown(data: dict) -> str:
    side = data["baseline"] is not None
    head = "| case | what | seconds | exit |" + (" baseline seconds | ratio (ours / baseline) |" if side else "")
    lines = ["# The suite's speed", "", head, "|" + " --- |" * (head.count("|") - 1)]
    for row in data["cases"]:
        ours = row["ours"]
        cells = [row["case"], row["what"], f"{ours['seconds']:.1f}", str(ours["exit"])]
        if side and row.get("baseline"):
            cells += [f"{row['baseline']['seconds']:.1f}", f"{row['ratio']:.3f}"]
        elif side:
            cells += ["not run", "-"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Exit 0: every verdict as expected. Per-record times (seconds of tests, from each run's report):", ""]
    for row in data["cases"]:
        slowest = sorted(row["ours"]["records"].items(), key=lambda item: -item[1])[:8]
        lines.append(f"- {row['case']}: " + ", ".join(f"{name} {seconds:.1f}" for name, seconds in slowest))
    return "\n".join(lines) + "\n"


def write(data: dict, directory: Path, stem: str) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{stem}.json", directory / f"{stem}.md"]
    paths[0].write_text(json.dumps(data, indent=1) + "\n")
    paths[1].write_text(markdown(data))
    return paths
