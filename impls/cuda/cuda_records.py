"""Each CUDA kernel as two records of CONTRACT 1: `cuda-NAME` runs through CuPy on a CUDA device and
`cuda-NAME-on-cpu` runs the same .cu file on this CPU (impls/cuda/cpu). One function serves both; where an
executor cannot run, the record says why (no CUDA device, no C++ compiler) instead of failing."""

from __future__ import annotations

import functools
from collections.abc import Callable

from impls.cuda.geometry import TileGeometry
from protocol.registry import attention_impl


def device_unavailable() -> str | None:
    try:
        import cupy
    except ImportError as exc:
        return f"cupy is not installed ({exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # cudaErrorInsufficientDriver, cudaErrorNoDevice: no usable GPU here
        return f"no CUDA device: {str(exc).splitlines()[0]}"
    return None if count else "no CUDA device: cupy sees 0 devices"


def cpu_unavailable() -> str | None:
    from impls.cuda.runtime.cpu_build import compiler_unavailable

    return compiler_unavailable()


# On the CPU a kernel's threads take turns at every barrier and warp shuffle (about 10^7 thread-barriers a
# second): a 64-token problem costs a SIMT flash kernel tens of milliseconds, a 1025-token one seconds, and the
# properties make hundreds of calls. The CPU records' random draws take sequences up to CPU_MAX_SEQ; longer
# regimes are skipped with that reason and run on the device records. The tile edges lie past it (the WMMA
# kernel's key tiles are 64 wide, its blocks 64 rows): each kernel's declared geometry (impls/cuda/geometry.py)
# gives the fixed cases that reach them, which every CPU record runs whatever its max_seq.
CPU_MAX_SEQ = 48


def cuda_records(name: str, run: Callable, *, geometry: TileGeometry | None = None,
                 kv_cache: Callable | None = None, **capabilities) -> tuple[Callable, Callable]:
    """The device record and the CPU record of one kernel. `run(q, k, v, ..., executor=...)` is the
    protocol function with the executor as an extra keyword; both records declare native code (calls run
    in a worker process, so a crash is a verdict). The CPU record declares `cuda_checkers` and carries `run`
    as `fn.cuda_run`, through which the kernel-memory-safe, kernel-race-free and kernel-barrier-uniform
    properties run the same call under impls/cuda/runtime/on_cpu.py's checkers, and the kernel's tile `geometry` as
    `fn.cuda_geometry` (None: no fixed tile-edge cases). `kv_cache(q, k_cache, v_cache, ..., executor=...)`, when
    given, is the kernel's kv-cache face (protocol.faces): each record carries it as `fn.attention_kvcache` on its
    executor, and the CPU record as `fn.cuda_kv_cache_run` for the checkers. Their known defects are the rows of
    their names in impls/expectations.toml."""

    def record(executor: str, record_name: str, probe: Callable[[], str | None]) -> Callable:
        on_executor = _on(run, executor)
        if executor == "cpu":
            on_executor.cuda_run = run
            on_executor.cuda_geometry = geometry
        faces = {}
        if kv_cache is not None:
            on_executor.attention_kvcache = _on(kv_cache, executor)
            on_executor.cuda_kv_cache_run = kv_cache if executor == "cpu" else None
            faces = {"faces": ("dense", "kvcache")}
        bounds = {"max_seq": min(capabilities.get("max_seq") or CPU_MAX_SEQ, CPU_MAX_SEQ)} if executor == "cpu" else {}
        return attention_impl(name=record_name, backend="cupy", probe=probe, native=True,
                              cuda_checkers=executor == "cpu", **{**capabilities, **bounds, **faces})(on_executor)

    return record("cupy", f"cuda-{name}", device_unavailable), record("cpu", f"cuda-{name}-on-cpu", cpu_unavailable)


def _on(run: Callable, executor: str) -> Callable:
    """`run` with its executor bound, under the protocol's signature (without the executor keyword)."""
    @functools.wraps(run)
    def on_executor(*args, **kwargs):
        return run(*args, **kwargs, executor=executor)

    del on_executor.__wrapped__  # the protocol reads this signature: without the executor keyword
    on_executor.__signature__ = _without_executor(run)
    on_executor.__name__ = on_executor.__qualname__ = f"{run.__name__}_on_{executor}"
    return on_executor


def _without_executor(run: Callable):
    import inspect

    signature = inspect.signature(run)
    return signature.replace(parameters=[p for p in signature.parameters.values() if p.name != "executor"])
