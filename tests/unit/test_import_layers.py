"""The import graph's contracts (pyproject's [tool.importlinter], run by the lint env's `lint-imports`) hold for
the tree as it is, and each kind of breakage fails them: an upward import between the layers, the harness
importing an implementation, a property importing harness.engine, and a circle inside the CUDA runtime. Run on a
copy of the packages' sources."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.fixtures.runs import ROOT

pytest.importorskip("importlinter", reason="import-linter is not installed (the lint and tests envs install it)")

CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    for package in CONFIG["root_packages"]:
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__", "*.cu", "*.h",
                                                                                       "*.cpp", "*.toml", "*.json"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def _lint(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                           "lint_imports_command()"], cwd=tree, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})


def _plant(tree: Path, module: str, line: str) -> None:
    path = tree / module
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_tree_keeps_every_contract(tmp_path):
    done = _lint(_copy(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("specs/catalogue.py", "import protocol.registry  # noqa", "specs < protocol < impls"),
    ("protocol/registry.py", "import impls.records  # noqa", "specs < protocol < impls"),
    ("harness/engine/verdicts.py", "import impls.numpy.numpy_reference  # noqa", "never imports an implementation"),
    ("harness/engine/guarded_call.py", "import harness.reporting.report  # noqa", "the harness's jobs"),
    ("properties/test_formula.py", "import harness.engine.verdicts  # noqa", "its public API"),
    ("impls/cuda/runtime/launch.py", "import impls.cuda.runtime.on_cpu  # noqa", "the CUDA runtime"),
], ids=["specs-imports-protocol", "protocol-imports-impls", "harness-imports-an-impl", "engine-imports-reporting",
        "property-imports-the-engine", "runtime-circle"])
def test_each_kind_of_breakage_fails_its_contract(tmp_path, module, line, contract):
    tree = _copy(tmp_path)
    _plant(tree, module, line)
    done = _lint(tree)
    assert done.returncode != 0, done.stdout[-3000:]
    broken = done.stdout[done.stdout.index("Broken contracts"):]
    assert contract in broken, broken[:2000]
