"""CONTRACT 1's failure rules for one call: a time limit, exceptions caught, the output converted and checked.

An implementation that raises, runs past the limit, or returns something that is not an array of the right
shape and dtype raises `CallFailed` with a one-line summary (harness.engine.isolation adds a crash of its worker
process); the caller (harness.api.trial) turns it into the property's violation, and the run goes on.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np

from harness.engine import run_context
from harness.engine.call_state import seed_generators
from protocol.rank_pool import RankFailed


class CallFailed(Exception):
    """The implementation broke CONTRACT 1 on this call; `summary` says how, `kind` is one of
    raised, timeout, crashed, output (the returned object's type, shape, dtype or finiteness)."""

    def __init__(self, summary: str, kind: str) -> None:
        super().__init__(summary)
        self.summary = summary
        self.kind = kind


class ImplTimeout(Exception):
    """Raised inside an implementation that ran past the call limit."""


class _Limit:
    """Whether the limit expired: an implementation may catch ImplTimeout and raise its own error (Triton's
    interpreter wraps whatever a kernel raises in an InterpreterError), and the call still ran past the limit."""

    expired = False


@contextmanager
def _time_limit(seconds: float):
    """SIGALRM-based limit; a no-op where signals are unavailable (non-main thread, Windows)."""
    limit = _Limit()
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable or seconds <= 0:
        yield limit
        return

    def expire(signum, frame):
        limit.expired = True
        raise ImplTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield limit
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def as_numpy(value: object) -> np.ndarray | None:
    """NumPy, torch and CuPy arrays as NumPy (torch.bfloat16 as ml_dtypes' bfloat16); anything else as None."""
    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        from protocol.torch_convert import to_numpy  # torch is loaded: the value is a tensor

        return to_numpy(value)
    if type(value).__module__.startswith("cupy") and hasattr(value, "get"):
        return value.get()
    return None


def as_float64(value: object) -> np.ndarray:
    """An array of any kind as float64 NumPy, anything else through np.asarray (what repro snippets print)."""
    array = as_numpy(value)
    return np.asarray(value if array is None else array, dtype=np.float64)


# the keywords whose arrays cross as tensors with q, k, v (those of the varlen and kv-cache faces among them,
# protocol.faces); any other (a 0-d array scale) is handed as it is
TENSOR_KEYWORDS = ("mask", "bias", "alibi_slopes", "sinks", "cu_seqlens_q", "cu_seqlens_k", "seqused_k",
                   "cache_seqlens", "cache_batch_idx", "cache_leftpad", "block_table")


def handed_over(arrays: tuple[np.ndarray, ...], kwargs: dict, tensors: str) -> tuple[tuple, dict]:
    """q, k, v and the keyword arrays (the mask, a bias, ALiBi slopes, sinks) as the implementation asked for them
    (Capabilities.tensors): NumPy as they are, or torch tensors sharing their memory and strides
    (protocol.torch_convert.as_tensor)."""
    if tensors == "numpy":
        return arrays, kwargs
    from protocol.torch_convert import as_tensor  # only implementations that ask for tensors need torch

    converted = {key: as_tensor(value) if key in TENSOR_KEYWORDS and isinstance(value, np.ndarray) else value
                 for key, value in kwargs.items()}
    return tuple(as_tensor(x) for x in arrays), converted


def call_in_process(fn: Callable, arrays: tuple[np.ndarray, ...], kwargs: dict, tensors: str = "numpy",
                    seed: int | None = None, timeout_s: float | None = None) -> object:
    """fn(q, k, v, **kwargs) under the time limit (`timeout_s`, else the run context's), the inputs handed over
    as `tensors` asks, the global generators seeded with `seed` just before the call (harness.engine.call_state; None
    leaves them alone)."""
    limit = run_context.current().timeout_s if timeout_s is None else timeout_s
    arrays, kwargs = handed_over(arrays, kwargs, tensors)
    if seed is not None:
        seed_generators(seed)
    with _time_limit(limit) as expiry:
        try:
            return fn(*arrays, **kwargs)
        except Exception as exc:  # the implementation's own failure is the finding
            if expiry.expired:  # ImplTimeout, or what the implementation made of it
                raise CallFailed(f"the call took longer than {limit:g} s", "timeout") from None
            if isinstance(exc, RankFailed):  # a sharded call's rank (protocol.rank_pool) raised, hung or died
                prefix = "the implementation raised " if exc.kind == "raised" else "the sharded call failed: "
                raise CallFailed(prefix + exc.summary, exc.kind) from None
            raise CallFailed(f"the implementation raised {type(exc).__name__}: {exc}", "raised") from exc


def checked_array(raw: object, *, shape: tuple[int, ...], dtype: np.dtype, what: str = "out") -> np.ndarray:
    """The output (or the array named `what`) as NumPy, after checking its type, shape and dtype
    (CallFailed otherwise)."""
    out = as_numpy(raw)
    if out is None:
        raise CallFailed(f"returned a {type(raw).__name__} as {what}, not a NumPy, torch or CuPy array", "output")
    if out.shape != shape:
        expected = "(batch, heads, n_q, d_v)" if what == "out" else f"the shape of {what[1:]}"
        raise CallFailed(f"returned {what} of shape {out.shape}, expected {shape} {expected}", "output")
    if out.dtype != dtype:
        raise CallFailed(f"returned {what} of dtype {out.dtype} for {dtype} inputs", "output")
    return out


def non_finite_summary(out: np.ndarray) -> str | None:
    """Where the output is not finite (its first such element and the count), or None."""
    bad = ~np.isfinite(out)
    if not bad.any():
        return None
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    count = int(bad.sum())
    return f"returned {out[where]} at out{list(where)} where the oracle is finite ({count} non-finite elements)"
