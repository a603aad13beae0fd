"""The implementation's calls in a failing example's first run, kept for its second run.

A property that fails on a cell with declared deviations runs the same example again (harness.api.explained_runs),
its draws replayed, to judge every call against the deviations. The implementation was already called on those
inputs: the second run gets what the first run's call returned (or raised), and the inputs as the call left them,
instead of calling again. That halves the calls of every declared failure (a CUDA kernel emulated on the CPU, a
call that ran out of time) and judges the very outputs that failed. A call the second run makes that the first did
not (finite garbage in place of a poison, a call past the first run's failure) runs as usual.

Calls are matched by content: the kind of call, the implementation, every array's bytes and every keyword, in the
order the first run made them (an implementation called twice on the same inputs gives its two answers in turn).
A call whose arguments have no content key (a keyword that is a closure), or whose answer cannot be copied (a torch
tensor inside an autograd graph), is never kept.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import numpy as np

from specs.memo import NotContent, content_key


@dataclass
class _Outcome:
    returned: object
    raised: BaseException | None
    inputs_after: tuple[np.ndarray, ...]  # the array arguments as the call left them


@dataclass
class CallLog:
    """One example's calls, by content, in call order; `replaying` once the first run is over."""

    outcomes: dict[Hashable, list[_Outcome]] = field(default_factory=dict)
    replaying: bool = False
    _taken: dict[Hashable, int] = field(default_factory=dict)


_LOG: ContextVar[CallLog | None] = ContextVar("call_log", default=None)


@contextmanager
def recording() -> Iterator[CallLog]:
    """The first run: every call kept in the log this yields."""
    log = CallLog()
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)


@contextmanager
def replaying(log: CallLog) -> Iterator[None]:
    """A second run: the calls `log` kept are answered from it, each in the order the first run made them (every
    second run of the example starts from the first call again)."""
    token = _LOG.set(CallLog(log.outcomes, replaying=True))
    try:
        yield
    finally:
        _LOG.reset(token)


def _arrays(value: object) -> list[np.ndarray]:
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, (tuple, list)):
        return [a for item in value for a in _arrays(item)]
    if isinstance(value, dict):
        return [a for item in value.values() for a in _arrays(item)]
    return []


def kept_call(call: Callable[[], object], *identity: object) -> object:
    """`call()`, kept in the active log under `identity` (the implementation's name, the arrays and keywords it is
    given: everything its result depends on); answered from the log in a second run. Outside a log, `call()`."""
    log = _LOG.get()
    if log is None:
        return call()
    try:
        key = content_key(identity)
    except NotContent:
        return call()
    inputs = _arrays(identity)
    if log.replaying:
        kept = log.outcomes.get(key, [])
        taken = log._taken.get(key, 0)
        if taken < len(kept):
            log._taken[key] = taken + 1
            outcome = kept[taken]
            for array, after in zip(inputs, outcome.inputs_after, strict=True):
                if array.flags.writeable:
                    np.copyto(array, after)
            if outcome.raised is not None:
                raise outcome.raised.with_traceback(None)
            return copy.deepcopy(outcome.returned)
        return call()
    try:
        returned = call()
    except Exception as error:
        log.outcomes.setdefault(key, []).append(_Outcome(None, error, tuple(a.copy() for a in inputs)))
        raise
    try:
        kept = copy.deepcopy(returned)
    except RuntimeError:  # a torch tensor inside an autograd graph cannot be copied: the second run calls again
        return returned
    log.outcomes.setdefault(key, []).append(_Outcome(kept, None, tuple(a.copy() for a in inputs)))
    return returned
