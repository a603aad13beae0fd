"""Run a tiled pass as one coarse task per torch thread, each task's torch ops single-threaded.

Each torch operator on a tile is its own OpenMP parallel region: a tile of the tiled FlashAttention is about ten
of them, so a call at n = 4096 enters some thousand regions, and each waits at its end for its slowest thread.
When another process shares the cores, one of them is often descheduled and every region waits for it (and the
others spin): the call ran 3x slower under one busy process, SDPA's fused kernel (one region per call) 1.4x.
Giving each thread a static share of the query blocks instead, run with single-threaded operators, leaves one
wait per call, as SDPA has (`tox -e bench -- --bench-busy 1` measures both). The shares' threads take turns on
Python's lock between operators, which costs where operators are short: on a quiet machine sharing was 15-40%
slower at 2^25 scores a pass and as fast at 2^27, so the caller shares large passes only.

The shares are interleaved (thread w takes units w, w + W, ...), so causal rows, whose cost grows with the row,
balance; they are static, so the result depends on the thread count only, never on the scheduling.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

Unit = TypeVar("Unit")
Result = TypeVar("Result")
_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}  # (process id, threads): a forked child starts its own
_POOLS_LOCK = threading.Lock()


def run_in_shares(work: Callable[[Sequence[Unit]], Result], units: Sequence[Unit], *,
                  shared: bool = True) -> list[Result]:
    """[work(share) for share in the shares of `units`], one share per torch thread of the caller
    (torch.get_num_threads(); at most one per unit; one where not `shared`), in share order. A single share runs
    in the calling thread as it is; several run concurrently on a pool of that many threads whose torch operators
    are single-threaded, with the caller's grad mode. An exception in a share is raised here after every share has
    ended."""
    count = min(torch.get_num_threads(), len(units)) if shared else 1
    if count <= 1:
        return [work(units)]
    grad_enabled = torch.is_grad_enabled()

    def run(share: Sequence[Unit]) -> Result:
        with torch.set_grad_enabled(grad_enabled):
            return work(share)

    pending = [_pool(count).submit(run, units[w::count]) for w in range(count)]
    errors = [future.exception() for future in pending]  # waits for every share
    for error in errors:
        if error is not None:
            raise error
    return [future.result() for future in pending]


def _pool(count: int) -> ThreadPoolExecutor:
    """This process's pool of `count` threads, each with one torch thread; started once, all threads at once, so
    that the default torch.set_num_threads leaves for threads started later can be given back its value."""
    key = (os.getpid(), count)
    with _POOLS_LOCK:
        if key not in _POOLS:
            threads = torch.get_num_threads()  # also fixes this thread's own count before a worker changes the default
            pool = ThreadPoolExecutor(count, thread_name_prefix="attention-share",
                                      initializer=_one_torch_thread)
            everyone = threading.Barrier(count)  # count tasks that wait for each other: count threads started
            for started in [pool.submit(everyone.wait) for _ in range(count)]:
                started.result()
            torch.set_num_threads(threads)  # the default that threads started later read
            _POOLS[key] = pool
        return _POOLS[key]


def _one_torch_thread() -> None:
    """Make this (new) thread's torch operators single-threaded. torch reads the default into a thread at its first
    query, and would overwrite a count set before it: query first."""
    torch.get_num_threads()
    torch.set_num_threads(1)
