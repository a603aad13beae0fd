"""The meta-test that cannot be fooled (harness.api.perturb, tools/perturbed_cells.py): wherever a declared
deviation fires, the twin run (--perturb-declared) moves one element the deviation does not explain by twice its
allowance, so the failure reads like the declared one; every declared cell must then be reported as unexpected.

Run here at CI size on implementations whose declarations fire on several claims: the FlashAttention wrapper (its
empty-row and causal-ALiBi log-sum-exp) and a keyless-row-mean implementation (the window claims)."""

from __future__ import annotations

from tests.fixtures.runs import run_suite
from tools.perturbed_cells import declared_cells, judge

TARGETS = ("--impl", "tests/fixtures/declared_impls.py:flash_attention_wrapper",
           "--impl", "tests/fixtures/declared_impls.py:keyless_mean_only")
PROPERTIES = ("properties/test_masking.py", "properties/test_keyword_domain.py", "properties/test_score_mods.py")


def test_every_declared_cell_of_the_twin_is_unexpected(tmp_path):
    args = (*PROPERTIES, *TARGETS, "--isolate", "no", "--long-regimes", "no")
    run = run_suite(*args, report_dir=tmp_path / "run")
    assert run.returncode == 0, run.output[-3000:]
    twin = run_suite(*args, "--perturb-declared", report_dir=tmp_path / "twin")
    assert twin.returncode == 1, twin.output[-3000:]  # the perturbed cells are unexpected failures
    cells = declared_cells(run.report)
    assert len(cells) >= 4
    assert {variant.split("[")[0] for variant, _ in cells} == {target for target in TARGETS if target != "--impl"}
    result = judge(run.report, twin.report)
    assert result["hidden"] == [] and result["not reached"] == [], result
    assert len(result["caught"]) == len(cells)
