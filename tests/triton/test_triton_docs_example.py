"""docs/triton.md's worked example as the page runs it: a forward-only Triton kernel of a user's, checked by
`attention-spec check` with no setup (the interpreter is chosen before the module is imported, in every worker),
passes the formula, and its gradient properties skip, naming what it declared."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

from tests.fixtures.runs import ROOT

EXAMPLE = "docs/examples/triton_forward.py:attention"


def test_the_page_shows_the_example_as_it_is():
    page = (ROOT / "docs" / "triton.md").read_text(encoding="utf-8")
    assert '--8<-- "docs/examples/triton_forward.py"' in page


def test_a_forward_only_triton_kernel_is_checked_as_the_page_says(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness.command_line.cli", "check", EXAMPLE, "--report",
                           str(tmp_path), "--", "--claims", "sdpa-formula,differentiable-end-to-end", "-q", "-rs",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
                               "HYPOTHESIS_PROFILE": "smoke"})
    report = json.loads((tmp_path / "report.json").read_text())
    verdicts = {v["claim"]: v for v in report["verdicts"]}
    assert verdicts["sdpa-formula"]["status"] == "pass", done.stdout[-3000:]
    assert verdicts["differentiable-end-to-end"]["status"] == "skip"
    assert "differentiable output" in done.stdout, done.stdout[-3000:]
