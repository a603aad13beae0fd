"""The process compute-sanitizer watches (tools/gpu_sanitize.py): every small launch of the named device records,
once each, on arrays of their own (no CuPy memory pool, so memcheck sees each array's bounds), each between
markers naming it.

    python3 -m tools.sanitize_driver --record TARGET [--record ...] [--only LABEL ...]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

LAUNCH, DONE, FAILED = "@@launch", "@@done", "@@failed"


def to_device(arg):
    """A NumPy array in device memory (bfloat16 as its float16-sized bytes); scalars as they are."""
    import cupy

    if not isinstance(arg, np.ndarray):
        return arg
    return cupy.asarray(arg.view(np.float16) if arg.dtype.name == "bfloat16" else np.ascontiguousarray(arg))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sanitize_driver")
    parser.add_argument("--record", action="append", default=[], help="a device record's target")
    parser.add_argument("--only", action="append", default=[], help="launch only these labels")
    args = parser.parse_args(argv)
    import cupy

    from impls.cuda.runtime.on_device import launch_on_device
    from protocol.registry import load_impl
    from tools.gpu_plan import small_plan

    cupy.cuda.set_allocator(None)  # each array its own cudaMalloc: no pool slab around it to hide an overrun
    planned, _ = small_plan([load_impl(target) for target in args.record])
    for item in planned:
        if args.only and item.label not in args.only:
            continue
        print(f"{LAUNCH} {item.label}", flush=True)
        try:
            launch_on_device(item.kernel, item.launch, [to_device(a) for a in item.launch.args])
            cupy.cuda.runtime.deviceSynchronize()
        except Exception as exc:
            print(f"{FAILED} {item.label}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                  flush=True)
            continue
        print(f"{DONE} {item.label}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
