"""The reproduction snippet of a failed property: Python that rebuilds the input and shows the failure."""

from __future__ import annotations

import numpy as np

from harness.engine.call_state import seeding_lines
from specs.dtypes import EXTENSION_DTYPES, is_extension
from specs.problems import STEP_IMPORTS, Problem

# what a derivation step may use (specs.problems.STEP_IMPORTS), then what the snippet itself needs
IMPORTS = (
    *STEP_IMPORTS,
    "from harness.engine.guarded_call import as_float64",
    "from protocol.registry import load_impl",
    "from specs.layouts import to_layout",
    "from specs.reference import attention",
)


def call_line_for(extra: dict, args: str = "q, k, v", *, global_seed: int | None = None) -> str:
    """The line that calls the implementation with the problem's keywords and `extra`, after the lines that
    seed the global generators where the call was seeded (harness.engine.call_state)."""
    parts = [args, "**p.kwargs()"] + [f"{key}={value!r}" for key, value in extra.items()]
    return "\n".join([*seeding_lines(global_seed), f"out = fn({', '.join(parts)})"])


def cast_line(dtype: str) -> str:
    """The line that casts p's float64 q, k, v to `dtype`, after importing the package of an extension dtype
    (ml_dtypes registers bfloat16 with NumPy)."""
    cast = f"q, k, v = (x.astype({dtype!r}) for x in (p.q, p.k, p.v))"
    return f"import {EXTENSION_DTYPES[dtype]}\n{cast}" if is_extension(dtype) else cast


def index_code(index: tuple) -> str:
    """Python source for an index tuple of Ellipsis, full slices and integer arrays."""
    parts = []
    for item in index:
        if item is Ellipsis:
            parts.append("...")
        elif isinstance(item, slice) and item == slice(None):
            parts.append(":")
        else:
            parts.append(repr(np.asarray(item).tolist()))
    return ", ".join(parts)


def repro_snippet(problem: Problem, *, target: str, dtype: str, layout: str, causal_alignment: str,
                  call_line: str | None = None, script: str | None = None) -> str:
    """Rebuild `problem`, load the implementation `target`, lay the inputs out as the property did, then
    run `script` if given, else `call_line` (default: call_line_for({})) and print its distance from the oracle.
    Raises specs.problems.CodeMismatch if the snippet would rebuild another problem."""
    problem.check_code()
    lines = [
        *IMPORTS,
        problem.code(),
        f"fn = load_impl({target!r}).fn",
        cast_line(dtype),
    ]
    if layout != "contiguous":
        lines.append(f"q, k, v = (to_layout(x, {layout!r}) for x in (q, k, v))")
    if script is not None:
        return "\n".join(lines + [script])
    lines += [
        call_line or call_line_for({}),
        "oracle = attention(*(x.astype(float) for x in (q, k, v)), **p.kwargs(), "
        f"causal_alignment={causal_alignment!r})",
        "print(np.abs(as_float64(out) - oracle.out).max())",
    ]
    return "\n".join(lines)
