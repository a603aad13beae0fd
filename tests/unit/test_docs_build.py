"""`mkdocs build --strict` with this project's mkdocs.yml fails on what a reader would trip over: a broken link, a
page missing from the nav, a nav entry without its page, a snippet file that is gone. Run by `tox -e docs` (which
installs MkDocs; elsewhere these skip) on a copy of docs/ with one thing broken at a time."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="MkDocs is installed by `tox -e docs` only")
pytest.importorskip("material", reason="the Material theme is installed by `tox -e docs` only")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of what the build reads: mkdocs.yml and docs/."""
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path


def _build(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tree / "site")],
                          cwd=tree, capture_output=True, text=True, timeout=300,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def test_the_docs_as_committed_build(tree):
    done = _build(tree)
    assert done.returncode == 0, done.stderr
    assert (tree / "site" / "tasks" / "understand-a-failure.html").is_file()


def test_a_link_to_a_missing_page_fails(tree):
    _append(tree / "docs" / "zoo.md", "\nSee [the gone page](gone.md).\n")
    done = _build(tree)
    assert done.returncode != 0 and "gone.md" in done.stderr


def test_a_link_to_a_missing_section_fails(tree):
    _append(tree / "docs" / "zoo.md", "\nSee [the tolerance](tolerance.md#no-such-section).\n")
    done = _build(tree)
    assert done.returncode != 0 and "no-such-section" in done.stderr


def test_a_page_left_out_of_the_nav_fails(tree):
    (tree / "docs" / "orphan.md").write_text("# Orphan\n", encoding="utf-8")
    done = _build(tree)
    assert done.returncode != 0 and "orphan.md" in done.stderr


def test_a_nav_entry_without_its_page_fails(tree):
    (tree / "docs" / "benchmarks.md").unlink()
    done = _build(tree)
    assert done.returncode != 0 and "benchmarks.md" in done.stderr


def test_a_snippet_file_that_is_gone_fails(tree):
    (tree / "docs" / "examples" / "forgot_scale.py").unlink()
    done = _build(tree)
    assert done.returncode != 0 and "forgot_scale.py" in done.stderr
