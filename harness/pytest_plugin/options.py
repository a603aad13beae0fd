"""The suite's pytest options, and which runs the suite takes over.

Registered by the `pytest11` entry point `harness.pytest_plugin.options` of an installed suite, or by the clone's
conftest.py; the entry point is named after this module, so pytest registers it once either way.

Options (CONTRACT 1 and 2, docs/design.md):
  --impl TARGET      module.path:function or path/to/file.py:function (repeatable;
                     env ATTN_IMPLS, comma-separated); only these are checked
  --backend NAME     with no --impl: only built-ins of this backend (numpy, torch,
                     cupy, peers; repeatable; env ATTN_BACKENDS); none: all but peers
  --report DIR       write report.json, report.md and report.html
  --impl-timeout S   a single implementation call longer than this fails
  --isolate auto|yes|no   calls in a worker process (auto: --impl targets and native records)
  --long-regimes auto|yes|no   long sequences and d = 256 (auto: only with --impl)
  --claims SLUG,...  run only the properties of these claims
  --accept-expectations FILE   write what the run measured as rows of the expectations table
                     (harness.pytest_plugin.accept; with the ci profile): review its diff against
                     impls/expectations.toml
  --perturb-declared the meta-test: every implementation that declares deviations is made wrong by one
                     element wherever a deviation fires (harness.api.perturb); tools/perturbed_cells.py
                     reads whether each declared cell then fails unexpectedly (nothing is shrunk)

A run that collects from the suite's own directory (the clone, or the installed packages, as
`attention-spec check` does) loads the suite's Hypothesis profile (harness.pytest_plugin.profiles: HYPOTHESIS_PROFILE,
or --hypothesis-profile, which wins) and the report plugin (harness.pytest_plugin.plugin). Any other pytest run in an
environment where the suite is installed only sees the options: its Hypothesis settings stay its own
and no implementation is loaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.pytest_plugin import profiles

SUITE_ROOT = Path(__file__).resolve().parents[2]  # the clone, or site-packages when installed


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from harness import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attention", "attention specification")
    group.addoption("--impl", action="append", default=[], metavar="TARGET",
                    help="implementation to check: module.path:function or path/to/file.py:function")
    group.addoption("--backend", action="append", default=[], metavar="NAME",
                    help="with no --impl, check only built-ins of this backend (numpy, torch, cupy; peers, the "
                         "implementations people use, only when named)")
    group.addoption("--report", default=None, metavar="DIR",
                    help="write report.json, report.md and report.html to DIR")
    group.addoption("--impl-timeout", type=float, default=20.0, metavar="SECONDS",
                    help="fail an implementation call that runs longer than this (default 20)")
    group.addoption("--isolate", choices=("auto", "yes", "no"), default="auto",
                    help="run implementation calls in a worker process, so a crash fails one property, not the run: "
                         "auto = implementations named with --impl and records declaring native code (default)")
    group.addoption("--long-regimes", choices=("auto", "yes", "no"), default="auto",
                    help="run the long regimes (n >= 1025, d = 256): auto = only with --impl (default)")
    group.addoption("--claims", action="append", default=[], metavar="SLUG[,SLUG]",
                    help="run only the properties of these claims (repeatable, comma-separated)")
    group.addoption("--accept-expectations", default=None, metavar="FILE",
                    help="write what this run measured as rows of the expectations table to FILE, to review as a "
                         "diff against impls/expectations.toml (with the derandomized ci profile)")
    group.addoption("--share-draws", choices=("yes", "no"), default="yes",
                    help="draw a property's examples once for every record its strategies cannot tell apart and "
                         "judge each record on them (harness.pytest_plugin.record_groups); no: each test draws its "
                         "own (default yes)")
    group.addoption("--perturb-declared", action="store_true", default=False,
                    help="the meta-test: make every implementation that declares deviations wrong by one element "
                         "wherever a declared deviation fires, so that its declared cells fail unexpectedly")


def runs_the_suite(config: pytest.Config) -> bool:
    """Whether a path the run collects from is the suite's directory or lies inside it."""
    here = config.invocation_params.dir
    paths = [(here / arg.partition("::")[0]).resolve() for arg in config.args]
    return any(path == SUITE_ROOT or SUITE_ROOT in path.parents for path in paths)


@pytest.hookimpl(tryfirst=True)  # before Hypothesis' own plugin, whose --hypothesis-profile then wins
def pytest_configure(config: pytest.Config) -> None:
    if runs_the_suite(config):
        profiles.load(os.environ.get("HYPOTHESIS_PROFILE"), shrink=not config.getoption("perturb_declared"))
        config.pluginmanager.import_plugin("harness.pytest_plugin.plugin")
