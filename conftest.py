"""Suite entry point: command-line options, Hypothesis profiles and the report plugin.

Options (CONTRACT 1 and 2, DESIGN.md):
  --impl TARGET      module.path:function or path/to/file.py:function (repeatable;
                     env ATTN_IMPLS, comma-separated); only these are checked
  --backend NAME     with no --impl: only built-ins of this backend (numpy, torch,
                     cupy; repeatable; env ATTN_BACKENDS)
  --report DIR       write report.json, report.md and report.html
  --impl-timeout S   a single implementation call longer than this fails
  --isolate auto|yes|no   calls in a worker process (auto: --impl targets and native records)
  --long-regimes auto|yes|no   long sequences and d = 256 (auto: only with --impl)
  --claims SLUG,...  run only the properties of these claims
Profiles (--hypothesis-profile or HYPOTHESIS_PROFILE): dev (default), ci, thorough.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

pytest_plugins = ("harness.plugin",)

_COMMON = dict(
    deadline=None,  # implementation calls are guarded by --impl-timeout instead
    # Every distinct failure is reported, so a declared failure never hides an undeclared one
    # (harness.trial raises declared ones as their own exception type).
    report_multiple_bugs=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", max_examples=25, **_COMMON)
# ci: no target phase. Hill-climbing towards error/allowed -> 1 (harness.trial) costs hundreds of calls per
# property; it is the thorough profile's job.
settings.register_profile("ci", max_examples=15, derandomize=True, print_blob=True, database=None,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink], **_COMMON)
settings.register_profile("thorough", max_examples=400, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_addoption(parser) -> None:
    group = parser.getgroup("attention", "attention specification")
    group.addoption("--impl", action="append", default=[], metavar="TARGET",
                    help="implementation to check: module.path:function or path/to/file.py:function")
    group.addoption("--backend", action="append", default=[], metavar="NAME",
                    help="with no --impl, check only built-ins of this backend (numpy, torch, cupy)")
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
