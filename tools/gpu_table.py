"""gpu-check's printed summary: a few lines per step, read from its result."""

from __future__ import annotations


def _header(result: dict) -> list[str]:
    device, v = result["device"], result["versions"]
    where = (f"{device['name']} ({device['sm']}, {device['memory_gib']} GiB)" if "name" in device
             else device.get("unavailable", "?"))
    return [f"gpu-check {result['date']}{' (dry run)' if result['dry_run'] else ''}: {where}",
            f"  torch {v.get('torch')} (CUDA {v.get('torch_cuda')}), cupy {v.get('cupy')}, CUDA runtime "
            f"{v.get('cuda_runtime')}, driver {v.get('cuda_driver')}, NVRTC {v.get('nvrtc')}",
            f"  device records: {', '.join(result.get('device_records', [])) or 'none'}"]


def _not_run(name: str, step: dict) -> list[str] | None:
    if step.get("status") in ("ran", "timeout"):
        return None
    return [f"{name}: {step.get('status')} ({step.get('reason')})"]


def _properties(step: dict) -> list[str]:
    lines = _not_run("properties", step) or []
    if step.get("status") in ("ran", "timeout"):
        s = step.get("summary") or {}
        lines.append(f"properties: {step['status']} in {step.get('seconds')} s (exit {step.get('returncode')}): "
                     f"{s.get('pass', '?')} pass, {s.get('expected_fail', '?')} declared fail, "
                     f"{s.get('unexpected_fail', '?')} unexpected fail, {s.get('error', '?')} error, "
                     f"{s.get('skip', '?')} skip")
    for record, entry in (step.get("records") or {}).items():
        for failure in entry["failing_claims"]:
            lines.append(f"  {failure['status'].upper()} {failure['claim']} on {record}: {failure['detail'][:100]}")
    return lines


def _sanitizers(step: dict) -> list[str]:
    lines = _not_run("sanitizers", step) or ["sanitizers:"]
    lines += [f"  planned: {item['label']}" for item in step.get("plan", []) if step.get("status") != "ran"]
    for tool, outcome in step.get("tools", {}).items():
        lines.append(f"  {tool}: ERROR SUMMARY {outcome.get('error_summary')} in {outcome.get('seconds')} s")
        for label, kernel in outcome.get("kernels", {}).items():
            errors = kernel.get("errors")
            note = kernel.get("reason") or kernel.get("launch_failed") or ""
            lines.append(f"    {label:<60} {'?' if errors is None else errors:>4} errors  {note}".rstrip())
    lines += [f"  not launched by any record: {entry}" for entry in step.get("not_launched", [])]
    return lines


def _benchmark(step: dict) -> list[str]:
    lines = _not_run("benchmark", step) or ["benchmark (TFLOP/s, median; x: ratio to SDPA flash):"]
    rows = step.get("results") or step.get("plan", [])
    lines.append(f"  {'n':>6} {'d':>4} {'dtype':<9} {'impl':<34} {'TFLOP/s':>8} {'x flash':>8}  note")
    for row in rows:
        tflops = f"{row['tflops']:.1f}" if row.get("tflops") else "-"
        ratio = f"{row['ratio_to_flash']:.2f}" if row.get("ratio_to_flash") else "-"
        note = row.get("reason") or ("" if row.get("status") in ("ok", None) else row.get("status"))
        lines.append(f"  {row['n']:>6} {row['d']:>4} {row['dtype']:<9} {row['impl']:<34} {tflops:>8} {ratio:>8}  "
                     f"{note[:70]}".rstrip())
    return lines


def table(result: dict) -> list[str]:
    steps = result["steps"]
    lines = _header(result)
    for name, render in (("properties", _properties), ("sanitizers", _sanitizers), ("benchmark", _benchmark)):
        if name in steps:
            lines += render(steps[name])
    lines.append(f"total {result.get('seconds')} s")
    return lines
