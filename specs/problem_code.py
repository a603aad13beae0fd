"""A problem's code read back: the lines a repro snippet prints, turned into the problem again by calling the
functions they name (build, a worked example of specs.examples, the steps of specs.problems.STEP_MODULES) on the
literals they pass (specs.literals), never by running them as code.

`rebuild` reads report.json's counterexample "problem" (a problem's repr); `check_code` proves a problem's code
rebuilds it bit for bit before a snippet prints it. A step defined outside the project (a user's property) is found
once its module has been imported.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable

from specs import examples
from specs.literals import NotALiteral, literal_value
from specs.problems import REBUILT_FIELDS, STEP_MODULES, CodeMismatch, Problem, build, identical, registered_steps
from specs.validation import AttentionInputError


def steps() -> dict[str, Callable[..., Problem]]:
    """Every step function by name: the project's (STEP_MODULES, imported here) and those registered since."""
    for module_name in STEP_MODULES:
        importlib.import_module(module_name)
    return registered_steps()


def rebuild(text: str) -> Problem:
    """The problem whose code or repr (report.json's counterexample "problem") is `text`, bit for bit."""
    if not isinstance(text, str) or not text.strip():
        raise AttentionInputError(f"rebuild needs a problem's repr, got {text!r}")
    try:
        statements = ast.parse(text).body
    except SyntaxError as exc:
        raise AttentionInputError(f"{text!r} is not a problem's code: {exc.msg}") from exc
    problem = None
    for position, statement in enumerate(statements):
        call = _call_of(statement, text, first=position == 0)
        problem = _origin(call, text) if position == 0 else _step(call, problem, text)
    return problem


def check_code(problem: Problem) -> None:
    """Raise CodeMismatch unless the problem's code rebuilds its recipe, arrays and keywords bit for bit."""
    try:
        rebuilt = rebuild(problem.code())
    except Exception as exc:  # a step whose arguments no longer rebuild what it made, say
        raise CodeMismatch(f"the code of {problem!r} raises {type(exc).__name__}: {exc}") from exc
    wrong = [name for name in REBUILT_FIELDS if not identical(getattr(problem, name), getattr(rebuilt, name))]
    if wrong:
        raise CodeMismatch(f"the code of {problem!r} does not rebuild its {', '.join(wrong)}")


def _call_of(statement: ast.stmt, text: str, *, first: bool) -> ast.Call:
    """The call a line makes: `p = call(...)`, or the repr's first item, a bare call."""
    value = None
    assigns_p = isinstance(statement, ast.Assign) and [ast.unparse(t) for t in statement.targets] == ["p"]
    if assigns_p or (first and isinstance(statement, ast.Expr)):
        value = statement.value
    if not isinstance(value, ast.Call):
        raise AttentionInputError(f"{ast.unparse(statement)!r} in {text!r} is not a problem's line (p = a call)")
    return value


def _arguments(call: ast.Call, text: str, *, skip: int = 0) -> tuple[tuple, dict]:
    if any(keyword.arg is None for keyword in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        raise AttentionInputError(f"{ast.unparse(call)!r} in {text!r}: * and ** are not a problem's arguments")
    try:
        args = tuple(literal_value(arg) for arg in call.args[skip:])
        kwargs = {keyword.arg: literal_value(keyword.value) for keyword in call.keywords}
    except NotALiteral as exc:
        raise AttentionInputError(f"{ast.unparse(call)!r} in {text!r}: {exc}") from exc
    return args, kwargs


def _origin(call: ast.Call, text: str) -> Problem:
    name = ast.unparse(call.func)
    args, kwargs = _arguments(call, text)
    if name == "build" and not args:
        return build(**kwargs)
    example = name.removeprefix("examples.")
    if name.startswith("examples.") and not example.startswith("_") and callable(getattr(examples, example, None)):
        made = getattr(examples, example)(*args, **kwargs)
        if isinstance(made, Problem):
            return made
    raise AttentionInputError(f"{name!r} in {text!r} builds no problem: a problem starts with build(...) or a "
                              "worked example of specs.examples")


def _step(call: ast.Call, problem: Problem, text: str) -> Problem:
    name, known = ast.unparse(call.func), steps()
    if name not in known or not call.args or ast.unparse(call.args[0]) != "p":
        raise AttentionInputError(f"{ast.unparse(call)!r} in {text!r} is not a known step called on p (a step "
                                  "of a property outside the project is known once its module is imported)")
    args, kwargs = _arguments(call, text, skip=1)
    return problem.derive(known[name], *args, **kwargs)
