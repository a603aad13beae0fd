"""Which kernel launches gpu-check makes, found through the records: each built-in device record (made by
impls/cuda/cuda_records.py `cuda_records`) is called inside impls.cuda.runtime.on_device.planning() on inputs of a shape
and dtype, which yields the launches it would make (kernel, entry, grid, block, shared memory, arguments) and runs
nothing, so the plan needs no GPU.

NumPy has no bfloat16 without ml_dtypes (not on the lent machine): a record declaring bfloat16 is then planned
on float16 inputs and launched through the `__nv_bfloat16` twin of each `__half` entry, on the same bytes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from impls.cuda.cuda_records import device_unavailable
from impls.cuda.runtime.launch import KernelSource, Launch
from impls.cuda.runtime.on_device import planning
from impls.records import BUILTIN_TARGETS
from protocol.registry import Impl, ImplLoadError, load_impl

HALF, BF16 = "__half", "__nv_bfloat16"


class Unsupported(Exception):
    """The record cannot make this launch (dtype, shape): the message says why."""


@dataclass(frozen=True)
class Shape:
    batch: int
    heads: int
    n: int
    d: int

    @property
    def dims(self) -> tuple[int, int, int, int]:
        return (self.batch, self.heads, self.n, self.d)


@dataclass(frozen=True)
class Planned:
    """One launch a record makes for one call."""

    record: str
    dtype: str
    kernel: KernelSource
    launch: Launch
    inputs: dict[int, str]  # argument index -> "q", "k" or "v" (the record passed that input array itself)
    output: int | None  # argument index of the output the record returns, when it returns an argument
    via: str | None = None  # how it was planned, when not directly

    @property
    def label(self) -> str:
        return f"{self.record}[{self.dtype}] {self.kernel.name}:{self.launch.entry}"

    def signature(self) -> tuple:
        """What makes two launches the same work: kernel, entry, layout and scalar arguments."""
        scalars = tuple(a.item() for a in self.launch.args if not isinstance(a, np.ndarray))
        return (str(self.kernel.path), self.launch.entry, self.launch.grid, self.launch.block,
                self.launch.shared_bytes, scalars)

    def as_dict(self) -> dict:
        return {"label": self.label, "record": self.record, "dtype": self.dtype, "kernel": self.kernel.name,
                "entry": self.launch.entry, "grid": list(self.launch.grid), "block": list(self.launch.block),
                "shared_bytes": self.launch.shared_bytes, "via": self.via}


def device_records(targets: tuple[str, ...] = BUILTIN_TARGETS) -> list[Impl]:
    """The built-in records that run a CUDA kernel through CuPy on the device (whether or not one is here)."""
    found = []
    for target in targets:
        try:
            impl = load_impl(target)
        except (ImportError, ImplLoadError):
            continue  # the main run reports these
        if getattr(impl.fn, "attention_probe", None) is device_unavailable:
            found.append(impl)
    return found


def host_dtype(dtype: str) -> tuple[np.dtype, str | None]:
    """The NumPy dtype to plan `dtype` with, and a note when float16 stands in for bfloat16."""
    if dtype != "bfloat16":
        return np.dtype(dtype), None
    try:
        import ml_dtypes
    except ImportError:
        return np.dtype(np.float16), f"planned on float16 (no ml_dtypes here), launched as {BF16}"
    return np.dtype(ml_dtypes.bfloat16), None


def _inputs(shape: Shape, dtype: np.dtype, rng: np.random.Generator | None) -> tuple[np.ndarray, ...]:
    if rng is None:  # zeros: pages the record never reads cost nothing
        return tuple(np.zeros(shape.dims, dtype=dtype) for _ in range(3))
    return tuple(rng.standard_normal(shape.dims, dtype=np.float32).astype(dtype) for _ in range(3))


def plan(impl: Impl, dtype: str, shape: Shape, rng: np.random.Generator | None = None) -> list[Planned]:
    """The launches of one non-causal call of `impl` on q, k, v of `shape` (random with `rng`, else zeros)."""
    if dtype not in impl.capabilities.dtypes:
        raise Unsupported(f"{impl.name} declares dtypes {', '.join(impl.capabilities.dtypes)}, not {dtype}")
    numpy_dtype, via = host_dtype(dtype)
    q, k, v = _inputs(shape, numpy_dtype, rng)
    with planning() as launches:
        try:
            returned = impl.fn(q, k, v)
        except Exception as exc:
            raise Unsupported(f"{impl.name} on {dtype} {shape.dims}: {type(exc).__name__}: {exc}") from None
    if not launches:
        raise Unsupported(f"{impl.name} made no kernel launch")
    out = returned[0] if isinstance(returned, tuple) else returned
    found = []
    for i, (kernel, launch) in enumerate(launches):
        last = i == len(launches) - 1
        if via:
            launch = _bfloat16_twin(kernel, launch)
        found.append(Planned(
            record=impl.name, dtype=dtype, kernel=kernel, launch=launch,
            inputs={j: name for j, a in enumerate(launch.args) for name, x in zip("qkv", (q, k, v), strict=True)
                    if a is x},
            output=next((j for j, a in enumerate(launch.args) if a is out), None) if last else None, via=via))
    return found


def _bfloat16_twin(kernel: KernelSource, launch: Launch) -> Launch:
    twin = launch.entry.replace(HALF, BF16)
    if HALF not in launch.entry or twin not in kernel.entries:
        raise Unsupported(f"no ml_dtypes here, and {kernel.name}:{launch.entry} has no {BF16} twin among "
                          f"{', '.join(kernel.entries)}")
    return dataclasses.replace(launch, entry=twin)


SMALL = Shape(batch=1, heads=2, n=70, d=64)  # n past a tile edge: the bounds checks run
SANITIZED_DTYPES = ("float16", "bfloat16", "float32")


def small_plan(records: list[Impl]) -> tuple[list[Planned], list[dict]]:
    """Every record's launches on SMALL inputs of each dtype it declares (what the sanitizer steps launch: each kernel
    once a dtype), and why some were not planned."""
    planned, skipped, seen = [], [], {}
    for impl in records:
        for dtype in SANITIZED_DTYPES:
            if dtype not in impl.capabilities.dtypes:
                continue
            try:
                launches = plan(impl, dtype, SMALL, np.random.default_rng(0))
            except Unsupported as exc:
                skipped.append({"record": impl.name, "dtype": dtype, "reason": str(exc)})
                continue
            key = tuple(p.signature() for p in launches)
            if key in seen:  # e.g. two causal alignments of one kernel, the same without a mask
                skipped.append({"record": impl.name, "dtype": dtype, "reason": f"the same launches as {seen[key]}"})
                continue
            seen[key] = f"{impl.name}[{dtype}]"
            planned += launches
    return planned, skipped
