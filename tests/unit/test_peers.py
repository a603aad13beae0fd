"""The peers (issue 23): records of impls/peers that a run checks only when `--backend peers` names them, that load
where their peer is not installed, whose adapters map the protocol to the peer's semantics (shown here where the
peer is installed: flex_attention comes with torch), whose findings are standalone scripts named by their rows, and
whose page is written from a run's report."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.pytest_plugin.stale_rows import record_names
from impls.records import BUILTIN_TARGETS
from protocol.expectations import load_table
from protocol.registry import DEFAULT_BACKENDS, load_targets
from specs.reference import attention
from tools import peers_page

ROOT = Path(__file__).resolve().parents[2]
FINDINGS = ROOT / "docs" / "findings"
PEER_TARGETS = tuple(t for t in BUILTIN_TARGETS if t.startswith("impls.peers."))
# what a finding's script may import: the standard library, NumPy and the peers themselves
PEER_PACKAGES = {"numpy", "torch", "jax", "flax", "keras", "transformers"}


def test_a_run_without_backend_leaves_the_peers_out():
    ready, missing = load_targets(BUILTIN_TARGETS)
    assert "peers" not in DEFAULT_BACKENDS and ready
    assert not [impl.name for impl in ready if impl.backend == "peers"]
    assert not [item.target for item in missing if item.target in PEER_TARGETS]


def test_backend_peers_selects_the_peers_and_says_which_are_not_installed():
    ready, missing = load_targets(BUILTIN_TARGETS, ("peers",))
    assert len(PEER_TARGETS) >= 6
    assert sorted([impl.target for impl in ready] + [item.target for item in missing]) == sorted(PEER_TARGETS)
    assert {impl.backend for impl in ready} <= {"peers"}
    assert all("is not installed (tox -e peers installs the peers)" in item.reason for item in missing)


def test_every_peer_record_loads_without_its_peer_so_the_table_is_checked_everywhere():
    names = record_names(PEER_TARGETS)
    assert names is not None and len(names) == len(PEER_TARGETS)


# -- the adapters: flex_attention is torch's, so this one runs wherever torch does -----------------------------------
def _problem(seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((2, 4, 5, 8)), rng.standard_normal((2, 2, 9, 8)), rng.standard_normal((2, 2, 9, 6))
    mods = dict(mask=rng.random((2, 1, 5, 9)) > 0.25, bias=rng.standard_normal((2, 4, 5, 9)), softcap=2.0,
                window_size=(3, 1), alibi_slopes=rng.random(4), scale=0.4)
    return q, k, v, mods


@pytest.mark.parametrize("causal", [False, True])
def test_the_flex_adapter_maps_every_keyword_as_the_oracle_reads_it(causal):
    pytest.importorskip("torch")
    from impls.peers.flex import flex_eager

    q, k, v, mods = _problem()
    out, lse = flex_eager(q, k, v, causal=causal, return_lse=True, **mods)
    expected = attention(q, k, v, causal=causal, causal_alignment="top_left", **mods)
    np.testing.assert_allclose(out, expected.out, atol=1e-12)
    np.testing.assert_allclose(lse, expected.lse, atol=1e-12)
    if causal:  # n_q != n_k: the other alignment is another answer, so the comparison above tells them apart
        other = attention(q, k, v, causal=True, causal_alignment="bottom_right", **mods)
        assert np.abs(other.out - out).max() > 1e-3


# -- the findings ---------------------------------------------------------------------------------------------------
def _scripts() -> list[Path]:
    return sorted(FINDINGS.glob("*.py"))


def _peer_rows():
    names = record_names(PEER_TARGETS)
    return [row for row in load_table() if row.subject in names]


def test_every_finding_is_a_row_naming_its_script_and_every_script_is_named():
    rows = _peer_rows()
    assert rows and _scripts()
    named = {row: re.findall(r"docs/findings/(\w+\.py)", row.reported) for row in rows}
    missing = [f"{row.subject} {row.claim}" for row, scripts in named.items()
               if not scripts or not all((FINDINGS / script).is_file() for script in scripts)]
    assert missing == [], "a peer row's `reported` names no script of docs/findings, or one that is not there"
    assert sorted({script for scripts in named.values() for script in scripts}) == [p.name for p in _scripts()]


@pytest.mark.parametrize("script", _scripts(), ids=lambda path: path.stem)
def test_a_finding_script_imports_only_its_peer_and_shows_it_in_under_twenty_lines(script):
    tree = ast.parse(script.read_text(encoding="utf-8"))
    docstring = ast.get_docstring(tree)
    assert docstring and "Status:" in docstring, "its docstring says whether it is known upstream (Status: ...)"
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    outside = imported - PEER_PACKAGES - set(sys.stdlib_module_names)
    assert not outside, f"imports {sorted(outside)}: a finding imports only its peer, NumPy and the standard library"
    body = tree.body[1:]  # after the docstring
    code_lines = {line for node in body for line in range(node.lineno, node.end_lineno + 1)}
    assert len(code_lines) < 20
    assert isinstance(body[-1], ast.Assert), "it ends asserting what the peer's documentation promises"


# -- the page -------------------------------------------------------------------------------------------------------
def _verdict(impl, claim, status, expected=False, why="", detail=""):
    return dict(claim=claim, impl=impl, status=status, detail=detail, counterexample=None, expected=expected,
                why=why, tests=1, test="t", failed_properties=[], examples_to_failure=None)


def test_the_page_tallies_each_peer_and_lists_each_finding_and_each_unexpected_failure():
    report = {"verdicts": [
        _verdict("peer-a[float64]", "rows-sum-to-one", "pass"),
        _verdict("peer-a[float32]", "rows-sum-to-one", "fail", expected=True, why="softmax in float32",
                 detail="beyond the tolerance"),
        _verdict("peer-a[float64]", "sdpa-formula", "skip", why="lacks"),
        _verdict("peer-b[float64]", "sdpa-formula", "fail", detail="raised ValueError"),
        _verdict("peer-b[float64]", "rows-sum-to-one", "fail", expected=True, detail="the seed is false as written"),
        _verdict("oracle", "sdpa-formula", "pass"),
    ]}
    page = peers_page.render(report, scripts={("peer-a", "rows-sum-to-one"): ["peer_a_float32.py"]})
    assert "- script: [peer_a_float32.py](../findings/peer_a_float32.py)" in page
    assert ("This run: 5 cells (claim x peer x dtype): 1 pass, 1 findings, 1 refuting a false seed sentence, 1 not "
            "run, 1 unexpected.") in page
    assert "| peer-a | 0 | 0 | 1 | 1 | 0 |" in page  # a claim is a finding where one dtype's cell is
    assert "| peer-b | 0 | 1 | 0 | 0 | 1 |" in page
    assert "### peer-a: peer_a_float32.py" in page and "### peer-b: unexpected: raised ValueError" in page
    assert "| rows-sum-to-one | **finding** | refutes the seed |" in page
    assert "| sdpa-formula | not run | **FAIL** |" in page
    assert "unexpected: the seed is false" not in page  # a refuted seed sentence is no finding


def test_the_page_refuses_a_report_without_peers(tmp_path, capsys):
    (tmp_path / "report.json").write_text('{"verdicts": []}')
    assert peers_page.main([str(tmp_path), str(tmp_path / "peers.md")]) == 2
    assert "holds no peer's verdict" in capsys.readouterr().err
