"""pytest plugin: which implementations run (CONTRACT 1) and what the run concludes (CONTRACT 2).

- Selection: `--impl module:function` / `--impl file.py:function` (repeatable) or
  ATTN_IMPLS; otherwise every built-in available here, optionally narrowed by
  `--backend` / ATTN_BACKENDS. Properties taking a `variant` argument are
  parametrized over (implementation, dtype) variants.
- Verdicts: each test's outcome is attributed to its claims (the `claims`
  marker) and subject (the variant, or the marker's subject); a failure that
  names the claim whose assertion failed is attributed to that claim alone. A
  failure is expected only when the subject's declared deviations explain its
  example element by element (harness.api.explained_runs: the example is then
  recorded, not raised) or it matches the `refutation` of a claim the catalogue
  marks `holds = false` (harness.engine.declarations); it is reported as a bug
  report and shown as XFAIL. Any other failure exits 1.
- A declaration that the run exercised (all the properties it names ran on its
  dtype) without catching anything is reported: an error (exit 1) for built-in
  records under a derandomized profile (`ci`), a warning otherwise.
- Kernel resources: a run that collected CUDA records or CUDA properties compiles the catalogued kernels once,
  in the controller, for the report's `kernels` section (the pytest_attention_kernel_resources hook).
"""

from __future__ import annotations

import os
import shutil
import time

import pytest
from hypothesis import settings

from harness.api.evidence import PropertyViolation
from harness.api.markers import ORACLE, PROPERTIES
from harness.api.regime_cases import LONG_MARKER, long_regimes_wanted
from harness.engine import run_context
from harness.engine.declarations import RUNNING, RunningCheck
from harness.engine.verdicts import (
    LONG_SKIP_REASON,
    USER_PROPERTY,
    Contribution,
    Outcome,
    RunState,
    blame,
    declared_outcomes,
    judge_declarations,
)
from harness.pytest_plugin import record_groups
from harness.pytest_plugin.accept import write_accepted
from harness.pytest_plugin.stale_rows import record_names, stale_rows
from harness.pytest_plugin.worker_threads import one_thread_per_worker
from harness.reporting.kernel_resources import summary_line, wanted
from harness.reporting.report import build_report, write_report
from harness.reporting.report_text import terminal_lines
from harness.reporting.split_runs import write_outcomes
from protocol.expectations import load_table, tables
from protocol.rank_pool import POOL as RANK_POOL
from protocol.registry import (
    BACKENDS,
    FEATURES,
    ImplLoadError,
    Unavailable,
    Variant,
    load_impl,
    load_targets,
    variants,
)
from specs.catalogue import load_claims
from specs.dtypes import missing as dtype_missing

STATE = pytest.StashKey[RunState]()
RUNNING_CHECK = pytest.StashKey[RunningCheck | None]()
PROPERTIES_COLLECTED = pytest.StashKey[bool]()  # a property parametrized by implementation was collected


def _split(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _named_targets(config: pytest.Config) -> list[str]:
    """Implementations named with --impl or ATTN_IMPLS (none: every built-in available here)."""
    return config.getoption("impl") or _split(os.environ.get("ATTN_IMPLS"))


def _is_worker(config: pytest.Config) -> bool:
    """A pytest-xdist worker: its reports go to the controller, which judges the run."""
    return hasattr(config, "workerinput")


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
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        raise pytest.UsageError(f"unknown backend {', '.join(map(repr, unknown))}; valid: {', '.join(BACKENDS)}")
    return load_targets(builtin_targets(config), backends)


def builtin_targets(config: pytest.Config) -> tuple[str, ...]:
    """The project's records, as the records' plugin names them (harness.hookspecs); none without it."""
    return tuple(config.hook.pytest_attention_builtin_targets() or ())


def isolated_targets(option: str, impls: list, named: bool) -> frozenset[str]:
    """Whose calls run in a worker process: all (yes), none (no), or (auto) implementations named with --impl,
    which declare nothing and are the ones that crash, and records that declare native code. Never a sharded
    implementation: its calls run in its ranks' processes already (protocol.rank_pool), which a worker could not
    start (a daemon process has no children)."""
    isolable = [impl for impl in impls if not impl.capabilities.sharded]
    if option == "auto":
        return frozenset(impl.target for impl in isolable if named or impl.capabilities.native)
    return frozenset(impl.target for impl in isolable) if option == "yes" else frozenset()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "claims(*slugs, subject='oracle'): the catalogue claims a test checks")
    config.addinivalue_line("markers", "requires(*features): capabilities the implementation needs")
    config.addinivalue_line("markers", f"{LONG_MARKER}: a long regime (n >= 1025 or d = 256)")
    one_thread_per_worker(config)
    claims = load_claims()
    # the controller (or a plain run) checks the table of the built-in records once; a run of outside implementations
    # only (`attention-spec check`) does not import every record (torch among them) for a table it does not use
    named, builtin = _named_targets(config), builtin_targets(config)
    if not _is_worker(config) and (not named or set(named) & set(builtin)):
        _stop_at_stale_rows(claims, builtin)
    impls, unavailable = _select(config)
    for impl in impls:
        unknown = impl.declared_claims() - set(claims)
        if unknown:
            raise pytest.UsageError(f"{impl.name} declares known defects for unknown claims {sorted(unknown)}")
    unknown = {slug for option in config.getoption("claims") for slug in _split(option)} - set(claims)
    if unknown:
        raise pytest.UsageError(f"--claims names unknown claims {sorted(unknown)}")
    run_context.install(run_context.RunContext(
        timeout_s=config.getoption("impl_timeout"),
        isolated_targets=isolated_targets(config.getoption("isolate"), impls, bool(_named_targets(config))),
        accept=bool(config.getoption("accept_expectations")), perturb=config.getoption("perturb_declared")))
    state = RunState(variants(impls), unavailable, claims, builtin=frozenset(builtin_targets(config)))
    config.stash[STATE] = state
    config.pluginmanager.register(_Collector(state), "attention-verdicts")


def _stop_at_stale_rows(claims: dict, builtin: tuple[str, ...]) -> None:
    """Stop the run before it starts when a row of the expectations table names a property, claim or subject
    that no longer exists (harness.pytest_plugin.stale_rows)."""
    problems = stale_rows(load_table(), claims, record_names(builtin))
    if problems:
        named = ", ".join(path.name for path in tables())
        raise pytest.UsageError(f"{named} has rows naming what no longer exists (update those rows):\n  "
                                + "\n  ".join(problems))


def not_run_lines(unavailable: list) -> list[str]:
    """One line per selected implementation that cannot run on this machine, with why."""
    return [f"not run here: {item.target} ({item.reason})" for item in unavailable]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "variant" in metafunc.fixturenames:
        state = metafunc.config.stash[STATE]
        chosen = state.variants
        if not chosen and state.unavailable:  # the selected implementations all lack something here: say what
            reason = "no selected implementation can run here; " + "; ".join(not_run_lines(state.unavailable))
            metafunc.parametrize("variant", [pytest.param(None, marks=pytest.mark.skip(reason=reason))],
                                 ids=["not-run-here"])
            return
        metafunc.parametrize("variant", chosen, ids=[v.name for v in chosen])


def _takes_variant(item: pytest.Item) -> bool:
    params = getattr(item, "callspec", None)
    return params is not None and "variant" in params.params


def pytest_itemcollected(item: pytest.Item) -> None:
    if _takes_variant(item):
        item.config.stash[PROPERTIES_COLLECTED] = True


def _claims_and_subject(item: pytest.Item) -> tuple[tuple[str, ...], Variant | str] | None:
    marker = item.get_closest_marker("claims")
    if marker is None:
        return None
    if not _takes_variant(item):
        return marker.args, marker.kwargs.get("subject", ORACLE)
    variant = item.callspec.params["variant"]
    # with no implementation selected pytest parametrizes with a placeholder and skips the test
    return (marker.args, variant) if isinstance(variant, Variant) else None


def _marked_claims(item: pytest.Item) -> tuple[str, ...]:
    marker = item.get_closest_marker("claims")
    return marker.args if marker else ()


def _name(subject: Variant | str) -> str:
    return subject.name if isinstance(subject, Variant) else subject


def check_required_features(items: list) -> None:
    """`requires(...)` markers must name capabilities: a misspelt one would skip its property everywhere."""
    for item in items:
        marker = item.get_closest_marker("requires")
        unknown = sorted(set(marker.args) - set(FEATURES)) if marker else []
        if unknown:
            raise pytest.UsageError(f"{item.nodeid}: requires() names unknown features {unknown}; "
                                    f"valid: {', '.join(sorted(FEATURES))}")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    check_required_features(items)
    wanted = {slug for option in config.getoption("claims") for slug in _split(option)}
    # with --impl only the named implementations are checked: the oracle and seed subjects belong to the main job
    named = bool(_named_targets(config))
    dropped = [item for item in items
               if (named and not _takes_variant(item))
               or (wanted and not wanted & set(_marked_claims(item)))]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]
    if not long_regimes_wanted(config.getoption("long_regimes"), bool(_named_targets(config))):
        for item in items:
            if item.get_closest_marker(LONG_MARKER):
                item.add_marker(pytest.mark.skip(reason=LONG_SKIP_REASON))


def skip_reason(item: pytest.Item) -> str | None:
    """Why the item's variant cannot run it here: its dtype is missing, or it lacks a feature the item requires."""
    marker = item.get_closest_marker("requires")
    found = _claims_and_subject(item)
    if found and isinstance(found[1], Variant):
        return dtype_missing(found[1].dtype) or (marker and found[1].capabilities.lacking(*marker.args)) or None
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Group the tests that will run (after every deselection) whose records share draws (record_groups)."""
    if record_groups.sharing(session.config):
        record_groups.assign(session.items, skip_reason)


def pytest_runtest_setup(item: pytest.Item) -> None:
    reason = skip_reason(item)
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


def _new_check(item: pytest.Item) -> RunningCheck | None:
    """A RunningCheck for the item's property, claims and subject (None: it checks no claim)."""
    found = _claims_and_subject(item)
    if not found:
        return None
    return RunningCheck(item.originalname, found[0], found[1] if isinstance(found[1], Variant) else None)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Nothing left to run where the item's group judged it (harness.pytest_plugin.record_groups)."""
    return record_groups.call(pyfuncitem)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """Tell a pytest-xdist worker whether it shares draws (record_groups.sharing)."""
    node.workerinput[record_groups.WORKER_FLAG] = record_groups.sharing(node.config)


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before pytest-xdist's own, which would split groups
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist load` with shared draws: a group's tests go to one worker (record_groups.RecordGroupScheduling)."""
    if config.getoption("dist") == "load" and record_groups.sharing(config):
        return record_groups.scheduler(config, log, config.stash[STATE].variants)
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Tell harness.api.trial which property and claims are running (it picks the violation's type and
    records the time in calls and the headroom there)."""
    running = _new_check(item)
    if running is not None:  # judged in its group's loop: that run's check (record_groups)
        running = record_groups.shared_check(item, _new_check) or running
    item.stash[RUNNING_CHECK] = running
    token = RUNNING.set(running)
    try:
        yield
    finally:
        RUNNING.reset(token)


def _failure_outcomes(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport, slugs, subject,
                      contribution: Contribution) -> None:
    """The failed test's outcomes, one per claim it is blamed on, refuted or not."""
    state = item.config.stash[STATE]
    failures = _failures(call.excinfo)
    violation = next((f for f in failures if isinstance(f, PropertyViolation)), None)
    if violation is not None:
        detail = "\n\n".join(_message(f) for f in failures)
        counterexample = violation.counterexample()
    else:
        detail = call.excinfo.exconly()[:2000] if call.excinfo else report.longreprtext[-2000:]
        counterexample = _falsifying_example(report.longreprtext)
    messages = [(getattr(f, "claim", None), _message(f)) for f in failures] or [(None, detail)]
    outcomes = blame(slugs, item.originalname, messages)
    report.sections.append(("claim", _claim_section(state, tuple(outcomes))))
    running = item.stash.get(RUNNING_CHECK, None)
    for slug, outcome in outcomes.items():
        outcome.nodeid, outcome.detail, outcome.counterexample = item.nodeid, detail, counterexample
        outcome.examples_to_failure = running.count.first_failure if running else None
        contribution.add(slug, outcome)
    if all(o.expected for o in outcomes.values()):
        report.outcome = "skipped"
        report.wasxfail = f"declared: {next(iter(outcomes.values())).why}"


def _declared_outcomes(item: pytest.Item, report: pytest.TestReport, slugs, subject,
                       contribution: Contribution) -> bool:
    """The outcomes of the examples the test's declared deviations explained (none: False); a test that otherwise
    passed is shown as XFAIL."""
    running = item.stash.get(RUNNING_CHECK, None)
    if running is None or not running.declared or not isinstance(subject, Variant):
        return False
    contribution.triggered = sorted({index for example in running.declared for index in example.rows})
    outcomes = declared_outcomes(slugs, item.originalname, item.nodeid, running.declared,
                                 subject.impl.expectations)
    for slug, outcome in outcomes.items():
        outcome.examples_to_failure = running.count.first_failure
        contribution.add(slug, outcome)
    if report.passed:
        report.outcome = "skipped"
        report.wasxfail = f"declared: {next(iter(outcomes.values())).why}" if outcomes else "declared"
    return bool(outcomes)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Attach the test's contribution to its report (harness.engine.verdicts), where any process can read it."""
    result = yield
    report = result.get_result()
    found = _claims_and_subject(item)
    if found is None:
        return
    slugs, subject = found
    if report.when == "call":  # a test judged in its group's loop: its share of the loop (record_groups)
        report.duration = record_groups.duration(item, report.duration)
    contribution = Contribution(_name(subject), seconds=report.duration)
    if report.when == "setup":
        contribution.collected = [(slug, f"{item.module.__name__}::{item.originalname}") for slug in slugs]
        contribution.registered = [(slug, prop) for slug in slugs for prop in PROPERTIES.get(slug, ())]
    running = item.stash.get(RUNNING_CHECK, None)
    if report.when == "call" and running is not None:
        item.user_properties.append(("valid_examples", running.count.valid))  # JUnit XML: the teardown's report
        contribution.call_seconds, contribution.headroom = running.call_seconds, running.headroom
        contribution.exhibits = running.exhibits
        contribution.accepted = [(claim, deviation.name, deviation.params) for claim, deviation in running.accepted]
    concluded = report.when == "call" or (report.when == "setup" and not report.passed) or report.failed
    status = {"passed": "pass", "skipped": "skip"}.get(report.outcome, "fail")
    if report.failed and report.when != "call":
        status = "error"
    declared = report.when == "call" and status in ("pass", "fail") and _declared_outcomes(
        item, report, slugs, subject, contribution)
    if concluded and status == "fail":
        _failure_outcomes(item, call, report, slugs, subject, contribution)
    elif concluded and not declared:
        outcome = Outcome(status, item.nodeid, item.originalname)
        if status == "skip":
            outcome.detail = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
        if status == "error":
            outcome.detail = report.longreprtext[-2000:]
        for slug in slugs:
            contribution.add(slug, outcome)
    report.user_properties.append((USER_PROPERTY, contribution.as_data()))


class _Collector:
    """Folds each report's contribution into the run: in-process, or on the pytest-xdist controller
    (where reports arrive from the workers)."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.kept: list[dict] = []  # every contribution as data, for a split group's outcomes.json

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, data in report.user_properties:
            if name == USER_PROPERTY:
                self.state.fold(Contribution.from_data(data))
                self.kept.append(data)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    RANK_POOL.close()  # this process's ranks of the sharded implementations, if it started them
    state = session.config.stash.get(STATE, None)
    if state is None or not state.outcomes or _is_worker(session.config):
        return
    if _split_group(session.config):  # verdicts and uncaught rows are the merge's (harness.reporting.split_runs)
        _write_split_outcomes(session.config, state)
        return
    if judge_declarations(state, settings.default.derandomize) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if _accept(session.config.getoption("accept_expectations"), state) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    # the CUDA implementations' plugin compiles every catalogued kernel: seconds, once
    kernels = session.config.hook.pytest_attention_kernel_resources() if wanted(state) else None
    state.report = build_report(state, time.monotonic() - state.started,
                                profile=settings.get_current_profile_name(), kernels=kernels)
    directory = session.config.getoption("report")
    if directory:
        write_report(state.report, directory, state.variants)


def _split_group(config: pytest.Config) -> str | None:
    """'i/N' when pytest-split runs group i of N, else None."""
    splits = config.getoption("splits", default=None)
    return f"{config.getoption('group')}/{splits}" if splits else None


def _write_split_outcomes(config: pytest.Config, state: RunState) -> None:
    directory = config.getoption("report")
    if not directory:
        raise pytest.UsageError("a split run (--splits) writes its outcomes for `attention-spec merge`: give --report")
    path = write_outcomes(directory, state, config.pluginmanager.get_plugin("attention-verdicts").kept,
                          group=_split_group(config), profile=settings.get_current_profile_name(),
                          derandomized=bool(settings.default.derandomize),
                          duration_s=time.monotonic() - state.started)
    state.warnings.append(f"split group {_split_group(config)}: its outcomes are in {path}; no verdicts until "
                          "`attention-spec merge` reads every group's")


def _accept(path: str | None, state: RunState) -> bool:
    """--accept-expectations: write the measured rows (harness.pytest_plugin.accept); True when that failed the run
    (not the derandomized ci profile: nothing written; or a failure no documented deviation explains)."""
    if not path:
        return False
    if not settings.default.derandomize:
        state.warnings.append("ERROR: --accept-expectations needs the derandomized ci profile (HYPOTHESIS_PROFILE=ci "
                              f"or --hypothesis-profile ci): nothing written to {path}")
        return True
    problems = write_accepted(path, state)
    state.warnings += [f"ERROR: {problem}" for problem in problems]
    state.warnings.append(f"WARNING: measured rows written to {path}: review its diff against the table")
    return bool(problems)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    asked = config.stash.get(PROPERTIES_COLLECTED, False)
    if state is not None and state.report is None and state.unavailable and asked:
        # properties were asked for but none ran (all deselected, or every selected implementation unavailable)
        terminalreporter.section("claims x implementations")
        for line in not_run_lines(state.unavailable):
            terminalreporter.write_line(line)
        return
    if state is not None and state.report is None and _split_group(config):
        for warning in state.warnings:
            terminalreporter.write_line(warning, yellow=True)
        return
    if state is None or state.report is None:
        return
    # the terminal's width (pytest's writer; COLUMNS or 80 when not a terminal): the summary folds to it; the
    # messages after it stay one line each, as a reader or a script searches for them
    width = getattr(getattr(terminalreporter, "_tw", None), "fullwidth", 0) or shutil.get_terminal_size().columns
    directory = config.getoption("report")
    terminalreporter.section("claims x implementations")
    for line in terminal_lines(state.report, width, directory):
        terminalreporter.write_line(line)
    if state.report.get("kernels"):
        terminalreporter.write_line(summary_line(state.report["kernels"]))
    for warning in state.warnings:
        error = warning.startswith("ERROR")
        terminalreporter.write_line(warning, red=error, yellow=not error)
    if directory:
        terminalreporter.write_line(f"report written to {directory}/report.json, report.md, report.html")
