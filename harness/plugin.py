"""pytest plugin: which implementations run (CONTRACT 1) and what the run concludes (CONTRACT 2).

- Selection: `--impl module:function` / `--impl file.py:function` (repeatable) or
  ATTN_IMPLS; otherwise every built-in available here, optionally narrowed by
  `--backend` / ATTN_BACKENDS. Properties taking a `variant` argument are
  parametrized over (implementation, dtype) variants.
- Verdicts: each test's outcome is attributed to its claims (the `claims`
  marker) and subject (the variant, or the marker's subject); a failure that
  names the claim whose assertion failed is attributed to that claim alone. A
  failure is expected only when a scoped declaration covers it (claim, dtype,
  property, message: impls.defects) or it matches the `refutation` of a claim
  the catalogue marks `holds = false` (harness.declarations); it is reported as
  a bug report and shown as XFAIL. Any other failure exits 1.
- A declaration that the run exercised (all the properties it names ran on its
  dtype) without catching anything is reported: an error (exit 1) for built-in
  records under a derandomized profile (`ci`), a warning otherwise.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass, field

import pytest
from hypothesis import settings

from harness.declarations import RUNNING, RunningCheck, expected_failure
from harness.evidence import PropertyViolation
from harness.markers import ORACLE, PROPERTIES
from harness.regimes import LONG_MARKER, LONG_SKIP_REASON, long_regimes_wanted
from harness.report import build_report, matrix_lines, write_report
from harness.trial import CallSettings
from impls.registry import ImplLoadError, Unavailable, Variant, builtin_impls, load_impl, variants
from specs.catalogue import Claim, load_claims


@dataclass
class Outcome:
    status: str  # pass / fail / skip / error
    nodeid: str
    prop: str = ""  # the property function's name
    detail: str = ""
    counterexample: dict | None = None
    expected: bool = False
    why: str = ""  # why the failure was expected
    examples_to_failure: int | None = None  # Hypothesis examples run until the first failure


@dataclass
class RunState:
    variants: list[Variant]
    unavailable: list[Unavailable]
    claims: dict[str, Claim]
    outcomes: dict[tuple[str, str], list[Outcome]] = field(default_factory=lambda: defaultdict(list))
    collected: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    triggered: set[tuple[str, int]] = field(default_factory=set)  # (variant name, index of its scope)
    problems: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # subject -> test time
    started: float = field(default_factory=time.monotonic)
    report: dict | None = None


STATE = pytest.StashKey[RunState]()
RUNNING_CHECK = pytest.StashKey[RunningCheck | None]()


def _split(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _named_targets(config: pytest.Config) -> list[str]:
    """Implementations named with --impl or ATTN_IMPLS (none: every built-in available here)."""
    return config.getoption("impl") or _split(os.environ.get("ATTN_IMPLS"))


def _select(config: pytest.Config) -> tuple[list, list[Unavailable]]:
    targets = _named_targets(config)
    if targets:
        impls, unavailable = [], []
        for target in targets:
            try:
                impl = load_impl(target)
            except (ImplLoadError, ImportError) as exc:
                raise pytest.UsageError(f"cannot use implementation {target!r}: {exc}") from None
            if impl.unavailable:
                unavailable.append(Unavailable(target, impl.unavailable))
            else:
                impls.append(impl)
        return impls, unavailable
    backends = tuple(config.getoption("backend") or _split(os.environ.get("ATTN_BACKENDS")))
    return builtin_impls(backends)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "claims(*slugs, subject='oracle'): the catalogue claims a test checks")
    config.addinivalue_line("markers", "requires(*features): capabilities the implementation needs")
    config.addinivalue_line("markers", f"{LONG_MARKER}: a long regime (n >= 1025 or d = 256)")
    impls, unavailable = _select(config)
    claims = load_claims()
    for impl in impls:
        unknown = impl.declared_claims() - set(claims)
        if unknown:
            raise pytest.UsageError(f"{impl.name} declares known defects for unknown claims {sorted(unknown)}")
    CallSettings.timeout_s = config.getoption("impl_timeout")
    config.stash[STATE] = RunState(variants(impls), unavailable, claims)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "variant" in metafunc.fixturenames:
        chosen = metafunc.config.stash[STATE].variants
        metafunc.parametrize("variant", chosen, ids=[v.name for v in chosen])


def _takes_impl(item: pytest.Item) -> bool:
    params = getattr(item, "callspec", None)
    return params is not None and "variant" in params.params


def _claims_and_subject(item: pytest.Item) -> tuple[tuple[str, ...], Variant | str] | None:
    marker = item.get_closest_marker("claims")
    if marker is None:
        return None
    if not _takes_impl(item):
        return marker.args, marker.kwargs.get("subject", ORACLE)
    variant = item.callspec.params["variant"]
    # with no implementation selected pytest parametrizes with a placeholder and skips the test
    return (marker.args, variant) if isinstance(variant, Variant) else None


def _marked_claims(item: pytest.Item) -> tuple[str, ...]:
    marker = item.get_closest_marker("claims")
    return marker.args if marker else ()


def _name(subject: Variant | str) -> str:
    return subject.name if isinstance(subject, Variant) else subject


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    state = config.stash[STATE]
    wanted = {slug for option in config.getoption("claims") for slug in _split(option)}
    unknown = wanted - set(state.claims)
    if unknown:
        raise pytest.UsageError(f"--claims names unknown claims {sorted(unknown)}")
    dropped = [item for item in items
               if (config.getoption("impl_properties_only") and not _takes_impl(item))
               or (wanted and not wanted & set(_marked_claims(item)))]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]
    if not long_regimes_wanted(config.getoption("long_regimes"), bool(_named_targets(config))):
        for item in items:
            if item.get_closest_marker(LONG_MARKER):
                item.add_marker(pytest.mark.skip(reason=LONG_SKIP_REASON))
    for item in items:
        found = _claims_and_subject(item)
        if found:
            slugs, subject = found
            for slug in slugs:
                state.collected[(slug, _name(subject))].add(f"{item.module.__name__}::{item.originalname}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker("requires")
    found = _claims_and_subject(item)
    if marker and found and isinstance(found[1], Variant):
        reason = found[1].capabilities.lacking(*marker.args)
        if reason:
            pytest.skip(reason)


def _failures(excinfo) -> list[BaseException]:
    """The exceptions of a failed test, groups (Hypothesis' multiple bugs) flattened."""
    pending, found = [excinfo.value] if excinfo else [], []
    while pending:
        exc = pending.pop(0)
        nested = getattr(exc, "exceptions", None)
        if nested and not isinstance(exc, PropertyViolation):
            pending += list(nested)
        else:
            found.append(exc)
    return found


def _message(exc: BaseException) -> str:
    return exc.message() if isinstance(exc, PropertyViolation) else f"{type(exc).__name__}: {exc}"


def _falsifying_example(text: str) -> dict:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "Falsifying example" in line), None)
    if start is None:
        return {"details": lines[-12:]}
    return {"details": lines[start:start + 12]}


def _claim_section(state: RunState, slugs: tuple[str, ...]) -> str:
    parts = []
    for slug in slugs:
        claim = state.claims.get(slug)
        if claim:
            parts.append(f"[{slug}] {claim.statement}\n  seed: {claim.source}\n  sentence: {claim.original}")
        else:
            parts.append(f"[{slug}] (not in the catalogue)")
    return "\n".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Tell harness.trial which property and claims are running (it picks the violation's type)."""
    found = _claims_and_subject(item)
    running = RunningCheck(item.originalname, found[0]) if found else None
    item.stash[RUNNING_CHECK] = running
    token = RUNNING.set(running)
    try:
        yield
    finally:
        RUNNING.reset(token)


def _blame(state: RunState, slugs: tuple[str, ...], subject, prop: str, failures: list[BaseException],
           text: str) -> dict[str, Outcome]:
    """One failed outcome per claim a failure belongs to, each marked expected when declared."""
    blamed: dict[str, list[str]] = {}
    for exc in failures or [None]:
        claim = getattr(exc, "claim", None)
        message = _message(exc) if exc is not None else text
        for slug in ((claim,) if claim in slugs else slugs):
            blamed.setdefault(slug, []).append(message)
    outcomes = {}
    for slug, messages in blamed.items():
        reasons = [expected_failure(slug, subject, prop, m) for m in messages]
        outcome = Outcome("fail", "", prop, expected=all(reasons))
        if outcome.expected:
            outcome.why = reasons[0].why
            for reason in reasons:
                if reason.scope is not None:
                    state.triggered.add((subject.name, subject.impl.known_defects.index(reason.scope)))
        outcomes[slug] = outcome
    return outcomes


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    result = yield
    report = result.get_result()
    found = _claims_and_subject(item)
    if found is None:
        return
    state = item.config.stash[STATE]
    slugs, subject = found
    state.seconds[_name(subject)] += report.duration
    if not (report.when == "call" or (report.when == "setup" and not report.passed) or report.failed):
        return
    status = {"passed": "pass", "skipped": "skip"}.get(report.outcome, "fail")
    if report.failed and report.when != "call":
        status = "error"
    prop = item.originalname
    if status in ("pass", "skip", "error"):
        outcome = Outcome(status, item.nodeid, prop)
        if status == "skip":
            outcome.detail = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
        if status == "error":
            outcome.detail = report.longreprtext[-2000:]
        for slug in slugs:
            state.outcomes[(slug, _name(subject))].append(outcome)
        return
    failures = _failures(call.excinfo)
    violation = next((f for f in failures if isinstance(f, PropertyViolation)), None)
    if violation is not None:
        detail = "\n\n".join(_message(f) for f in failures)
        counterexample = violation.counterexample()
    else:
        detail = call.excinfo.exconly()[:2000] if call.excinfo else report.longreprtext[-2000:]
        counterexample = _falsifying_example(report.longreprtext)
    outcomes = _blame(state, slugs, subject, prop, failures, detail)
    report.sections.append(("claim", _claim_section(state, tuple(outcomes))))
    running = item.stash.get(RUNNING_CHECK, None)
    for slug, outcome in outcomes.items():
        outcome.nodeid, outcome.detail, outcome.counterexample = item.nodeid, detail, counterexample
        outcome.examples_to_failure = running.count.first_failure if running else None
        state.outcomes[(slug, _name(subject))].append(outcome)
    if all(o.expected for o in outcomes.values()):
        report.outcome = "skipped"
        report.wasxfail = f"declared: {next(iter(outcomes.values())).why}"


def _short(name: str) -> str:
    """A property's function name, from 'module::name' or 'name'."""
    return name.rpartition("::")[2]


def _uncaught_declarations(state: RunState) -> list[tuple[Variant, str]]:
    """Declarations whose properties all ran on their dtype, at least one not skipped, none caught."""
    uncaught = []
    for variant in state.variants:
        for index, scope in enumerate(variant.impl.known_defects):
            if variant.dtype not in scope.dtypes or (variant.name, index) in state.triggered:
                continue
            outcomes = state.outcomes.get((scope.claim, variant.name), [])
            claim = state.claims.get(scope.claim)
            if claim is not None and not claim.holds and any(o.expected for o in outcomes):
                continue  # a false seed sentence, refuted on this subject: the declaration had nothing left to cover
            named = {_short(p) for p in scope.properties or PROPERTIES.get(scope.claim, ())}
            collected = {_short(p) for p in state.collected.get((scope.claim, variant.name), ())}
            ran = [o for o in outcomes if o.prop in named and o.status != "skip"]
            if named <= collected and ran:
                uncaught.append((variant, scope.describe()))
    return uncaught


def judge_declarations(state: RunState, derandomized: bool) -> bool:
    """Report declarations nothing caught; True when one is a built-in's under a derandomized profile
    (the run is reproducible, so the record's declaration is wrong: exit 1)."""
    fatal = False
    outside = {variant.impl for variant in state.variants if not variant.impl.builtin}  # built-ins: tests/
    for impl in outside:
        for scope in impl.known_defects:
            registered = {_short(name) for name in PROPERTIES.get(scope.claim, ())}
            strays = sorted(set(scope.properties) - registered)
            if strays:
                state.problems.append(f"WARNING: {impl.name} declares properties {strays} for '{scope.claim}', "
                                      f"which are not among its properties collected here: {sorted(registered)}")
    for variant, declaration in _uncaught_declarations(state):
        error = variant.impl.builtin and derandomized
        fatal |= error
        state.problems.append(f"{'ERROR' if error else 'WARNING'}: {variant.name} declares a known defect that "
                              f"no property caught: {declaration}")
    return fatal


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(STATE, None)
    if state is None or not state.outcomes:
        return
    if judge_declarations(state, settings.default.derandomize) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    state.report = build_report(state, time.monotonic() - state.started,
                                profile=settings.get_current_profile_name())
    directory = session.config.getoption("report")
    if directory:
        write_report(state.report, directory)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None or state.report is None:
        return
    terminalreporter.section("claims x implementations")
    for line in matrix_lines(state.report):
        terminalreporter.write_line(line)
    for problem in state.problems:
        terminalreporter.write_line(problem, red=problem.startswith("ERROR"), yellow=not problem.startswith("ERROR"))
    directory = config.getoption("report")
    if directory:
        terminalreporter.write_line(f"report written to {directory}/report.json, report.md, report.html")
