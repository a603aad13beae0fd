"""specs.tolerance is a package of four modules whose public names all stay importable from the package, and
whose modules import downwards only (model <- algebra, gradient_bounds, reading_bounds)."""

from __future__ import annotations

import ast
import importlib
import inspect
import types
from pathlib import Path

import specs.tolerance

MODULES = ("model", "algebra", "gradient_bounds", "reading_bounds")
PACKAGE = Path(specs.tolerance.__file__).parent


def public_names(module: types.ModuleType) -> set[str]:
    """The names a module defines (classes and functions defined elsewhere left out), without a leading
    underscore; constants carry no module, so an imported one counts (and must be the package's same object)."""
    return {name for name, value in vars(module).items()
            if not name.startswith("_") and not inspect.ismodule(value)
            and (getattr(value, "__module__", module.__name__) == module.__name__
                 or isinstance(value, types.GenericAlias))}  # a type alias reports its origin's module


def missing_exports(package: types.ModuleType, modules: list[types.ModuleType]) -> list[str]:
    """Public names of `modules` that `package` does not re-export (or that its __all__ leaves out)."""
    exported = set(getattr(package, "__all__", ()))
    return sorted(f"{module.__name__}.{name}" for module in modules for name in public_names(module)
                  if name not in exported or getattr(package, name, None) is not getattr(module, name))


def sibling_imports(source: str) -> set[str]:
    """The specs.tolerance modules a module's source imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specs.tolerance."):
            found.add(node.module.rsplit(".", 1)[1])
    return found


def test_every_public_name_is_re_exported():
    modules = [importlib.import_module(f"specs.tolerance.{name}") for name in MODULES]
    assert missing_exports(specs.tolerance, modules) == []
    assert set(specs.tolerance.__all__) == set().union(*(public_names(m) for m in modules))


def test_a_forgotten_re_export_is_found():
    module = types.ModuleType("specs.tolerance.extra")

    def new_allowance():
        pass

    new_allowance.__module__ = module.__name__  # defined there, as its own source would define it
    module.new_allowance, module.LIMIT, module.Pair = new_allowance, 3.0, tuple[str, float]
    assert public_names(module) == {"new_allowance", "LIMIT", "Pair"}
    assert missing_exports(specs.tolerance, [module]) == ["specs.tolerance.extra.LIMIT", "specs.tolerance.extra.Pair",
                                                          "specs.tolerance.extra.new_allowance"]


def test_the_modules_import_downwards_only():
    allowed = {"model": set(), "algebra": {"model"}, "gradient_bounds": {"model"}, "reading_bounds": {"model"}}
    for name in MODULES:
        assert sibling_imports((PACKAGE / f"{name}.py").read_text()) <= allowed[name], name
    assert sibling_imports("from specs.tolerance.reading_bounds import entropy_allowance") == {"reading_bounds"}
