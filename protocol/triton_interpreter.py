"""Triton kernels where no GPU is: Triton's interpreter (TRITON_INTERPRET=1) runs a `@triton.jit` kernel on CPU
tensors, and `@triton.jit` reads the setting when it decorates. So the choice is made before an implementation's
module is imported (protocol.registry does it for every target it imports, in every process that imports one):
without a CUDA device and with Triton installed, the interpreter; a TRITON_INTERPRET the user set is kept."""

from __future__ import annotations

import importlib.util
import os

VARIABLE = "TRITON_INTERPRET"


def interpret_without_gpu() -> None:
    """Set TRITON_INTERPRET=1 where Triton is installed, no CUDA device is present and the user set nothing."""
    if VARIABLE in os.environ or importlib.util.find_spec("triton") is None:
        return
    import torch  # Triton needs torch; only asked where Triton is installed

    if not torch.cuda.is_available():
        os.environ[VARIABLE] = "1"


def interpreting() -> bool:
    """Whether Triton kernels decorated from now on run under the interpreter."""
    return os.environ.get(VARIABLE, "").strip().lower() in ("1", "true", "on", "yes")
