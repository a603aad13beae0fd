"""Crash isolation: an implementation's calls run in a worker process, so a segfault or abort is a verdict.

Compiled extensions and kernels kill their process on an out-of-bounds access; called in the pytest process,
that ends the run with no report. With isolation (`--isolate`; on by default for implementations named with
--impl and for records that declare native code) each implementation gets one worker process, started from a
fork server that has only NumPy and the harness loaded (no torch threads to deadlock after fork). The caller's
state (harness.engine.call_state: the generators' seed, torch's settings) travels with each call and is set in the
worker before it. q, k, v travel as contiguous arrays with the name of their layout (specs.layouts), are laid
out the same way in the worker, and come back after the call, so a write to an input is seen by the caller as
it would be in process. A call names the face it calls (protocol.faces): the varlen and kv-cache faces of an
isolated implementation run in its worker too, and a kv cache written in place comes back as it was written. A
worker that dies raises WorkerCrashed naming the signal; one that does not answer within the call limit (native
code ignores SIGALRM) is killed and raises WorkerTimedOut. Either way the next call starts a fresh worker.
"""

from __future__ import annotations

import atexit
import multiprocessing
import pickle
import signal
from multiprocessing.connection import Connection

import numpy as np

from harness.engine import run_context
from harness.engine.call_state import CallState, apply_settings, capture
from harness.engine.guarded_call import CallFailed, as_numpy, call_in_process

GRACE_S = 5.0  # beyond the call limit, for the worker's own SIGALRM to answer first
PRELOAD = ["numpy", "harness.engine.call_state", "harness.engine.guarded_call", "protocol.registry", "specs.layouts"]


class WorkerCrashed(Exception):
    """The worker process died during a call; the message names the signal or exit status."""


class WorkerTimedOut(Exception):
    """The worker did not answer within the call limit and was killed."""


def _portable(value: object) -> object:
    """Arrays (NumPy, torch, CuPy) as NumPy, inside tuples and lists too; anything else unchanged."""
    if isinstance(value, tuple | list):
        return type(value)(_portable(item) for item in value)
    array = as_numpy(value)
    return value if array is None else np.asarray(array)


def _contiguous(arrays: tuple[np.ndarray | None, ...]) -> tuple[np.ndarray | None, ...]:
    """The arrays as they travel: contiguous, an absent one (a kv-cache call's k=None) as None."""
    return tuple(None if x is None else np.ascontiguousarray(x) for x in arrays)


def _serve(conn: Connection, target: str) -> None:
    """The worker: load the implementation, then answer calls until the pipe closes."""
    from protocol.registry import load_impl  # the worker's imports, kept out of the parent's
    from specs.layouts import to_layout

    try:
        impl = load_impl(target)
    except Exception as exc:
        conn.send(("failed", (f"the worker could not load {target}: {type(exc).__name__}: {exc}", "raised"), None))
        return
    while True:
        try:
            face, arrays, layout, kwargs, limit, state = conn.recv()
        except EOFError:
            return
        laid_out = tuple(None if x is None else to_layout(x, layout) for x in arrays)
        apply_settings(state)
        fn = impl.fn if face is None else impl.face(face)
        try:
            result = _portable(call_in_process(fn, laid_out, kwargs, impl.capabilities.tensors, state.seed, limit))
            pickle.dumps(result)
        except CallFailed as failure:
            conn.send(("failed", (failure.summary, failure.kind), None))
            continue
        except Exception as exc:  # the result could not be sent back
            conn.send(("failed", (f"returned an object that cannot leave the worker: {exc}", "output"), None))
            continue
        conn.send(("ok", result, _contiguous(laid_out)))


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the worker stopped answering"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name} (exit {code})"
        except ValueError:
            return f"signal {-code}"
    return f"the process exited with status {code}"


class Worker:
    """One implementation's worker process."""

    def __init__(self, target: str) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, target), daemon=True,
                                       name=f"attention-worker {target}")
        self.process.start()
        child.close()

    def call(self, face: str | None, arrays: tuple[np.ndarray, ...], layout: str, kwargs: dict, limit: float,
             state: CallState) -> object:
        try:
            self.conn.send((face, _contiguous(arrays), layout, kwargs, limit, state))
        except (BrokenPipeError, ConnectionError):
            self.process.join(5)
            raise WorkerCrashed(_describe_exit(self.process.exitcode)) from None
        if not self.conn.poll(limit + GRACE_S if limit > 0 else None):
            self.stop()
            raise WorkerTimedOut
        try:
            status, result, after = self.conn.recv()
        except (EOFError, ConnectionError):
            self.process.join(5)
            raise WorkerCrashed(_describe_exit(self.process.exitcode)) from None
        if status == "failed":
            raise CallFailed(*result)
        for original, returned in zip(arrays, after, strict=True):
            if original is not None and not np.array_equal(original, returned, equal_nan=True):
                np.copyto(original, returned)  # the implementation wrote to its input: show the caller
        return result

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def stop(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()


class WorkerPool:
    """One worker per isolated implementation, replaced after a crash or a timeout."""

    def __init__(self) -> None:
        self.workers: dict[str, Worker] = {}

    def call(self, target: str, face: str | None, arrays: tuple[np.ndarray, ...], layout: str, kwargs: dict,
             limit: float, state: CallState) -> object:
        worker = self.workers.get(target)
        if worker is None or not worker.alive:
            worker = self.workers[target] = Worker(target)
        try:
            return worker.call(face, arrays, layout, kwargs, limit, state)
        except (WorkerCrashed, WorkerTimedOut):
            del self.workers[target]
            raise

    def close(self) -> None:
        for worker in self.workers.values():
            worker.stop()
        self.workers.clear()


WORKERS = WorkerPool()
atexit.register(WORKERS.close)


def call_isolated(target: str, arrays: tuple[np.ndarray, ...], layout: str, kwargs: dict,
                  seed: int | None = None, face: str | None = None) -> object:
    """fn(q, k, v, **kwargs) in the implementation's worker, or its face `face` (protocol.faces) called on
    `arrays`, under this process's state with the global generators seeded with `seed` (harness.engine.call_state);
    a crash or a hang fails the call (CallFailed)."""
    limit = run_context.current().timeout_s
    try:
        return WORKERS.call(target, face, arrays, layout, kwargs, limit, capture(seed))
    except WorkerTimedOut:
        summary = f"the call took longer than {limit:g} s (its worker process was replaced)"
        raise CallFailed(summary, "timeout") from None
    except WorkerCrashed as crash:
        summary = f"the implementation crashed its process: {crash} (the worker was replaced)"
        raise CallFailed(summary, "crashed") from None
