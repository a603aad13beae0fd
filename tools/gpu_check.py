"""gpu-check: one prepared check for a lent CUDA machine, in under five minutes.

1. the device, date and versions (tools/gpu_env.py);
2. properties and interpretations on the cupy backend, `ci` profile, bounded (tools/gpu_properties.py);
3. compute-sanitizer memcheck, racecheck, synccheck on every device record's launches (tools/gpu_sanitize.py);
4. the kernels against torch SDPA (flash, cuDNN) in TFLOP/s (tools/gpu_bench.py);
5. one JSON, benchmarks/results/gpu-check-<date>-<device>.json, written after every step, and a short table.

Without a CUDA device, or with --dry-run, steps 2-4 record their plan and the reason they did not run, and the
JSON goes to the temporary directory (or --out), never into benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from tools.gpu_env import ROOT, environment

STEPS = ("properties", "sanitizers", "benchmark")
RESULTS = ROOT / "benchmarks" / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="record the environment and the plan; run nothing")
    parser.add_argument("--out", type=Path, help="the JSON's path (default: benchmarks/results/...)")
    parser.add_argument("--skip", action="append", default=[], choices=STEPS, help="leave a step out")
    parser.add_argument("--budget-s", type=float, default=285.0, help="the whole check's time (default 285)")
    parser.add_argument("--properties-s", type=float, default=130.0, help="the pytest run's limit (default 130)")
    parser.add_argument("--sanitizer-s", type=float, default=25.0, help="each sanitizer tool's limit (default 25)")
    parser.add_argument("--benchmark-s", type=float, default=75.0, help="the benchmark's limit (default 75)")
    return parser.parse_args(argv)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def result_path(result: dict, out: Path | None) -> Path:
    if out is not None:
        return out
    device = result["device"].get("name", "no-device")
    name = f"gpu-check-{result['date'][:16].replace(':', '')}-{_slug(device)}.json"
    measured = not result["dry_run"] and "unavailable" not in result["device"]
    return (RESULTS if measured else Path(tempfile.gettempdir())) / name


def _guarded(step: Callable[[], dict]) -> dict:
    try:
        return step()
    except Exception:
        return {"status": "error", "reason": traceback.format_exc().strip().splitlines()[-1],
                "traceback": traceback.format_exc().splitlines()[-12:]}


def run(options: argparse.Namespace, records: list | None = None) -> tuple[dict, Path]:
    """Every step; the result and where it was written."""
    from tools.gpu_bench import bench_step
    from tools.gpu_plan import device_records
    from tools.gpu_properties import properties_step
    from tools.gpu_sanitize import TOOLS, sanitizer_step

    started = time.monotonic()

    def left() -> float:
        return options.budget_s - (time.monotonic() - started)

    result = {"tool": "gpu-check", "dry_run": options.dry_run, **environment(), "budget_s": options.budget_s,
              "steps": {}}
    unavailable = result["device"].get("unavailable")
    reason = unavailable or ("dry run" if options.dry_run else None)
    records = device_records() if records is None else records
    result["device_records"] = [impl.name for impl in records]
    path = result_path(result, options.out)
    later = {"properties": len(TOOLS) * options.sanitizer_s + options.benchmark_s, "sanitizers": options.benchmark_s}
    steps = {
        "properties": lambda why: properties_step(why, min(options.properties_s, left() - later["properties"])),
        "sanitizers": lambda why: sanitizer_step(records, why, options.sanitizer_s, left() - later["sanitizers"]),
        "benchmark": lambda why: bench_step(records, why, min(options.benchmark_s, left() - 5)),
    }
    for name, step in steps.items():
        why = "skipped: --skip" if name in options.skip else reason
        result["steps"][name] = _guarded(lambda step=step, why=why: step(why))
        result["seconds"] = round(time.monotonic() - started, 1)
        write(result, path)
    return result, path


def write(result: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")


def exit_code(result: dict) -> int:
    """0: ran (or a dry run) and found nothing; 1: an unexpected failure, a sanitizer error, a launch that failed
    under a sanitizer or a step error; 2: no device."""
    steps = result["steps"]
    if "unavailable" in result["device"] and not result["dry_run"]:
        return 2
    summary = steps.get("properties", {}).get("summary") or {}
    errors = [kernel.get("errors") or kernel.get("launch_failed")
              for tool in steps.get("sanitizers", {}).get("tools", {}).values()
              for kernel in tool.get("kernels", {}).values()]
    bad = (summary.get("unexpected_fail", 0) or summary.get("error", 0) or any(errors)
           or any(step.get("status") == "error" for step in steps.values()))
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    from tools.gpu_table import table

    options = parse_args(argv)
    result, path = run(options)
    print("\n".join(table(result)))
    print(f"\nresults: {path}")
    return exit_code(result)
