"""What the seeds' code does as written, found from its bytecode and its calls (seed 000's three lines and its
flash_attention example, seed 002's differential-geometric function): a function never called, nested functions
never used, the error a line raises as written, weights more peaked than the scale prescribes."""

from __future__ import annotations

import dis
import inspect
from collections.abc import Callable
from functools import cache

import numpy as np

from specs.reference import attention
from specs.statistics import ALPHA, hoeffding_radius

# The example's own inputs: q, k = torch.randn(2, 16, 4096, 64), so one row is a randn query against
# 4096 randn keys of dimension 64. Rows with independent keys are iid, so each mean top weight is
# within the Hoeffding radius of its expectation (top weights lie in [0, 1]) with probability 1 - ALPHA.
# Measured (2e3 rows): the mean top weight is 0.63 with scale 1.0 and 0.006 with 1/8, so
# 0.63 - t > 0.006 + t for t = 0.164 at 400 rows: the test rejects scale 1.0 with a wide margin, and
# accepts any scale whose weights are as flat as 1/8's.
SNIPPET_D, SNIPPET_KEYS = 64, 4096
PEAK_ROWS, PEAK_CHUNK = 400, 25
PRESCRIBED_SCALE = 1 / np.sqrt(SNIPPET_D)


@cache
def mean_top_weights(scales: tuple[float, ...], rows: int = PEAK_ROWS, seed: int = 40_000) -> tuple[float, ...]:
    """For each scale, the mean over `rows` independent rows of the largest softmax weight (float64 oracle)."""
    rng = np.random.default_rng(seed)
    tops = {scale: [] for scale in scales}
    for _ in range(rows // PEAK_CHUNK):
        q = rng.standard_normal((PEAK_CHUNK, 1, 1, SNIPPET_D))
        k = rng.standard_normal((PEAK_CHUNK, 1, SNIPPET_KEYS, SNIPPET_D))
        for scale in scales:
            tops[scale].append(attention(q, k, k[..., :1], scale=scale).weights.max(axis=-1).ravel())
    return tuple(float(np.mean(np.concatenate(tops[scale]))) for scale in scales)


def _names_read(code) -> set[str]:
    names = set()
    for instruction in dis.get_instructions(code):
        if instruction.opname.startswith("LOAD"):
            value = instruction.argval
            names |= {n for n in (value if isinstance(value, tuple) else (value,)) if isinstance(n, str)}
    return names


def raised_as_written(source: str) -> str | None:
    """Run `source` with only torch and float64 tensors Q, K, V (batch 2, 5 tokens, d_k 4: seed 000's worked
    shapes) defined; what it raises, or None if it runs."""
    import torch  # the seeds' code is written in torch; the checks of bytecode and of weights need none

    generator = torch.Generator().manual_seed(0)
    Q, K, V = (torch.randn(2, 5, 4, dtype=torch.float64, generator=generator) for _ in range(3))
    try:
        exec(source, {"torch": torch, "Q": Q, "K": K, "V": V})
    except Exception as exc:  # what the seed's code raises is the finding
        return f"as written, the seed's code raises {type(exc).__name__}: {exc}"
    return None


def more_peaked_than_prescribed(scale: float, rows: int = PEAK_ROWS) -> str | None:
    """Seed 000 § 具体过程 (让Softmax函数在一个比较平缓的区域工作) against § Flash Attention's example:
    why softmax_scale = `scale` on the example's inputs is far more peaked than 1/sqrt(d_k), or None."""
    top, prescribed = mean_top_weights((scale, PRESCRIBED_SCALE), rows)
    t = hoeffding_radius(rows)
    if top - t <= prescribed + t:
        return None
    return (f"softmax_scale={scale!r} at d={SNIPPET_D} makes the weights far more peaked than the prescribed "
            f"1/sqrt({SNIPPET_D}): a row's largest weight averages {top:.3f} against {prescribed:.3f} over {rows} "
            f"randn rows of {SNIPPET_KEYS} keys (each mean within {t:.3f} of its expectation, alpha {ALPHA:g}); "
            f"the scores have variance {scale**2 * SNIPPET_D:g}, where dividing by sqrt(d_k) leaves 1")


def unused_nested_functions(fn: Callable) -> list[str]:
    """The functions `fn` defines in its body whose name nothing but their own body reads (no call, no
    reference), from the bytecode of `fn` and of the other functions nested in it. A helper that calls
    itself counts as read: building its closure reads the name."""
    nested = [const for const in fn.__code__.co_consts if inspect.iscode(const)]
    unused = []
    for helper in nested:
        readers = [fn.__code__] + [code for code in nested if code is not helper]
        if not any(helper.co_name in _names_read(code) for code in readers):
            unused.append(helper.co_name)
    return unused


def never_called(fn: Callable, helper: str) -> str | None:
    """Why `helper`, a function `fn` defines, takes no part in what `fn` computes, or None if something reads it."""
    if helper not in unused_nested_functions(fn):
        return None
    return (f"{fn.__name__} defines {helper} and never calls it: no instruction of the function reads the name, "
            "so it takes no part in the output")
