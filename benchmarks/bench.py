"""What the benchmarks run: the implementations side by side, their inputs, how each call is timed.

Every case is one implementation in one mode on float32 inputs of batch 1 and 8 heads:
`forward`, or `fwd+bwd` (forward, then backward of the output against a fixed gradient, through
torch autograd). The `matmul` cases are no attention at all: each of the two matrix products
attention is made of, QK^T as (8, n, d) x (8, d, n) and PV as (8, n, n) x (8, n, d), one float32
torch.bmm each: the machine's matrix-product rate at the same size, measured in the same run (the faster
of the two is the "peak" column; QK^T, with an inner dimension of only d, is bound by writing n x n).

Implementations are imported when their case first runs, not when the module is: one that is not
there (our torch tiled forward before it lands) skips with the reason and the others still run.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

BATCH = 1
HEADS = 8
DTYPE = "float32"
SIZES_N = (256, 1024, 4096, 8192)
SIZES_D = (64, 128)
MEMORY_D = 64  # peak memory is measured at this head dim only (one child process per implementation and n)
PROFILE_AT = (4096, 64)  # where our torch tiled forward is profiled
WINDOW = (256, 0)  # a sliding window of 256 keys before the diagonal: its tiles are a sliver of the dense pass's
NUMPY_TILED_BLOCKS = {"block_rows": 128, "block_cols": 128}  # its default 16 x 16 is ~260k Python steps at n=8192


@dataclass(frozen=True)
class Implementation:
    """One implementation: a CONTRACT 1 target, the inputs it takes, and whether it holds n x n scores."""

    name: str
    label: str
    target: str | None  # module:function; None for the bare matmuls
    tensors: str  # "numpy" or "torch"
    modes: tuple[str, ...]
    kwargs: dict = field(default_factory=dict)
    quadratic: bool = False  # materialises (heads, n, n) scores: skipped above --bench-quadratic-max-n


IMPLEMENTATIONS = (
    Implementation("sdpa-flash", "torch SDPA, FLASH_ATTENTION backend", "impls.torch.torch_sdpa:sdpa_flash_cpu",
                   "torch", ("forward", "fwd+bwd")),
    Implementation("matmul-qk", "torch.bmm (8, n, d) x (8, d, n)", None, "torch", ("matmul",)),
    Implementation("matmul-pv", "torch.bmm (8, n, n) x (8, n, d)", None, "torch", ("matmul",)),
    Implementation("torch-tiled", "our torch tiled FlashAttention", "impls.torch.torch_flash:flash_attention_tiled",
                   "torch", ("forward", "fwd+bwd")),
    Implementation("torch-tiled-window", f"our torch tiled FlashAttention, window_size={WINDOW}",
                   "impls.torch.torch_flash:flash_attention_tiled", "torch", ("forward", "fwd+bwd"),
                   kwargs={"window_size": WINDOW}),
    Implementation("sdpa-math", "torch SDPA, MATH backend", "impls.torch.torch_sdpa:sdpa_math", "torch",
                   ("forward", "fwd+bwd"), quadratic=True),
    Implementation("seed000-three-line", "seed 000 three-line torch code",
                   "impls.seeds.seed000_three_line:three_line_attention", "torch", ("forward", "fwd+bwd"),
                   quadratic=True),
    Implementation("numpy-naive", "naive NumPy (the reference formula)",
                   "impls.numpy.numpy_reference:reference_attention", "numpy", ("forward",), quadratic=True),
    Implementation("numpy-tiled", "NumPy tiled forward, 128 x 128 blocks", "impls.numpy.numpy_tiled:tiled_attention",
                   "numpy", ("forward",), kwargs=NUMPY_TILED_BLOCKS),
)
BY_NAME = {impl.name: impl for impl in IMPLEMENTATIONS}


@dataclass(frozen=True)
class Case:
    impl: Implementation
    mode: str

    @property
    def id(self) -> str:
        return f"{self.impl.name}:{self.mode}"


CASES = tuple(Case(impl, mode) for impl in IMPLEMENTATIONS for mode in impl.modes)


@dataclass(frozen=True)
class Point:
    """One benchmark: a case at one size. Points run in this order: d, then n ascending, then the case order
    (SDPA flash and the bare matmuls first, so every later point of the size has its ratios at once)."""

    case: Case
    n: int
    d: int

    @property
    def id(self) -> str:
        return f"{self.case.id}-n{self.n}-d{self.d}"

    @property
    def group(self) -> str:
        return f"n={self.n} d={self.d} {DTYPE}"


def points(sizes_n=SIZES_N, sizes_d=SIZES_D) -> list[Point]:
    return [Point(case, n, d) for d in sizes_d for n in sorted(sizes_n) for case in CASES]


class Unavailable(Exception):
    """The implementation cannot be imported here."""


def load(impl: Implementation) -> Callable:
    module, name = impl.target.split(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise Unavailable(f"{impl.target} is not available here: {exc}") from exc


@functools.lru_cache(maxsize=1)
def _arrays(n: int, d: int) -> tuple[np.ndarray, ...]:
    from specs.problems import build

    p = build(batch=BATCH, heads=HEADS, heads_kv=HEADS, n_q=n, n_k=n, d=d, d_v=d, seed=0)
    return tuple(x.astype(DTYPE) for x in (p.q, p.k, p.v))


def runner(case: Case, n: int, d: int) -> Callable[[], object]:
    """A function of no arguments that runs the case once on its inputs (built here, outside the timing)."""
    arrays = _arrays(n, d)
    impl = case.impl
    if impl.tensors == "numpy":
        fn = load(impl)
        return functools.partial(fn, *arrays, **impl.kwargs)
    import torch

    q, k, v = (torch.from_numpy(x) for x in arrays)
    if case.mode == "matmul":
        qf, kt, vf = q.reshape(-1, n, d), k.reshape(-1, n, d).transpose(1, 2), v.reshape(-1, n, d)
        if impl.name == "matmul-qk":
            return functools.partial(torch.bmm, qf, kt)
        weights = torch.softmax(torch.bmm(qf, kt), dim=-1)
        return functools.partial(torch.bmm, weights, vf)
    fn = load(impl)
    if case.mode == "forward":
        return functools.partial(fn, q, k, v, **impl.kwargs)
    q, k, v = (x.clone().requires_grad_(True) for x in (q, k, v))
    grad = torch.from_numpy(np.random.default_rng(1).standard_normal(q.shape).astype(DTYPE))

    def forward_backward():
        q.grad = k.grad = v.grad = None  # no accumulation into the previous round's gradients
        fn(q, k, v, **impl.kwargs).backward(grad)

    return forward_backward


def rounds_for(seconds_per_call: float, budget: float, min_rounds: int = 2, max_rounds: int = 25) -> int:
    """Rounds that fill about `budget` seconds, within [min_rounds, max_rounds]."""
    return max(min_rounds, min(max_rounds, math.ceil(budget / max(seconds_per_call, 1e-9))))


class Session:
    """What one pytest session timed, kept for the summary: one record per point that ran."""

    def __init__(self, budget: float, quadratic_max_n: int) -> None:
        self.budget = budget
        self.quadratic_max_n = quadratic_max_n
        self.timings: list[dict] = []
        self.load_at_start = [round(x, 2) for x in os.getloadavg()]  # 1, 5 and 15 minutes
        self._last: dict[tuple[str, int], tuple[int, float]] = {}  # (case id, d) -> (n, seconds) of the last point

    def estimate(self, point: Point) -> float | None:
        """Seconds per call, from the same case's previous size (time grows as n^2), or None."""
        last = self._last.get((point.case.id, point.d))
        return None if last is None else last[1] * (point.n / last[0]) ** 2

    def plan(self, point: Point, run: Callable[[], object]) -> tuple[int, int]:
        """(rounds, warm-up rounds). A case's first size is run once untimed (lazy initialisation, and the
        estimate); later sizes warm up only where a call is short."""
        estimate = self.estimate(point)
        if estimate is None:
            start = time.perf_counter()
            run()
            estimate = time.perf_counter() - start
            return rounds_for(estimate, self.budget), 0  # that call was the warm-up
        return rounds_for(estimate, self.budget), 1 if estimate < 0.5 else 0

    def record(self, point: Point, stats, rounds: int, warmup: int) -> dict:
        row = {"impl": point.case.impl.name, "mode": point.case.mode, "n": point.n, "d": point.d,
               "median_s": stats.median, "min_s": stats.min, "mean_s": stats.mean, "rounds": rounds,
               "warmup_rounds": warmup, "load_1min": round(os.getloadavg()[0], 2)}  # the machine may be shared
        self.timings.append(row)
        self._last[(point.case.id, point.d)] = (point.n, stats.min)
        return row


def profile_forward(impl_name: str = "torch-tiled", at: tuple[int, int] = PROFILE_AT, top: int = 10) -> dict:
    """torch.profiler over one forward call (after one untimed call): the ops that take the time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    n, d = at
    run = runner(Case(BY_NAME[impl_name], "forward"), n, d)
    run()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        run()
        wall = time.perf_counter() - start
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    ops_total = sum(e.self_cpu_time_total for e in events) / 1e6
    top_ops = [{"op": e.key, "self_s": e.self_cpu_time_total / 1e6, "calls": e.count,
                "share": e.self_cpu_time_total / 1e6 / ops_total if ops_total else 0.0} for e in events[:top]]
    return {"impl": impl_name, "n": n, "d": d, "wall_s": wall, "ops_self_s": ops_total,
            "threads": torch.get_num_threads(), "top": top_ops, "reading": profile_reading(wall, ops_total, top_ops)}


def profile_reading(wall: float, ops_total: float, top_ops: list[dict]) -> str:
    """One sentence on where the time goes: the leading ops' shares, and what lies outside torch ops."""
    leading = ", ".join(f"{p['op']} {p['share']:.0%}" for p in top_ops[:3])
    outside = max(wall - ops_total, 0.0) / wall if wall > 0 else 0.0
    return (f"What limits it: {leading} of the time spent in torch ops; "
            f"{outside:.0%} of the call's wall time lies outside torch ops (Python loop and dispatch).")


def memory_probes(sizes_n, quadratic_max_n: int, d: int = MEMORY_D) -> dict:
    """One harness.api.peak_memory probe per (implementation, mode, n): each its own child process."""
    from harness.api.peak_memory import Probe

    probes = {}
    for case in CASES:
        impl = case.impl
        if impl.target is None:
            continue
        for n in sorted(sizes_n):
            if impl.quadratic and n > quadratic_max_n:
                continue
            probes[(impl.name, case.mode, n)] = Probe(
                impl.target, (n,), d=d, kwargs=impl.kwargs, batch=BATCH, heads=HEADS, dtype=DTYPE,
                tensors=impl.tensors, backward=case.mode == "fwd+bwd")
    return probes


def environment() -> dict:
    import platform

    import torch

    model = ""
    try:
        with open("/proc/cpuinfo") as info:
            model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "")
    except OSError:
        pass
    return {"python": platform.python_version(), "numpy": np.__version__, "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(), "cpu": model}
