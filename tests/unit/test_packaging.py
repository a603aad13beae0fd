"""The wheel's file list (pyproject.toml) covers every module and data file of the packages it ships."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch

from tests.fixtures.runs import ROOT

SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
SHIPPED = [pattern.rstrip("*") for pattern in SETUPTOOLS["packages"]["find"]["include"]]


def _files():
    for top in SHIPPED:
        yield from (path for path in (ROOT / top).rglob("*")
                    if path.is_file() and "__pycache__" not in path.parts)


def test_every_module_is_in_a_package():
    outside = [str(path.relative_to(ROOT)) for path in _files()
               if path.suffix == ".py" and not (path.parent / "__init__.py").exists()]
    assert not outside, f"modules in folders without __init__.py are left out of the wheel: {outside}"


def test_every_data_file_is_package_data():
    patterns = SETUPTOOLS["package-data"]["*"]
    left_out = []
    for path in _files():
        if path.suffix == ".py":
            continue
        package = next(parent for parent in path.parents if (parent / "__init__.py").exists())
        if not any(fnmatch(path.relative_to(package).as_posix(), pattern) for pattern in patterns):
            left_out.append(str(path.relative_to(ROOT)))
    assert not left_out, f"files the wheel leaves out (add them to [tool.setuptools.package-data]): {left_out}"
