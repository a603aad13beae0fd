"""Peak resident memory of one call, measured in a fresh process.

tracemalloc sees only allocations made through Python's allocator (NumPy's), not torch's, so memory
claims about torch code need the operating system's count: the peak resident set size of the
process's address space (VmHWM; not ru_maxrss, which Linux carries across exec, so a child started
by a larger process would report its parent's peak). A child process (`python -m harness.api.peak_memory
SPEC`) loads a CONTRACT 1 function and calls it once on a small warm-up problem (lazy initialisation
is not counted); then for each sequence length it builds q, k, v, resets the peak to the resident
memory (/proc/self/clear_refs), calls the function and reads the peak: what the call added at its
peak. glibc's mmap threshold is fixed so that large blocks go back to the system when freed, and
one thread runs, so no per-thread arenas. Linux only.

A probe names the inputs the function takes: NumPy arrays (the default) or torch tensors
(`tensors="torch"`, sharing the arrays' memory), in a dtype, with batch and heads; `backward=True`
(torch tensors only) also runs the backward pass of the output against a fixed gradient, so the peak
is that of forward and backward together. The inputs, and that gradient, exist before the peak is
reset: only what the call itself allocates counts.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHILD_ENV = {
    "MALLOC_MMAP_THRESHOLD_": "65536",  # fixed: disables glibc's sliding threshold, so freed blocks are unmapped
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
WARM_UP_N = 64


class MeasurementUnavailable(RuntimeError):
    """This system cannot report resident memory the way the measurement needs."""


@dataclass(frozen=True)
class Probe:
    """A CONTRACT 1 function (module:function), its keywords, the head dim and the sequence lengths,
    and the inputs it takes: their dtype, batch and heads, NumPy arrays or torch tensors, and whether
    the backward pass runs too."""

    target: str
    sizes: tuple[int, ...]
    d: int = 16
    kwargs: dict = field(default_factory=dict)
    batch: int = 1
    heads: int = 1
    dtype: str = "float64"
    tensors: str = "numpy"  # or "torch"
    backward: bool = False

    def __post_init__(self) -> None:
        if self.tensors not in ("numpy", "torch"):
            raise ValueError(f"tensors must be 'numpy' or 'torch', got {self.tensors!r}")
        if self.backward and self.tensors != "torch":
            raise ValueError("backward=True needs tensors='torch': the backward pass is torch's autograd")


def peak_bytes(probes: Mapping[str, Probe], timeout: float = 300.0) -> dict[str, tuple[int, ...]]:
    """For each probe, the bytes one call added at its peak, per size; the children run concurrently."""
    if not os.access("/proc/self/clear_refs", os.W_OK):
        raise MeasurementUnavailable("the peak is reset through /proc/self/clear_refs, which this system lacks")
    env = {**os.environ, **CHILD_ENV, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT),
                                                                               os.environ.get("PYTHONPATH"))))}
    children = {name: subprocess.Popen([sys.executable, "-m", "harness.api.peak_memory", json.dumps(asdict(probe))],
                                       cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for name, probe in probes.items()}
    results = {}
    try:
        for name, child in children.items():
            out, err = child.communicate(timeout=timeout)
            if child.returncode != 0:
                raise RuntimeError(f"measuring {probes[name].target} failed:\n{err[-2000:]}")
            results[name] = tuple(json.loads(out))
    finally:
        for child in children.values():
            child.kill()  # a no-op for the children that finished
    return results


def growth(extra: tuple[int, ...]) -> float:
    """Peak growth from the first size to the last."""
    return extra[-1] / max(extra[0], 1)


def _status_bytes(key: str) -> int:
    """A memory field of /proc/self/status (VmRSS: resident now, VmHWM: peak resident), in bytes."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(f"{key}:"))
    return int(line.split()[1]) * 1024  # the file counts kB


def _inputs(probe: Probe, n: int) -> tuple[list, object]:
    """q, k, v as the function takes them, and the output gradient of a backward probe (else None)."""
    from specs.problems import build  # the child's imports, kept out of the parent's

    problem = build(batch=probe.batch, heads=probe.heads, heads_kv=probe.heads, n_q=n, n_k=n, d=probe.d, d_v=probe.d)
    arrays = [x.astype(probe.dtype) for x in (problem.q, problem.k, problem.v)]
    if probe.tensors == "numpy":
        return arrays, None
    import torch

    tensors = [torch.from_numpy(x).requires_grad_(probe.backward) for x in arrays]
    grad = torch.from_numpy(arrays[0].copy()) if probe.backward else None  # the output's shape (d_v == d)
    return tensors, grad


def _call(fn, probe: Probe, inputs: list, grad) -> object:
    out = fn(*inputs, **probe.kwargs)
    if probe.backward:
        out.backward(grad)
    return out


def _measure(probe: Probe) -> list[int]:
    from protocol.registry import load_impl  # module.path:function or path/to/file.py:function, as --impl takes

    fn = load_impl(probe.target).fn
    _call(fn, probe, *_inputs(probe, WARM_UP_N))
    extra = []
    for n in probe.sizes:
        inputs, grad = _inputs(probe, n)
        gc.collect()
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")  # VmHWM := VmRSS
        before = _status_bytes("VmRSS")
        out = _call(fn, probe, inputs, grad)
        extra.append(_status_bytes("VmHWM") - before)
        del out, inputs, grad
    return extra


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    print(json.dumps(_measure(Probe(**{**spec, "sizes": tuple(spec["sizes"])}))))
