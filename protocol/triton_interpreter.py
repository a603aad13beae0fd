"""Triton kernels where no GPU is: Triton's interpreter (TRITON_INTERPRET=1) runs a `@triton.jit` kernel on CPU
tensors, and `@triton.jit` reads the setting when it decorates. So the choice is made before an implementation's
module is imported (protocol.registry does it for every target it imports, in every process that imports one):
without a CUDA device and with Triton installed, the interpreter; a TRITON_INTERPRET the user set is kept."""

from __future__ import annotations

import importlib.util
import os

VARIABLE = "TRITON_INTERPRET"
MAX_SEQ_VARIABLE = "ATTN_TRITON_MAX_SEQ"
INTERPRETED_MAX_SEQ = 1024
# the most (batch, head) programs the ranks of a sharded call launch together under the interpreter
# (protocol.sharded_adapter): ring-flash-attn's forward of examples.gaussian_queries(2000, 2, d) on 2 ranks, 2 ring
# steps each, 8,000 programs, took 63 to 80 s alone on this 2-core machine, past the 120 s call limit beside a second
# xdist worker; 4,096 keeps a call near 35 s
INTERPRETED_SHARDED_PROGRAMS = 4096


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


def interpreted_max_seq() -> int | None:
    """The max_seq of a Triton record (ours or a peer's). Under the interpreter a (program, key tile) step costs about
    6 ms whatever the tile (measured: n = 64 in 1 x 1 tiles 25 s, in 16 x 16 0.1 s; n = 1024 in 64 x 64 1.5 s, four
    times that at each doubling): the regimes past 1024 keys are skipped there, with the reason, and not on a GPU.
    ATTN_TRITON_MAX_SEQ sets it for a short run (CI's, tox -e triton-ci)."""
    given = os.environ.get(MAX_SEQ_VARIABLE, "").strip()
    if given:
        if not given.isdigit() or int(given) < 1:
            raise ValueError(f"{MAX_SEQ_VARIABLE} must be a positive integer, got {given!r}")
        return int(given)
    return INTERPRETED_MAX_SEQ if interpreting() else None
