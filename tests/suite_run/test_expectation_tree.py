"""Adding a property touches its module only; renaming a record touches only the rows that name it (issue: one table
of expectations). Shown on a copy of the tree: a property added to properties/test_formula.py is checked on a
built-in record whose deviation explains its failure, with no other file changed; renaming the record stops the next
run at start, listing the rows that name it; renaming it in those rows too makes the run pass again."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.fixtures.runs import ROOT, run_suite

RECORD = "impls.seeds.seed002_tiled:memory_optimized_tiled_attention"  # one-key-per-value: ignores a 65th value
ADDED = '''

@checks("one-key-per-value")
def test_added_witness_of_one_value_too_many_is_rejected(variant):
    """Added by tests/suite_run/test_expectation_tree.py: the fixed witness alone, 64 keys and 65 values."""
    witness = build(n_q=64, n_k=64, d=8, d_v=8)
    trial = Trial(variant, witness)
    for mismatched in mismatched_values(witness):
        expect_rejected(trial, mismatched)
'''
OLD_NAME = '"seed002-memory-optimized-tiled"'  # the record's name, in its decorator and in its rows
NEW_NAME = '"seed002-memory-optimised-tiled"'
IGNORED = shutil.ignore_patterns(".git", ".tox", "__pycache__", ".hypothesis", "*.egg-info")


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, (path, old)
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_a_property_added_and_renamed_in_a_copy_of_the_tree(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=IGNORED)
    added = "properties/test_formula.py::test_added_witness_of_one_value_too_many_is_rejected"
    with (tree / "properties" / "test_formula.py").open("a", encoding="utf-8") as module:
        module.write(ADDED)

    run = run_suite(added, "--impl", RECORD, report_dir=tmp_path / "added", root=tree)
    verdict = run.verdict("one-key-per-value", "seed002-memory-optimized-tiled[float64]")
    assert verdict is not None and verdict["failed_properties"] == [added.rpartition("::")[2]], run.output[-3000:]
    assert verdict["status"] == "fail" and verdict["declared"], verdict  # its deviation explains the new property
    assert run.returncode == 0, run.output[-3000:]

    _replace(tree / "impls" / "seeds" / "seed002_tiled.py", OLD_NAME, NEW_NAME)
    stale = run_suite(added, "--impl", RECORD, root=tree)
    assert stale.returncode == pytest.ExitCode.USAGE_ERROR, stale.output[-3000:]
    assert "expectations.toml has rows naming what no longer exists" in stale.output
    assert "no built-in record is named 'seed002-memory-optimized-tiled'" in stale.output, stale.output[-3000:]

    _replace(tree / "impls" / "expectations.toml", OLD_NAME, NEW_NAME)
    renamed = run_suite(added, "--impl", RECORD, root=tree)
    assert renamed.returncode == 0, renamed.output[-3000:]
