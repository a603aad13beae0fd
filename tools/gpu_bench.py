"""Step 4 of gpu-check: the device records' kernels against torch's scaled_dot_product_attention (FlashAttention
and cuDNN backends), non-causal, fp16 and bf16, n in SIZES, d in DIMS.

Inputs are made on the device by torch (three sets, rotated call by call); a kernel gets the same memory
through DLPack and is launched by impls.cuda.runtime.on_device.launch_on_device from the launch its record plans
(tools/gpu_plan.py), so no call copies anything to or from the host. Each measurement: a first call (compiles
and allocates), one timed on the host to project the rest (skipped when that passes the time left), warm-up,
then REPEATS calls timed with CUDA events; the median counts. TFLOP/s = 4 b h n^2 d / time.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from protocol.registry import Impl
from tools.gpu_plan import Planned, Shape, Unsupported, plan
from tools.sanitize_driver import to_device

SIZES = (1024, 4096, 16384)
DIMS = (64, 128)
DTYPES = ("float16", "bfloat16")
HEADS = 16
SETS, WARMUP, REPEATS = 3, 3, 10
MEASURE_CAP_S = 12.0  # the most one measurement may take, so one slow kernel cannot starve the rest
SDPA = (("torch-sdpa-flash", "FLASH_ATTENTION"), ("torch-sdpa-cudnn", "CUDNN_ATTENTION"))


class TooSlow(Exception):
    pass


def shape_for(n: int, d: int) -> Shape:
    """16 heads; batch * n = 16 * 4096 up to n = 4096 (fills the chip), then the flops of n = 4096."""
    return Shape(batch=max(1, min(16 * 4096 // n, 16 * 4096**2 // n**2)), heads=HEADS, n=n, d=d)


def flops(shape: Shape) -> int:
    return 4 * shape.batch * shape.heads * shape.n**2 * shape.d


def configs() -> list[tuple[int, int, str]]:
    return [(n, d, dtype) for n in SIZES for d in DIMS for dtype in DTYPES]


def bench_plan(records: list[Impl]) -> list[dict]:
    """What the benchmark would run, each record's support decided on a small shape (no GPU needed)."""
    rows = []
    for n, d, dtype in configs():
        shape = shape_for(n, d)
        base = {"n": n, "d": d, "dtype": dtype, "batch": shape.batch, "heads": shape.heads, "flops": flops(shape)}
        rows += [{**base, "impl": name} for name, _ in SDPA]
        for impl in records:
            try:
                launches = plan(impl, dtype, Shape(1, 2, 64, d))
                rows.append({**base, "impl": impl.name, "kernel": _kernel_name(launches)})
            except Unsupported as exc:
                rows.append({**base, "impl": impl.name, "status": "unsupported", "reason": str(exc)})
    return rows


def _kernel_name(launches: list[Planned]) -> str:
    return ", ".join(f"{p.kernel.name}:{p.launch.entry}" for p in launches)


def measure(call: Callable[[int], None], budget_s: float) -> dict:
    """Time `call(set_index)` with CUDA events: median and min of REPEATS, after warm-up."""
    import torch

    call(0)
    torch.cuda.synchronize()
    started = time.perf_counter()
    call(1)
    torch.cuda.synchronize()
    one = time.perf_counter() - started
    if one * (WARMUP + REPEATS) > budget_s:
        raise TooSlow(f"skipped: time (one call took {one:.2f} s; {budget_s:.0f} s left for this measurement)")
    for i in range(2, 2 + WARMUP):
        call(i % SETS)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(REPEATS):
        start.record()
        call(i % SETS)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return {"median_ms": round(statistics.median(times), 4), "min_ms": round(min(times), 4), "repeats": REPEATS}


def _sdpa(name: str, backend_name: str, sets: list, base: dict, shape: Shape, left_s: Callable[[], float]):
    """The row of one SDPA backend, and its output on set 0 (None if it did not run)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    row = {**base, "impl": name}
    try:
        with sdpa_kernel([getattr(SDPBackend, backend_name)]):  # entered once: not part of the time

            def call(i: int):
                return F.scaled_dot_product_attention(*sets[i])

            row |= _timed(call, shape, left_s)
            return row, call(0)
    except Exception as exc:
        return row | _failure(exc), None


def _kernel_call(launches: list[Planned], sets: list) -> tuple[Callable[[int], None], Callable[[], object]]:
    """Launching every planned launch on input set i, and the output after a call on set 0 (as torch)."""
    import cupy
    import torch

    from impls.cuda.runtime.on_device import launch_on_device

    fixed = [[to_device(a) if j not in p.inputs else None for j, a in enumerate(p.launch.args)] for p in launches]
    views = [[cupy.from_dlpack(x.view(torch.float16)) for x in qkv] for qkv in sets]
    per_set = [[[views[s]["qkv".index(p.inputs[j])] if j in p.inputs else fixed[m][j]
                 for j in range(len(p.launch.args))] for m, p in enumerate(launches)] for s in range(len(sets))]
    pointer = torch.cuda.current_stream().cuda_stream  # the events' stream: launch there
    stream = cupy.cuda.Stream.null if pointer == 0 else cupy.cuda.ExternalStream(pointer)

    def call(i: int) -> None:
        with stream:
            for p, args in zip(launches, per_set[i], strict=True):
                launch_on_device(p.kernel, p.launch, args)

    def output():
        last = launches[-1]
        if last.output is None:
            return None
        call(0)
        torch.cuda.synchronize()
        return torch.from_dlpack(fixed[-1][last.output]).view(sets[0][0].dtype)

    return call, output


def _difference(got, expected) -> float | None:
    if got is None or expected is None:
        return None
    return float((got.float() - expected.float()).abs().max().item())


def run_config(n: int, d: int, dtype: str, records: list[Impl], left_s: Callable[[], float],
               seen: dict[tuple, str]) -> list[dict]:
    """Every row of one (n, d, dtype): the SDPA backends, then each record."""
    import torch

    shape = shape_for(n, d)
    base = {"n": n, "d": d, "dtype": dtype, "batch": shape.batch, "heads": shape.heads, "flops": flops(shape)}
    torch_dtype = getattr(torch, dtype)
    generator = torch.Generator(device="cuda").manual_seed(n * 1000 + d)
    sets = [tuple(torch.randn(shape.dims, device="cuda", dtype=torch_dtype, generator=generator) for _ in "qkv")
            for _ in range(SETS)]
    rows, outputs = [], {}
    for name, backend in SDPA:
        row, outputs[name] = _sdpa(name, backend, sets, base, shape, left_s)
        rows.append(row)
    flash, reference = rows[0].get("tflops"), outputs[SDPA[0][0]]
    for impl in records:
        row = {**base, "impl": impl.name}
        try:
            launches = plan(impl, dtype, shape)
            row["kernel"] = _kernel_name(launches)
            key = tuple(p.signature() for p in launches)
            if key in seen:
                rows.append({**row, "status": "skipped", "reason": f"the same launches as {seen[key]}"})
                continue
            seen[key] = impl.name
            call, output = _kernel_call(launches, sets)
            row |= _timed(call, shape, left_s)
            derived = set("qkv") - {name for p in launches for name in p.inputs.values()}
            if derived:  # e.g. a paged cache built on the host from the plan's zeros
                row["note"] = f"{', '.join(sorted(derived))} derived on the host: not rotated, output not checked"
            else:
                row["max_abs_diff_vs_flash"] = _difference(output(), reference)
        except Unsupported as exc:
            row |= {"status": "unsupported", "reason": str(exc)}
        except Exception as exc:
            row |= _failure(exc)
        rows.append(row)
    for row in rows:
        if flash and row.get("tflops"):
            row["ratio_to_flash"] = round(row["tflops"] / flash, 3)
    del sets, reference, outputs
    _release()
    return rows


def _release() -> None:
    import cupy
    import torch

    cupy.get_default_memory_pool().free_all_blocks()
    torch.cuda.empty_cache()


def _timed(call: Callable[[int], object], shape: Shape, left_s: Callable[[], float]) -> dict:
    timing = measure(call, min(MEASURE_CAP_S, left_s()))
    return {"status": "ok", **timing, "tflops": round(flops(shape) / (timing["median_ms"] * 1e-3) / 1e12, 2)}


def _failure(exc: BaseException) -> dict:
    if isinstance(exc, TooSlow):
        return {"status": "skipped", "reason": str(exc)}
    text = str(exc).strip().splitlines()
    return {"status": "error", "reason": f"{type(exc).__name__}: {text[0] if text else ''}"}


def bench_step(records: list[Impl], reason: str | None, limit_s: float) -> dict:
    """Step 4: the plan always; the measurements when `reason` (no device, dry run) is None."""
    step = {"status": "skipped", "reason": reason, "limit_s": round(limit_s, 1), "repeats": REPEATS, "sets": SETS,
            "plan": bench_plan(records), "results": []}
    if reason is not None:
        return step
    deadline = time.monotonic() + limit_s
    step["status"], seen = "ran", {}
    for n, d, dtype in configs():
        if deadline - time.monotonic() < 1.0:
            step["results"] += [row if "status" in row else {**row, "status": "skipped", "reason": "skipped: time"}
                                for row in step["plan"] if (row["n"], row["d"], row["dtype"]) == (n, d, dtype)]
            continue
        step["results"] += run_config(n, d, dtype, records, lambda: deadline - time.monotonic(), seen)
    return step
