"""Values written as Python and read back without running anything: the arguments of a problem's steps.

`literal_code` writes a value as the Python expression a repro snippet prints; `literal_value` reads such an
expression's syntax tree back into the same value, bit for bit, and refuses anything else (a call of another
function, a name, an operator other than a sign). Together they let a problem's code be both what a user pastes and
what specs.problem_code rebuilds, with no exec or eval. Written and read: None, bools, ints, floats (NaN and the
infinities as float('nan'), float('inf')), strings, tuples, lists and string-keyed dicts of these, NumPy scalars
(np.float32(-0.25)) and NumPy arrays (np.array([...], dtype=np.float16), 0-d included), and the parts of an index
(`...` and slice(start, stop, step) of these).
"""

from __future__ import annotations

import ast
import math

import numpy as np

_NUMPY_SCALARS = {"float64", "float32", "float16", "int64", "int32", "int8", "uint8", "bool_"}


class NotALiteral(ValueError):
    """A value or an expression outside what literal_code writes and literal_value reads."""


def literal_code(value: object) -> str:
    """`value` as the Python expression literal_value reads back to it (NumPy as np)."""
    if value is Ellipsis:
        return "..."
    if value is None or isinstance(value, (bool, str)):
        return repr(value)
    if isinstance(value, slice) and all(_index_part(part) for part in (value.start, value.stop, value.step)):
        return f"slice({', '.join(literal_code(part) for part in (value.start, value.stop, value.step))})"
    if isinstance(value, int):
        return repr(int(value))
    if isinstance(value, float):
        return _float_code(value)
    if isinstance(value, tuple):
        items = ", ".join(literal_code(item) for item in value)
        return f"({items},)" if len(value) == 1 else f"({items})"
    if isinstance(value, list):
        return f"[{', '.join(literal_code(item) for item in value)}]"
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return f"{{{', '.join(f'{key!r}: {literal_code(item)}' for key, item in value.items())}}}"
    if isinstance(value, np.ndarray):
        dtype = value.dtype.name if value.dtype != bool else "bool_"
        if dtype not in _NUMPY_SCALARS:
            raise NotALiteral(f"a NumPy array of dtype {value.dtype} is not written as a literal")
        items = literal_code(value.tolist())
        return f"np.array({items})" if dtype == "float64" else f"np.array({items}, dtype=np.{dtype})"
    if isinstance(value, np.generic):
        dtype = value.dtype.name if value.dtype != bool else "bool_"
        if dtype not in _NUMPY_SCALARS:
            raise NotALiteral(f"a NumPy scalar of dtype {value.dtype} is not written as a literal")
        return f"np.{dtype}({literal_code(value.item())})"
    raise NotALiteral(f"{type(value).__name__} {value!r} is not written as a literal: pass numbers, strings, "
                      "tuples, lists, dicts with string keys, None, NumPy scalars or arrays, ... or slices")


def _index_part(part: object) -> bool:
    """Whether `part` may start, stop or step a slice literal: None or a plain int."""
    return part is None or (isinstance(part, int) and not isinstance(part, bool))


def _float_code(value: float) -> str:
    if math.isnan(value):
        return "float('nan')"
    if math.isinf(value):
        return "float('inf')" if value > 0 else "-float('inf')"
    return repr(value)


def literal_value(node: ast.expr) -> object:
    """The value of an expression literal_code writes (its syntax tree), computed without running it."""
    if isinstance(node, ast.Constant) and (node.value is None or node.value is Ellipsis
                                           or isinstance(node.value, (bool, int, float, str))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = literal_value(node.operand)
        if isinstance(inner, (int, float, np.generic)) and not isinstance(inner, bool):
            return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.Tuple):
        return tuple(literal_value(item) for item in node.elts)
    if isinstance(node, ast.List):
        return [literal_value(item) for item in node.elts]
    if isinstance(node, ast.Dict) and all(isinstance(key, ast.Constant) and isinstance(key.value, str)
                                          for key in node.keys):
        return {key.value: literal_value(item) for key, item in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.Call):
        return _call_value(node)
    raise NotALiteral(f"{ast.unparse(node)!r} is not a literal (numbers, strings, tuples, lists, None, "
                      "float('nan'), np.float32(...), np.array(...), ..., slice(...))")


def _call_value(node: ast.Call) -> object:
    name = ast.unparse(node.func)
    if name == "float" and len(node.args) == 1 and not node.keywords:
        text = literal_value(node.args[0])
        if isinstance(text, str) and text in ("nan", "inf"):
            return float(text)
    if name.startswith("np.") and name[3:] in _NUMPY_SCALARS and len(node.args) == 1 and not node.keywords:
        return getattr(np, name[3:])(literal_value(node.args[0]))
    if name == "slice" and len(node.args) == 3 and not node.keywords:
        parts = [literal_value(arg) for arg in node.args]
        if all(_index_part(part) for part in parts):
            return slice(*parts)
    if name == "np.array" and len(node.args) == 1:
        dtype = {keyword.arg: ast.unparse(keyword.value) for keyword in node.keywords}
        if set(dtype) <= {"dtype"} and (not dtype or dtype["dtype"][3:] in _NUMPY_SCALARS):
            return np.array(literal_value(node.args[0]), dtype=getattr(np, dtype["dtype"][3:]) if dtype else None)
    raise NotALiteral(f"{ast.unparse(node)!r} is not a literal call (float('nan'), np.float32(x), np.array(...), "
                      "slice(start, stop, step) of ints or None)")
