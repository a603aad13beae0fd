"""The design page is the one the code cites: every "docs/design.md, SECTION" or "docs/design.md § SECTION" in the
project names a heading of docs/design.md, and no file cites a design file the project does not have."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
CITING = ("specs", "protocol", "impls", "harness", "properties", "interpretations", "zoo", "tools", "tests", "docs",
          "benchmarks")
CITATION = re.compile(r"docs/design\.md(?:,| §) ([A-Za-z0-9 ]+?)(?=[).;:,\"]|$)", re.MULTILINE)


def _sources() -> list[Path]:
    return [path for folder in CITING for path in sorted((ROOT / folder).rglob("*"))
            if path.suffix in (".py", ".toml", ".md") and path != Path(__file__).resolve()]


def _headings() -> set[str]:
    """Each heading, and its name before a colon ("CONTRACT 1" of "CONTRACT 1: the implementation protocol")."""
    headings = {line.lstrip("#").strip() for line in DESIGN.read_text(encoding="utf-8").splitlines()
                if line.startswith("#")}
    return headings | {heading.partition(":")[0] for heading in headings}


def test_every_citation_names_a_section_of_the_design_page():
    cited = {(path.relative_to(ROOT).as_posix(), section) for path in _sources()
             for section in CITATION.findall(path.read_text(encoding="utf-8"))}
    assert len(cited) >= 10
    missing = sorted((where, section) for where, section in cited if section not in _headings())
    assert missing == [], missing


def test_no_file_cites_a_design_file_the_project_lacks():
    upper = "DESIGN" + ".md"  # the workplace's file, not the project's
    assert [p.relative_to(ROOT).as_posix() for p in _sources() if upper in p.read_text(encoding="utf-8")] == []
