"""The lint env's duplicate-code check (tox.ini) covers every package outside tests/ and reports what it should.

The check is read from tox.ini and run on planted modules: a block of six lines (code or comments) copied between two
modules is reported, while what the check leaves out on purpose (the same imports, CONTRACT 1's signature) and a
shared run of five lines are not.
"""

from __future__ import annotations

import configparser
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.runs import ROOT

pytest.importorskip("pylint", reason="pylint is not installed (the lint and tests envs install it)")


def _lint_pylint_command() -> list[str]:
    """The lint env's pylint command, split into its words."""
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    commands = tox["testenv:lint"]["commands"].replace("\\\n", " ")
    lines = [line for line in commands.splitlines() if line.strip().startswith("pylint ")]
    assert len(lines) == 1, f"expected one pylint command in the lint env, found {lines}"
    return shlex.split(lines[0])


def _options() -> list[str]:
    return [word for word in _lint_pylint_command()[1:] if word.startswith("-")]


def _paths() -> set[str]:
    return {word for word in _lint_pylint_command()[1:] if not word.startswith("-")}


def _check(folder: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pylint", *_options(), *extra, str(folder)],
                          capture_output=True, text=True, timeout=300)


IMPORTS = "import math\nimport os\nimport re\nimport shlex\nimport string\nimport textwrap\n"
SIGNATURE = "(\n    q,\n    k,\n    v,\n    *,\n    scale=None,\n    causal=False,\n    mask=None,\n):\n"
BODY = ["rows = q.shape[0]", "total = 0.0", "for start in range(0, rows, 4):", "    chunk = q[start:start + 4]",
        "    total += float(chunk.max())", "total /= rows"]


def _module(name: str, body: list[str]) -> str:
    """A module with the shared imports, an implementation with CONTRACT 1's signature and `body` between lines
    of its own (pylint counts what precedes a function's first statement as its signature)."""
    lines = "".join(f"    {line}\n" for line in [f"name = {name!r}", *body])
    return (f'"""Planted module {name}."""\n\n{IMPORTS}\n\ndef attention_{name}{SIGNATURE}{lines}'
            f"    return total + {len(name)}  # {name} alone\n")


def _plant(folder: Path, shared: list[str]) -> Path:
    """Two modules (in a folder without __init__.py) sharing imports, signature and the body lines `shared`."""
    folder.mkdir()
    (folder / "first.py").write_text(_module("first", shared + ["first_only = 1"]))
    (folder / "second.py").write_text(_module("second", shared + ["second_only = 2"]))
    return folder


def test_the_check_covers_every_package_outside_tests():
    packages = {path.parent.name for path in ROOT.glob("*/__init__.py")} - {"tests"}
    expected = packages | {path.name for path in ROOT.glob("*.py")}
    assert _paths() == expected, (
        f"the lint env's duplicate-code check misses {sorted(expected - _paths())} "
        f"or names what is not a top-level package or module: {sorted(_paths() - expected)}")


@pytest.mark.parametrize("copied", [BODY, [f"# {line}" for line in BODY]], ids=["code", "comments"])
def test_a_six_line_block_copied_between_modules_is_reported(tmp_path, copied):
    result = _check(_plant(tmp_path / "copied", copied))
    assert result.returncode != 0, result.stdout
    assert "R0801" in result.stdout and "first" in result.stdout and "second" in result.stdout, result.stdout


def test_shared_imports_signature_and_five_lines_pass(tmp_path):
    folder = _plant(tmp_path / "planted_pair", BODY[:5])  # a name no importable package has
    result = _check(folder)
    assert result.returncode == 0, result.stdout
    # the same modules with imports and signatures compared: what passed was there to find
    compared = _check(folder, "--ignore-imports=no", "--ignore-signatures=no")
    assert compared.returncode != 0 and "R0801" in compared.stdout, compared.stdout
