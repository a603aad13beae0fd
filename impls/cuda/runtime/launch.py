"""One kernel launch: its source and its arguments, whichever executor runs it (impls.cuda.runtime.execute).

A `Launch` is what CuPy's RawKernel takes: grid, block, dynamic shared bytes and the arguments, NumPy arrays
for pointer parameters and NumPy scalars (np.int32 for `int`, np.float32 for `float`) for the rest, in the
kernel's parameter order. impls.cuda.runtime.execute runs it with CuPy on the CUDA device ("cupy") or on this CPU
through impls/cuda/cpu ("cpu"), and returns every argument after the launch, so an output buffer is read back the same
way from either.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

KERNEL_DIR = Path(__file__).parents[1] / "kernels"
EXECUTORS = ("cupy", "cpu", "synccheck", "memcheck", "racecheck")  # the last three: impls/cuda/runtime/on_cpu.py


@dataclass(frozen=True)
class KernelSource:
    """A .cu file and the kernels (name expressions, e.g. "flash_forward<float>") launched from it."""

    path: Path
    entries: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.path.stem

    def text(self) -> str:
        return self.path.read_text()


@dataclass(frozen=True)
class Launch:
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: tuple[np.ndarray | np.generic, ...]

    def __post_init__(self):
        for what, dims in (("grid", self.grid), ("block", self.block)):
            if len(dims) != 3 or any(int(x) < 1 for x in dims):
                raise ValueError(f"{self.entry}: {what} must be three positive sizes, got {dims}")
        if self.shared_bytes < 0:
            raise ValueError(f"{self.entry}: negative dynamic shared memory {self.shared_bytes}")
        for i, arg in enumerate(self.args):
            if not isinstance(arg, (np.ndarray, np.generic)):
                raise TypeError(f"{self.entry}: argument {i} is a {type(arg).__name__}; pass NumPy arrays for "
                                "pointers and NumPy scalars (np.int32, np.float32) for values")
