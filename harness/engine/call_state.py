"""What a call depends on besides its arguments, set where the call runs (in process or in its worker).

An implementation without the protocol's `dropout_seed` keyword draws its dropout mask from the global
generators (NumPy's legacy `np.random`, torch's default generator, CuPy's): a property that needs a
reproducible mask seeds them, and that must happen in the process that makes the call, just before it, or an
isolated implementation (harness.engine.isolation) draws from a worker whose generators nobody seeded. torch's
process-wide settings (intra-op threads, default dtype, deterministic algorithms) change what an
implementation computes too: the caller's are captured with each call and applied in the worker.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CallState:
    """The caller's state a call must see: `seed` (None: leave the global generators alone) and torch's
    settings (None where torch is not loaded in the caller)."""

    seed: int | None = None
    torch_threads: int | None = None
    torch_default_dtype: str | None = None
    torch_deterministic: tuple[bool, bool] | None = None  # (enabled, warn_only)


def capture(seed: int | None = None) -> CallState:
    """This process's state, with the generators' seed for the call."""
    torch = sys.modules.get("torch")
    if torch is None:
        return CallState(seed=seed)
    return CallState(seed=seed, torch_threads=torch.get_num_threads(),
                     torch_default_dtype=str(torch.get_default_dtype()).removeprefix("torch."),
                     torch_deterministic=(torch.are_deterministic_algorithms_enabled(),
                                          torch.is_deterministic_algorithms_warn_only_enabled()))


def seed_generators(seed: int) -> None:
    """Seed every global generator an implementation may draw from: NumPy's, and torch's and CuPy's where
    they are loaded."""
    np.random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is not None:
        _seed_torch(torch, seed)
    cupy = sys.modules.get("cupy")
    if cupy is not None and hasattr(cupy, "random"):
        # without a CUDA device CuPy's generator cannot be made, and nothing can draw from it
        with contextlib.suppress(cupy.cuda.runtime.CUDARuntimeError):
            cupy.random.seed(seed)


def _seed_torch(torch, seed: int) -> None:
    """torch.manual_seed where an accelerator exists; else the CPU generator alone, the only one a call can
    draw from. Without a device, torch.manual_seed queues a seeding for each accelerator's lazy initialisation
    and records the caller's stack with each: 0.3 ms a call, 1.6% of the main job."""
    if torch.accelerator.is_available():
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


def apply_settings(state: CallState) -> None:
    """Make this process's torch settings the caller's (in a worker, where torch is loaded); the seed is
    for harness.engine.guarded_call.call_in_process, which seeds just before the call."""
    torch = sys.modules.get("torch")
    if torch is None or state.torch_threads is None:
        return
    if torch.get_num_threads() != state.torch_threads:
        torch.set_num_threads(state.torch_threads)
    torch.set_default_dtype(getattr(torch, state.torch_default_dtype))
    enabled, warn_only = state.torch_deterministic
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


def seeding_lines(seed: int | None) -> list[str]:
    """The repro lines that seed the global generators as the call was seeded."""
    if seed is None:
        return []
    return [f"np.random.seed({seed})", "import sys",
            f"_ = 'torch' in sys.modules and sys.modules['torch'].manual_seed({seed})"]
