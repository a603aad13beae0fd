"""The processes a sharded implementation runs in (protocol.faces' "sharded" face, issue 39).

One pool of POOL_SIZE ranks (4; ATTN_RANKS sets another) per process that calls a sharded implementation (each xdist
worker its own), started at the first call and closed at exit (the suite closes it when its session ends): the ranks
join one gloo process group on the loopback, its rendezvous a file store in a temporary directory (no port), torch at
one thread per rank, and make the subgroups of ranks 0..W-1 for every W up to POOL_SIZE once, at start. A call
sends each rank of its group its shard of q, k and v and the keywords; the rank imports the implementation by its
target (protocol.registry, as the isolation workers do), calls its sharded face on torch tensors and, given
cotangents, takes autograd's vector-Jacobian product there, then sends back its output shard, its LSE shard and its
gradients as NumPy.

The group's timeout is GROUP_TIMEOUT_S (INTERPRETED_GROUP_TIMEOUT_S where Triton kernels run under the interpreter,
protocol.triton_interpreter, when the pool starts): a collective waiting for a peer that never comes raises instead
of hanging (a timeout verdict; a point-to-point receive that never completes is cut by the caller's call limit
instead). Any failure (a rank raised, died, or the call was interrupted by the caller's time limit) fails the call
with RankFailed, and the pool is closed and started afresh by the next call: a group that saw a failure may hold
messages no rank received.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from pathlib import Path

import numpy as np

SIZE_VARIABLE = "ATTN_RANKS"  # a smaller pool for a short run (CI's: 2)


def pool_size() -> int:
    """The ranks a pool starts: 4 (W = 2, 3, 4 as subgroups), or ATTN_RANKS."""
    given = os.environ.get(SIZE_VARIABLE, "").strip()
    if not given:
        return 4
    if not given.isdigit() or not 1 <= int(given) <= 8:
        raise ValueError(f"{SIZE_VARIABLE} must be an integer from 1 to 8, got {given!r}")
    return int(given)


POOL_SIZE = pool_size()
GROUP_TIMEOUT_S = 5.0  # a collective waits this long for its peers (a few seconds: the calls here take milliseconds)
# under Triton's interpreter one rank's block backward takes seconds (about 6 ms a program and key tile, a few hundred
# of them at the interpreted max_seq's shards), and four ranks and two xdist workers share two cores: the peers'
# ring steps measured past 5 s there, so a peer is waited for a minute (the call's own limit still bounds the call)
INTERPRETED_GROUP_TIMEOUT_S = 60.0
START_TIMEOUT_S = 120.0  # the first start imports torch in the fork server, on a busy 2-core machine
KINDS = ("raised", "timeout", "crashed")
# what the fork server imports once, so that a pool started afresh after a failure is up in a fraction of a second
PRELOAD = ["numpy", "torch", "torch.distributed", "protocol.registry", "protocol.rank_pool"]


class RankFailed(Exception):
    """A sharded call failed: `kind` is one of KINDS; `summary` is the rank's error ('TypeError: ... (rank 1)') or
    what happened to the ranks."""

    def __init__(self, summary: str, kind: str) -> None:
        super().__init__(summary)
        self.summary, self.kind = summary, kind


@dataclass(frozen=True)
class RankResult:
    """What one rank returns: its output shard, its LSE shard (return_lse) and, given cotangents, (dq, dk, dv)."""

    out: np.ndarray
    lse: np.ndarray | None = None
    grads: tuple[np.ndarray, ...] | None = None


def _numpy(x) -> np.ndarray:
    from protocol.torch_convert import to_numpy  # bfloat16 as ml_dtypes' NumPy dtype

    return to_numpy(x.detach().contiguous())


def _call_face(fn, group, arrays, keywords: dict, cotangents) -> RankResult:
    """One rank's call of the sharded face, and its vector-Jacobian product with `cotangents` (d_out, d_lse)."""
    import torch

    from protocol.torch_convert import as_tensor

    leaves = [as_tensor(np.ascontiguousarray(x)) for x in arrays]
    if cotangents is not None:
        leaves = [x.clone().requires_grad_(True) for x in leaves]
    with torch.set_grad_enabled(cotangents is not None):
        result = fn(*leaves, group=group, **keywords)
    outputs = tuple(result) if keywords.get("return_lse") and isinstance(result, tuple | list) else (result,)
    if not all(isinstance(x, torch.Tensor) for x in outputs):
        raise TypeError(f"the sharded face returned {type(result).__name__}, not a tensor (or (out, lse) with "
                        "return_lse=True)")
    grads = None
    if cotangents is not None:
        pairs = [(x, as_tensor(g)) for x, g in zip(outputs, cotangents, strict=False)
                 if g is not None and x.requires_grad]
        found = torch.autograd.grad([x for x, _ in pairs], leaves, [g for _, g in pairs],
                                    allow_unused=True) if pairs else (None,) * 3
        grads = tuple(_numpy(torch.zeros_like(x) if g is None else g) for g, x in zip(found, leaves, strict=True))
    return RankResult(_numpy(outputs[0]), _numpy(outputs[1]) if len(outputs) > 1 else None, grads)


GLOO_TIMEOUT = "Timed out waiting"  # how gloo's transport words the group timeout (a RuntimeError, torch 2.13)


def _failure(exc: BaseException) -> tuple[str, str]:
    """(kind, summary) of a rank's exception: a collective that timed out waiting for its peers is a hang."""
    summary = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
    hang = isinstance(exc, RuntimeError) and GLOO_TIMEOUT in str(exc)
    return ("timeout" if hang else "raised"), summary


def group_timeout_s() -> float:
    """How long a collective of a pool started now waits for its peers."""
    from protocol.triton_interpreter import interpreting

    return INTERPRETED_GROUP_TIMEOUT_S if interpreting() else GROUP_TIMEOUT_S


def _rank_main(rank: int, size: int, store_path: str, timeout_s: float, conn: Connection) -> None:
    """A rank: join the group, make the subgroups, then answer calls until the pipe closes."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the loopback only
    import torch
    import torch.distributed as dist

    from protocol.registry import load_impl

    torch.set_num_threads(1)
    # the default group only meets the ranks (the calls run on the subgroups): its rendezvous waits as long as the
    # start does, for ranks forked on a busy machine arrive seconds apart (5 s timed out with two runs beside it)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, size), rank=rank, world_size=size,
                            timeout=timedelta(seconds=START_TIMEOUT_S))
    timeout = timedelta(seconds=timeout_s)  # a subgroup takes its own (its default is half an hour)
    groups = {world: dist.new_group(list(range(world)), timeout=timeout) for world in range(1, size + 1)}
    conn.send(("ready", None))
    impls = {}
    while True:
        try:
            target, world, arrays, keywords, cotangents = conn.recv()
        except EOFError:
            return
        try:
            impl = impls.get(target) or impls.setdefault(target, load_impl(target))
            conn.send(("ok", _call_face(impl.face("sharded"), groups[world], arrays, keywords, cotangents)))
        except Exception as exc:  # the implementation's failure is the verdict
            conn.send(_failure(exc))


@contextlib.contextmanager
def _caller_main_hidden():
    """multiprocessing runs the starting process's main module again in every new process (a script by its path, a
    `-m` module by its name), unless it is guarded by `if __name__ == "__main__"`: a reproduction snippet run as a
    script would start the pool again inside each rank. The ranks import only the implementation, by its target, so
    the main module is hidden while they start."""
    main = sys.modules["__main__"]
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__") if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.update(saved)


class RankPool:
    """POOL_SIZE ranks in one gloo group, started on the first call, closed after any failure."""

    def __init__(self, size: int = POOL_SIZE) -> None:
        self.size = size
        self.ranks: list[tuple[multiprocessing.Process, Connection]] = []
        self.store_dir: str | None = None
        self.timeout_s = GROUP_TIMEOUT_S

    def _start(self) -> None:
        context = multiprocessing.get_context("forkserver")  # a rank forks from a server that imported torch once
        context.set_forkserver_preload(PRELOAD)
        self.store_dir = tempfile.mkdtemp(prefix="attention-ranks-")
        store = str(Path(self.store_dir) / "store")
        self.timeout_s = group_timeout_s()
        for rank in range(self.size):
            ours, theirs = context.Pipe()
            process = context.Process(target=_rank_main, args=(rank, self.size, store, self.timeout_s, theirs),
                                      daemon=True)
            with _caller_main_hidden():
                process.start()
            theirs.close()
            self.ranks.append((process, ours))
        self._collect(range(self.size), START_TIMEOUT_S, "start")

    def close(self) -> None:
        """Stop every rank and remove the store."""
        for process, conn in self.ranks:
            conn.close()
            process.kill()
            process.join(5)
        self.ranks = []
        if self.store_dir:
            shutil.rmtree(self.store_dir, ignore_errors=True)
            self.store_dir = None

    def _collect(self, ranks, limit_s: float, what: str) -> list:
        """Each rank's answer; the first failure (a raise, a death, no answer in `limit_s`) raises RankFailed."""
        answers = {}
        pending = {rank: self.ranks[rank] for rank in ranks}
        deadline = time.monotonic() + limit_s
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RankFailed(f"ranks {sorted(pending)} gave no answer to the {what} within {limit_s:g} s",
                                 "timeout")
            ready = wait([c for _, c in pending.values()] + [p.sentinel for p, _ in pending.values()], remaining)
            for rank, (process, conn) in list(pending.items()):
                if conn in ready:
                    try:
                        status, payload = conn.recv()
                    except EOFError:
                        status, payload = "crashed", None
                    if status == "raised":
                        raise RankFailed(f"{payload} (rank {rank})", status)
                    if status == "timeout":
                        raise RankFailed(f"rank {rank} waited for its peers past the group's {self.timeout_s:g} s "
                                         f"timeout: {payload}", status)
                    if status == "crashed":
                        raise RankFailed(f"rank {rank} died during the {what}{_how_it_ended(process)}", "crashed")
                    answers[rank] = payload
                    del pending[rank]
                elif process.sentinel in ready:
                    raise RankFailed(f"rank {rank} died during the {what}{_how_it_ended(process)}", "crashed")
        return [answers[rank] for rank in sorted(answers)]

    def run(self, target: str, world: int, shards: list[tuple[np.ndarray, ...]], keywords: dict,
            cotangents: list[tuple[np.ndarray | None, ...]] | None = None,
            limit_s: float = 600.0) -> list[RankResult]:
        """The sharded face of `target` on ranks 0..world-1, rank r given shards[r] (and cotangents[r])."""
        if not 1 <= world <= self.size or len(shards) != world:
            raise ValueError(f"a call needs 1 <= world <= {self.size} and one shard a rank; got world {world}, "
                             f"{len(shards)} shards")
        try:
            if not self.ranks:
                self._start()
            for rank in range(world):
                self.ranks[rank][1].send((target, world, shards[rank], keywords,
                                          None if cotangents is None else cotangents[rank]))
            return self._collect(range(world), limit_s, "call")
        except BaseException:  # a failure, or the caller's time limit interrupting the wait: start afresh
            self.close()
            raise


POOL = RankPool()
atexit.register(POOL.close)


def _how_it_ended(process) -> str:
    """How a rank's process ended, for the failure's message: its exit status, or the signal that killed it (a
    segmentation fault, the kernel's out-of-memory killer), after waiting a second for it to go."""
    process.join(1)
    code = process.exitcode
    if code is None:
        return " (its connection closed; the process still runs)"
    if code < 0:
        return f" (killed by {signal.Signals(-code).name})"
    return f" (exit status {code})"
