"""The seeds' code as written, where what is claimed is about the code itself rather than about an
implementation's output: seed 000's three lines and its flash_attention example, seed 002's
differential-geometric function."""

from __future__ import annotations

import pytest

from harness.api.markers import checks
from properties.seed_code_checks import more_peaked_than_prescribed, never_called, raised_as_written
from specs.catalogue import load_claims

torch = pytest.importorskip("torch", reason="the seeds' code is written in torch")

from impls.seeds.seed_code.seed002_readings import differential_geometric_attention  # noqa: E402  (needs torch)


@checks("three-line-code-as-written", subject="seed000-three-line-code")
def test_three_lines_run_as_written():
    """The claim's `original` is the seed's three lines, verbatim (tests/unit/test_catalogue.py checks it)."""
    raised = raised_as_written(load_claims()["three-line-code-as-written"].original)
    assert raised is None, raised


@checks("snippet-scale-keeps-softmax-flat", subject="seed000-flash-attention-example")
def test_snippet_scale_keeps_softmax_flat():
    verdict = more_peaked_than_prescribed(1.0)
    assert verdict is None, verdict


@checks("differential-tangent-projection", subject="seed002-differential")
def test_tangent_projection_takes_part():
    """The nested function under the comment 计算切空间投影 (compute the tangent-space projection)."""
    unused = never_called(differential_geometric_attention, "tangent_projection")
    assert unused is None, unused
