"""`attention-spec check` from a directory outside the project, and which pytest runs the suite takes over."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.command_line.cli import main, pytest_args
from harness.pytest_plugin.options import SUITE_ROOT, runs_the_suite
from harness.reporting.report import SCHEMA
from tests.fixtures.runs import ROOT

USER_CODE = '''
import numpy as np


def attention(q, k, v, *, scale=None, causal=False, mask=None):
    k, v = (np.repeat(x, q.shape[1] // x.shape[1], axis=1) for x in (k, v))
    scores = q @ k.swapaxes(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], dtype=bool)), scores, -np.inf)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = weights.sum(axis=-1, keepdims=True)
    return weights / np.where(total > 0, total, 1.0) @ v


def unnormalised(q, k, v, *, scale=None):
    return np.exp(q @ k.swapaxes(-1, -2) * q.shape[-1] ** -0.5) @ v
'''


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """A command with the suite importable as a clone is (the checkout on PYTHONPATH, not installed)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HYPOTHESIS_PROFILE": "ci"}
    env.pop("ATTN_IMPLS", None)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_check_runs_from_a_directory_outside_the_project(tmp_path):
    assert ROOT not in tmp_path.parents
    (tmp_path / "my_attn.py").write_text(USER_CODE)
    done = _run(["-m", "harness.command_line.cli", "check", "my_attn:attention", "--impl", "my_attn.py:unnormalised",
                 "--report", "out", "--", "--claims", "rows-sum-to-one"], tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr  # pytest's status: unnormalised fails
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    statuses = {(v["claim"], v["impl"]): v["status"] for v in report["verdicts"]}
    assert statuses[("rows-sum-to-one", "my_attn:attention[float64]")] == "pass"
    assert statuses[("rows-sum-to-one", "my_attn.py:unnormalised[float64]")] == "fail"
    assert report["schema"] == SCHEMA and report["profile"] == "ci"


def test_pytest_args_name_the_suite_packages_and_pass_the_rest_on(monkeypatch):
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    args = pytest_args(["a:f", "b.py:g"], "out", ["--claims", "sdpa-formula"])
    assert args[:2] == [str(ROOT / "properties"), str(ROOT / "interpretations")]
    assert args[args.index("--rootdir") + 1] == str(ROOT)
    assert args[-10:] == ["--impl", "a:f", "--impl", "b.py:g", "--report", "out", "-n", "auto",
                          "--claims", "sdpa-formula"]
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert pytest_args(["a:f"], None, [])[-4:] == ["-p", "xdist.plugin", "-n", "auto"]


@pytest.mark.parametrize("chosen", [["-n", "0"], ["-n2"], ["--numprocesses=3"]])
def test_workers_the_user_chose_replace_one_per_core(chosen):
    args = pytest_args(["a:f"], None, chosen)
    assert "auto" not in args and args[-len(chosen):] == chosen


def test_check_without_an_implementation_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["check", "--", "--claims", "sdpa-formula"])
    assert exit_.value.code == 2
    assert "check needs an implementation" in capsys.readouterr().err


def _config(invoked: Path, *args: str) -> SimpleNamespace:
    return SimpleNamespace(args=list(args), invocation_params=SimpleNamespace(dir=invoked))


@pytest.mark.parametrize(("invoked", "args", "suite"), [
    (ROOT, ["properties/test_formula.py::test_output_matches_oracle"], True),
    (ROOT, [str(ROOT)], True),
    (ROOT / "tests", ["test_cli.py"], True),
    (Path("/"), [str(SUITE_ROOT / "interpretations")], True),
    (ROOT.parent, ["."], False),
    (Path("/tmp"), ["test_mine.py"], False),
])
def test_the_suite_takes_over_runs_that_collect_from_its_directory(invoked, args, suite):
    assert runs_the_suite(_config(invoked, *args)) is suite


def test_a_users_own_run_keeps_its_hypothesis_settings_and_loads_no_implementation(tmp_path):
    (tmp_path / "test_mine.py").write_text(textwrap.dedent("""
        import sys

        from hypothesis import settings


        def test_untouched(pytestconfig):
            assert pytestconfig.getoption("impl") == []  # the options exist
            assert settings.default.max_examples == 100
            assert "harness.pytest_plugin.plugin" not in sys.modules and "protocol.registry" not in sys.modules
    """))
    done = _run(["-m", "pytest", "-p", "harness.pytest_plugin.options", "-p", "no:cacheprovider", "test_mine.py"],
                tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_entry_point_and_conftest_register_the_options_once():
    """`-p harness.pytest_plugin.options` registers it by that name first, as the installed entry point does."""
    done = _run(["-m", "pytest", "-p", "harness.pytest_plugin.options", "properties/test_formula.py",
                 "--collect-only", "-q"], ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
