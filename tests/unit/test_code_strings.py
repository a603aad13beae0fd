"""Where code kept in strings is run: every call of the builtins exec, eval and compile in the project's Python,
found from the syntax trees (ruff's S102 and S307 see exec and eval only, with the same files excepted in
pyproject's per-file-ignores). The seeds' code, run as written, is the one place code belongs in strings: problems
are built by step functions (specs.derivations), repro snippets call the check a property ran
(harness.api.reproducible) and are run by a fresh interpreter in the tests."""

from __future__ import annotations

import ast
import subprocess

from tests.fixtures.runs import ROOT

SEEDS_AS_WRITTEN = {
    "impls/seeds/seed001_multihead_record.py": {"exec", "compile"},  # seed 001's split and merge, repaired
    "properties/head_checks.py": {"exec", "compile"},  # seed 001's split and merge as written
    "properties/test_heads.py": {"exec", "compile"},  # seed 001's multi-head pseudo-code as written
    "properties/seed_code_checks.py": {"exec"},  # seed 000's three lines as written
}
BUILTINS = {"exec", "eval", "compile"}


def code_string_calls(source: str) -> set[str]:
    """The builtins among exec, eval and compile that `source` calls by name (not re.compile or torch.compile)."""
    return {node.func.id for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILTINS}


def test_code_in_strings_runs_only_where_listed():
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    found = {}
    for name in files.stdout.split():
        path = ROOT / name
        if path.is_file() and not name.startswith("impls/seeds/seed_code/"):  # the seeds' files themselves
            calls = code_string_calls(path.read_text(encoding="utf-8"))
            if calls:
                found[name] = calls
    assert found == SEEDS_AS_WRITTEN


def test_the_scan_tells_the_builtins_from_methods_of_the_same_name():
    source = ("import re, torch\nre.compile('x')\ntorch.compile(f)\nexec('1')\nx = eval('2')\n"
              "compile('3', 'f', 'eval')\n")
    assert code_string_calls(source) == {"exec", "eval", "compile"}
    assert code_string_calls("import re\nre.compile('x')\n") == set()
