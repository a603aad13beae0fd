"""The reproduction snippet of a failed property: Python that rebuilds the input and shows the failure (by
default it runs the property's comparison with the oracle and prints the verdict, as `verdict` words it)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

import numpy as np

from harness.api.assertions import compare
from harness.engine.call_state import seeding_lines
from harness.engine.guarded_call import handed_over
from protocol.registry import Impl
from specs.dtypes import EXTENSION_DTYPES, is_extension
from specs.problem_code import check_code
from specs.problems import Problem
from specs.tolerance import Allowance

# what a snippet may need besides its problem's own imports (Problem.imports): it imports the names it uses
# (imports_used)
IMPORTS = (
    "import numpy as np",
    "from harness.api import as_float64, numpy_facing, verdict",
    "from protocol.registry import load_impl",
    "from specs.layouts import to_layout",
    "from specs.reference import attention",
    "from specs.tolerance import forward_allowance",
)


def imports_used(imports: tuple[str, ...], body: str) -> list[str]:
    """The lines of `imports` that `body` (Python source) needs: each `from m import ...` cut to the names the body
    reads, an `import m as x` kept where it reads x."""
    read = {node.id for node in ast.walk(ast.parse(body)) if isinstance(node, ast.Name)}
    kept = []
    for line in imports:
        module, _, names = line.partition(" import ")
        if not module.startswith("from "):
            if line.split()[-1] in read:
                kept.append(line)
            continue
        used = [name for name in names.split(", ") if name in read]
        if used:
            kept.append(f"{module} import {', '.join(used)}")
    return kept


def numpy_facing(impl: Impl) -> Callable:
    """impl's function, called with NumPy q, k, v and keyword arrays whatever it takes (Capabilities.tensors): a
    tensors="torch" implementation is handed torch tensors sharing their memory, as the suite hands them; the
    output comes back as the implementation returns it."""
    tensors = impl.capabilities.tensors
    if tensors == "numpy":
        return impl.fn

    def call(*arrays, **kwargs):
        arrays, kwargs = handed_over(arrays, kwargs, tensors)
        return impl.fn(*arrays, **kwargs)

    return call


def verdict(got: np.ndarray, expected: np.ndarray, allowance: Allowance, *, what: str = "out",
            versus: str = "the float64 oracle") -> str:
    """The comparison a property makes, worded for a reader: PASS with the largest |error| / allowed, or FAIL
    with the worst element, the count over the tolerance and the allowance's terms there."""
    comparison = compare(got, expected, allowance, what=what)
    if comparison.within:
        return f"PASS: {what} is within the tolerance of {versus} (largest |error| / allowed {comparison.ratio:.3g})"
    return "\n".join([f"FAIL: {what} differs from {versus} beyond the tolerance", *comparison.details])


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


def repro_snippet(problem: Problem, *, target: str, dtype: str, layout: str, causal_alignment: str,
                  call_line: str | None = None, past_range: bool = False, tensors: str = "numpy") -> str:
    """Rebuild `problem`, load the implementation `target` (called with NumPy arrays however it takes them,
    `tensors`: numpy_facing), lay the inputs out as the property did, then run `call_line` (default:
    call_line_for({})) and, when it assigns `out`, print the verdict of that output against the oracle
    within specs.tolerance.forward_allowance (`past_range` as the trial judged it). It imports what it uses.
    Raises specs.problems.CodeMismatch if the snippet would rebuild another problem."""
    check_code(problem)
    load = f"load_impl({target!r})"
    lines = [
        problem.code(),
        f"fn = {load}.fn" if tensors == "numpy" else f"fn = numpy_facing({load})",
        cast_line(dtype),
    ]
    if problem.has_mod_arrays and dtype != "float64":
        lines.append(f"p = p.handed({dtype!r})  # the bias, slopes and sinks as the implementation got them")
    if layout != "contiguous":
        lines.append(f"q, k, v = (to_layout(x, {layout!r}) for x in (q, k, v))")
    imports = (*problem.imports(), *IMPORTS)
    call = call_line or call_line_for({})
    lines.append(call)
    if not re.search(r"^out = ", call, re.MULTILINE):
        return _with_imports(imports, lines)  # the call computes something else (a backward's dq, dk, dv): done
    past = ", past_range=True" if past_range else ""
    lines += [
        f"oracle, allowance = forward_allowance(*(x.astype(float) for x in (q, k, v)), dtype={dtype!r}{past}, "
        f"**p.kwargs(), causal_alignment={causal_alignment!r})",
        "print(verdict(as_float64(out), oracle.out, allowance))",
    ]
    return _with_imports(imports, lines)


def _with_imports(imports: tuple[str, ...], lines: list[str]) -> str:
    body = "\n".join(lines)
    return "\n".join([*imports_used(imports, body), body])
