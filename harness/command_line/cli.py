"""`attention-spec`: check implementations with the installed suite, and compare two runs' reports.

  attention-spec check TARGET... [--impl TARGET] [--report DIR] [-- PYTEST_ARGS...]
      every property (the `properties` and `interpretations` packages, wherever they are installed)
      against the named implementations, `module.path:function` (imported from the current
      directory) or `path/to/file.py:function`, split over one pytest-xdist worker per core (`-- -n 0`:
      one process); exits with pytest's exit status.
  attention-spec merge GROUP... --report DIR
      one report from the groups of a split run (pytest-split's --splits N --group i, each with its own --report):
      the groups' outcomes folded and judged together; exits 1 on an unexpected failure, 2 when they cannot merge.
  attention-spec compare OLD NEW
      the verdicts that changed between two report.json files (or --report directories); exits 1
      when one got worse, 2 when a report cannot be read, 0 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from protocol.expectation_rows import ExpectationError
from protocol.expectations import rows_changed

PACKAGES = ("properties", "interpretations")  # located, not imported: pytest imports them, rewriting asserts
# harness itself (this module's package) is imported before pytest could rewrite it; its __init__ has no assert
HARNESS_NOT_REWRITTEN = ("ignore:Module already imported so cannot be rewritten; harness"
                         ":pytest.PytestAssertRewriteWarning")


def pytest_args(targets: Sequence[str], report: str | None, extra: Sequence[str]) -> list[str]:
    """The pytest command line that runs every property against `targets`, whatever the current directory."""
    packages = [Path(importlib.util.find_spec(name).origin).parent for name in PACKAGES]
    args = [*map(str, packages),
            "-p", "harness.pytest_plugin.options",  # also when PYTEST_DISABLE_PLUGIN_AUTOLOAD is set
            # the suite's settings, not those of a project or conftest.py around the current directory
            "-c", os.devnull, "--rootdir", str(packages[0].parent), "--noconftest",
            "-p", "no:cacheprovider", "-W", "ignore::RuntimeWarning",  # as pyproject.toml's [tool.pytest]
            "-W", HARNESS_NOT_REWRITTEN]
    for target in targets:
        args += ["--impl", target]
    if report:
        args += ["--report", report]
    return args + _workers(extra) + list(extra)


def _workers(extra: Sequence[str]) -> list[str]:
    """One pytest-xdist worker per core (each with one thread: harness.pytest_plugin.worker_threads), unless the
    pytest arguments choose (`-n 0` runs in this process) or pytest-xdist is absent."""
    chosen = any(arg in ("-n", "--numprocesses") or arg.startswith(("-n", "--numprocesses=")) for arg in extra)
    if chosen or importlib.util.find_spec("xdist") is None:
        return []
    # pytest loads the plugin through its entry point (named "xdist"); with autoloading off, by its module
    loaded = ["-p", "xdist.plugin"] if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD") else []
    return [*loaded, "-n", "auto"]


def check(targets: Sequence[str], report: str | None, extra: Sequence[str]) -> int:
    if os.getcwd() not in sys.path:  # `module.path:function` targets are the user's modules
        sys.path.insert(0, os.getcwd())
    return int(pytest.main(pytest_args(targets, report, extra)))


def compare(old: Path, new: Path) -> int:
    # imported here: it imports Hypothesis, which `check` leaves to pytest to import (and rewrite)
    from harness.reporting.compare import ReportError, changes, load_verdicts, summary_lines

    try:
        before, after = load_verdicts(old), load_verdicts(new)
    except ReportError as exc:
        print(f"attention-spec compare: {exc}", file=sys.stderr)
        return 2
    found = changes(before, after)
    for line in summary_lines(found, len(before.keys() | after.keys())):
        print(line)
    return int(any(change.kind == "worse" for change in found))


def merge(groups: Sequence[Path], report: Path) -> int:
    """One report from split groups' outcomes (harness.reporting.split_runs): 1 when a verdict is an unexpected
    failure or error, or a built-in's declaration was caught by no group; 2 when the groups cannot be merged."""
    # imported here, as compare's
    from harness.engine.verdicts import judge_declarations
    from harness.reporting.report import build_report, write_report
    from harness.reporting.report_text import terminal_lines
    from harness.reporting.split_runs import SplitError, merge_outcomes

    try:
        merged = merge_outcomes(list(groups))
    except SplitError as exc:
        print(f"attention-spec merge: {exc}", file=sys.stderr)
        return 2
    fatal = judge_declarations(merged.state, merged.derandomized)
    built = build_report(merged.state, merged.duration_s, profile=merged.profile)
    write_report(built, report, merged.state.variants)
    for line in [*terminal_lines(built, 100, str(report)), *merged.state.warnings]:
        print(line)
    print(f"merged {len(merged.groups)} groups ({', '.join(merged.groups)}) into {report}/report.json")
    unexpected = built["summary"]["unexpected_fail"] + built["summary"]["error"]
    return int(fatal or unexpected > 0)


def show_rows(table: Path, measured: Path) -> int:
    """Print the rows `measured` adds to `table` (+) and leaves out (-); 0, or 2 when a file cannot be read."""
    try:
        added, removed = rows_changed(table.read_text(encoding="utf-8"), measured.read_text(encoding="utf-8"))
    except (OSError, ExpectationError) as exc:
        print(f"attention-spec rows: {exc}", file=sys.stderr)
        return 2
    for line in added:
        print(f"+ {line}")
    for line in removed:
        print(f"- {line}")
    print(f"{len(added)} added, {len(removed)} left out")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attention-spec", description="Check attention implementations against "
                                     "the specification's properties, and compare two runs' reports.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("check", help="run every property against implementations",
                              epilog="arguments after -- go to pytest, e.g. -- --claims sdpa-formula -x")
    run.add_argument("targets", nargs="*", metavar="TARGET",
                     help="module.path:function or path/to/file.py:function")
    run.add_argument("--impl", action="append", default=[], metavar="TARGET", help="one more target")
    run.add_argument("--report", metavar="DIR", help="write report.json, report.md and report.html to DIR")
    diff = commands.add_parser("compare", help="the verdicts that changed between two reports; 1 if one got worse")
    diff.add_argument("old", type=Path, help="the earlier report.json, or its directory")
    diff.add_argument("new", type=Path, help="the later report.json, or its directory")
    rows = commands.add_parser("rows", help="the expectation rows a file written by --accept-expectations adds to "
                                            "impls/expectations.toml and those it leaves out")
    rows.add_argument("measured", type=Path, help="the file --accept-expectations wrote")
    rows.add_argument("--table", type=Path, help="the table it is compared with (default: impls/expectations.toml)")
    join = commands.add_parser("merge", help="one report from the groups of a split run (pytest-split's --splits)")
    join.add_argument("groups", nargs="+", type=Path, metavar="GROUP", help="a group's --report directory")
    join.add_argument("--report", type=Path, required=True, metavar="DIR", help="where the merged report goes")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = _parser()
    options = parser.parse_args(argv)
    if options.command == "merge":
        if extra:
            parser.error("merge takes no pytest arguments")
        return merge(options.groups, options.report)
    if options.command == "rows":
        if extra:
            parser.error("rows takes no pytest arguments")
        table = options.table or Path(importlib.util.find_spec("impls").origin).parent / "expectations.toml"
        return show_rows(table, options.measured)
    if options.command == "compare":
        if extra:
            parser.error("compare takes no pytest arguments")
        return compare(options.old, options.new)
    targets = options.targets + options.impl
    if not targets:
        parser.error("check needs an implementation: module.path:function or path/to/file.py:function")
    return check(targets, options.report, extra)


if __name__ == "__main__":
    sys.exit(main())
