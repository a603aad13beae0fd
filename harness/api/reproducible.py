"""The repro snippet of a failure inside a check: the check called again, by its qualified name, on the same
arguments, so the snippet runs the very code that failed and raises the same violation (and prints PASS once the
implementation is fixed).

A property marks the module-level functions it runs its checks in with @reproducible; their arguments are written
as Python: a problem by its code (specs.problems.Problem.code, proved to rebuild it), a variant by its target and
dtype, an object with reproduction_arguments (a Trial) by the call that makes it, anything else as a literal
(specs.literals). A failure
while such a check runs takes the innermost one whose arguments can all be written (Trial.fail notes the running
checks and writes the snippet only when it is read); it falls back to the trial's own last call where none is
running.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

from harness.api.repro import imports_used
from protocol.registry import Variant
from specs.literals import NotALiteral, literal_code
from specs.problem_code import check_code
from specs.problems import Problem


@dataclass(frozen=True)
class CheckCall:
    """One running call of a @reproducible check."""

    check: Callable
    args: tuple
    kwargs: dict


_RUNNING: ContextVar[tuple[CheckCall, ...]] = ContextVar("running_checks", default=())


def reproducible(check: Callable) -> Callable:
    """Mark `check`, a module-level function, as one a failure's repro calls again on the same arguments."""
    if "<" in check.__qualname__:
        raise ValueError(f"{check.__qualname__} must be a module-level function, which a snippet imports")

    @functools.wraps(check)
    def run(*args, **kwargs):
        __tracebackhide__ = True
        token = _RUNNING.set((*_RUNNING.get(), CheckCall(run, args, kwargs)))
        try:
            return check(*args, **kwargs)
        finally:
            _RUNNING.reset(token)

    run.reproducible = True
    return run


def running_checks() -> tuple[CheckCall, ...]:
    """The @reproducible checks running now, outermost first (what first_check_snippet reads later)."""
    return _RUNNING.get()


def first_check_snippet(calls: tuple[CheckCall, ...]) -> str | None:
    """The snippet that calls the innermost of `calls` whose arguments can be written, or None. A problem whose
    code does not rebuild it raises CodeMismatch: a step to mend, not a reason to print another check's call."""
    for call in reversed(calls):
        try:
            return check_snippet(call)
        except NotALiteral:
            continue
    return None


def check_snippet(call: CheckCall) -> str:
    """Python that rebuilds the arguments of `call` and calls its check (raises NotALiteral or CodeMismatch when an
    argument cannot be written)."""
    writer = _Arguments()
    arguments = [writer.code(value) for value in call.args]
    arguments += [f"{name}={writer.code(value)}" for name, value in call.kwargs.items()]
    name = call.check.__name__
    lines, called = writer.lines, f"{name}({', '.join(arguments)})"
    if len(writer.problems) == 1:  # one problem: it stays `p`, as its code builds it
        lines, called = lines[:-1], re.sub(r"\bproblem_1\b", "p", called)
    body = "\n".join([*lines, called,
                      f"print('PASS: {name} holds on this input')  # reached once the implementation is fixed"])
    imports = (*writer.imports, "import numpy as np", "from harness.api.trial import Trial",
               "from protocol.registry import Variant, load_impl", f"from {call.check.__module__} import {name}")
    return "\n".join([*dict.fromkeys(imports_used(imports, body)), body])


def _variant_code(variant: Variant) -> str:
    """`variant` as load_impl makes it from its target: refused where its function was replaced by another face's
    (load_impl would give the dense one)."""
    impl = variant.impl
    dense = impl.faces.get("dense")
    if (impl.fn is not dense) if dense is not None else any(impl.fn is face for face in impl.faces.values()):
        raise NotALiteral(f"{impl.name}'s function is not the one load_impl({impl.target!r}) gives")
    return f"Variant(load_impl({impl.target!r}), {variant.dtype!r})"


class _Arguments:
    """Writes a check's arguments as Python, a problem once per object (its code, then a name for it)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.imports: list[str] = []
        self.problems: dict[int, str] = {}

    def code(self, value: object) -> str:
        if isinstance(value, Problem):
            return self._problem(value)
        if isinstance(value, Variant):
            return _variant_code(value)
        made_by = getattr(value, "reproduction_arguments", None)  # an object rebuilt by a call (a Trial)
        if callable(made_by):
            name, args, kwargs = made_by()
            parts = [self.code(arg) for arg in args] + [f"{key}={self.code(item)}" for key, item in kwargs.items()]
            return f"{name}({', '.join(parts)})"
        return literal_code(value)

    def _problem(self, problem: Problem) -> str:
        if id(problem) not in self.problems:
            check_code(problem)
            name = f"problem_{len(self.problems) + 1}"
            self.lines += [*problem.code().splitlines(), f"{name} = p"]
            self.imports += problem.imports()
            self.problems[id(problem)] = name
        return self.problems[id(problem)]
