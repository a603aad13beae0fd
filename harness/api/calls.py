"""The implementation's calls a Trial makes, apart from any judgement of them: a forward or backward call on given
arrays, in process or in an isolated worker (run_context's isolated targets), kept for replay (harness.engine.
call_replay) and timed into the running check's call seconds. A call returns what the implementation returned or
raises CallFailed; whether that is a failure, and whether a declared deviation explains it, is the Trial's to say
(harness.api.trial), in one place.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import numpy as np

from harness.engine import run_context
from harness.engine.backward import backward_of
from harness.engine.call_replay import kept_call
from harness.engine.declarations import RUNNING
from harness.engine.guarded_call import call_in_process
from harness.engine.isolation import call_isolated
from protocol.registry import Variant


class ImplementationCalls:
    """`variant`'s calls on arrays laid out as `layout` (specs.layouts)."""

    def __init__(self, variant: Variant, layout: str) -> None:
        self.variant = variant
        self.layout = layout

    def forward(self, arrays: tuple[np.ndarray, np.ndarray, np.ndarray], kwargs: Mapping,
                global_seed: int | None = None) -> object:
        """The raw output of a forward call (global_seed: harness.engine.call_state), or CallFailed."""
        impl, kwargs = self.variant.impl, dict(kwargs)

        def call() -> object:
            if impl.target in run_context.current().isolated_targets:
                return call_isolated(impl.target, arrays, self.layout, kwargs, global_seed)
            return call_in_process(impl.fn, arrays, kwargs, impl.capabilities.tensors, global_seed)

        with _timed():
            return kept_call(call, "forward", impl.name, impl.target, arrays, self.layout, kwargs, global_seed)

    def backward(self, arrays: tuple[np.ndarray, np.ndarray, np.ndarray], d_out: np.ndarray, kwargs: Mapping,
                 wrt: tuple[str, ...]) -> tuple[np.ndarray, ...]:
        """dQ, dK, dV (and the gradients named in `wrt`) of <d_out, the output>, as backward_of gives them, or
        CallFailed."""
        impl = self.variant.impl

        def call() -> tuple[np.ndarray, ...]:
            return backward_of(impl, *arrays, d_out, **kwargs, wrt=wrt)

        with _timed():
            return kept_call(call, "backward", impl.name, impl.target, arrays, d_out, dict(kwargs), wrt)


@contextmanager
def _timed() -> Iterator[None]:
    """Add the seconds inside the block to the running check's call seconds (the report's time in calls)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        running = RUNNING.get()
        if running is not None:
            running.call_seconds += time.perf_counter() - started
