"""The documentation's worked examples run as the pages say (docs/examples/, shown on the pages through snippets
and in README.md), so that they cannot rot: the README's implementation passes, the new property catches a
wrong implementation, the record loads and passes, and the failure page shows what the suite prints."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from protocol.registry import load_impl
from tests.fixtures.runs import ROOT, run_suite

EXAMPLES = ROOT / "docs" / "examples"
MINE = "docs/examples/my_attention.py:attention"
RECORD = "docs/examples/key_blocks.py:key_block_attention"
FORGOT = "docs/examples/forgot_scale.py:attention"
FAILURE_PAGE = ROOT / "docs" / "tasks" / "understand-a-failure.md"


def _block(text: str, after: str, language: str) -> str:
    """The first fenced block of `language` after the line that starts with `after`."""
    rest = text[text.index(after):]
    found = re.search(rf"```{language}\n(.*?)```", rest, re.DOTALL)
    assert found, f"no ```{language} block after {after!r}"
    return found.group(1)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The README's implementation, the record example and the failure example, as the pages run them."""
    return run_suite("properties", "interpretations", "--impl", MINE, "--impl", RECORD, "--impl", FORGOT,
                     "--claims", "sdpa-formula,rows-sum-to-one,tiled-equals-global", "--long-regimes", "no",
                     report_dir=tmp_path_factory.mktemp("examples"))


def test_the_readme_shows_the_example_file_as_it_is():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert _block(readme, "## Check your own attention", "python") == (EXAMPLES / "my_attention.py").read_text()


def test_the_readme_example_passes(run):
    for claim in ("sdpa-formula", "rows-sum-to-one"):
        assert run.verdict(claim, f"{MINE}[float64]")["status"] == "pass", run.output[-3000:]


def test_the_record_example_loads_as_a_record_and_passes():
    record = load_impl(RECORD)
    assert (record.name, record.backend) == ("numpy-key-blocks", "numpy")
    assert record.capabilities.tile_keywords == ("block_keys",)
    assert record.capabilities.dtypes == ("float64", "float32")


def test_the_record_example_passes_in_both_dtypes(run):
    for dtype in ("float64", "float32"):
        for claim in ("sdpa-formula", "rows-sum-to-one", "tiled-equals-global"):
            verdict = run.verdict(claim, f"numpy-key-blocks[{dtype}]")
            assert verdict["status"] == "pass", (claim, dtype, verdict["detail"][:1000])


def test_the_failure_example_fails_as_the_page_shows(run):
    assert run.returncode == 1
    page = FAILURE_PAGE.read_text(encoding="utf-8")
    symbols = {"pass": "+", "fail": "F", "skip": "s", "error": "E"}
    for line in _block(page, "## 1. The matrix", "text").splitlines()[1:]:
        slug, shown = line.split()
        assert symbols[run.verdict(slug, f"{FORGOT}[float64]")["status"]] == shown, slug
    verdict = run.verdict("sdpa-formula", f"{FORGOT}[float64]")
    assert verdict["status"] == "fail" and not verdict["declared"]
    shown = [line.strip() for line in _block(page, "## 2. The violation", "text").splitlines()]
    printed = {line.removeprefix("E").strip() for line in run.output.splitlines()}
    assert [line for line in shown if line not in printed] == [], "the page shows what the suite no longer prints"


def test_the_failure_pages_reproduction_reproduces_it():
    page = FAILURE_PAGE.read_text(encoding="utf-8")
    violation = [line.strip() for line in _block(page, "## 2. The violation", "text").splitlines()]
    done = subprocess.run([sys.executable, "-c", _block(page, "## 3. The reproduction", "python")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and not done.stdout, "the check fails, so PASS is never printed"
    raised = [line.strip() for line in done.stderr.splitlines()]
    shown = [line.strip() for line in _block(page, "## 3. The reproduction", "text").splitlines()]
    assert shown == violation, "the reproduction shows the violation of section 2"
    start = raised.index(shown[0])
    assert raised[start:start + len(shown)] == shown, "the repro raises the property's own violation"


def test_the_new_property_passes_a_correct_implementation_and_catches_a_bias(tmp_path):
    biased = tmp_path / "biased.py"
    biased.write_text("import importlib.util\n"
                      f"spec = importlib.util.spec_from_file_location('mine', {str(EXAMPLES / 'my_attention.py')!r})\n"
                      "mine = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(mine)\n\n\n"
                      "def attention(q, k, v, *, scale=None, causal=False, mask=None):\n"
                      "    return mine.attention(q, k, v, scale=scale, causal=causal, mask=mask) + 0.5\n")
    run = run_suite("docs/examples/test_doubling_values.py", "--impl", MINE, "--impl", f"{biased}:attention",
                    report_dir=tmp_path / "report")
    claim = "output-is-weighted-sum-of-values"
    assert run.verdict(claim, f"{MINE}[float64]")["status"] == "pass", run.output[-3000:]
    caught = run.verdict(claim, f"{biased}:attention[float64]")
    assert caught["status"] == "fail" and "2 out(V)" in caught["detail"], caught
