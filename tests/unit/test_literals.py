"""specs.literals: every value a step may take is written as Python and read back bit for bit, with nothing run;
what is not a literal is refused by name."""

from __future__ import annotations

import ast

import numpy as np
import pytest

from specs.literals import NotALiteral, literal_code, literal_value

VALUES = [
    None, True, False, 0, -3, 2**70, 0.1, -0.0, 5e-324, 1e308, float("nan"), float("inf"), -float("inf"), "it's",
    (), (1,), (1.5, 2), [0, [1, 2]], (None, None, [0, 2], 1), {}, {"dropout_p": 0.25, "block": (16, 32)},
    np.float64(0.5), np.float32(-0.25), np.float16(0.0), np.float16(6e-8), np.int64(3), np.bool_(True),
    np.array(0.5), np.array(-1.0, dtype=np.float32), np.array(2), np.array([[True, False]]),
    np.array([np.nan, -np.inf, 1e-310]), np.array([1, 2], dtype=np.int32),
    ..., slice(None), slice(1, None, -2), (..., slice(None), [0, 2]),
]


def _read(code: str) -> object:
    return literal_value(ast.parse(code, mode="eval").body)


def _same(a: object, b: object) -> bool:
    if isinstance(a, (np.ndarray, np.generic)):
        return (type(a) is type(b) and a.dtype == b.dtype and np.shape(a) == np.shape(b)
                and np.asarray(a).tobytes() == np.asarray(b).tobytes())
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, float):
        return isinstance(b, float) and np.float64(a).tobytes() == np.float64(b).tobytes()
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_literal_is_read_back_bit_for_bit(value):
    assert _same(_read(literal_code(value)), value), literal_code(value)


@pytest.mark.parametrize("value", [object(), {1: "a"}, {1}, np.array(["a"]), np.complex64(1j), slice(0.5),
                                   slice(1, "a")],
                         ids=lambda value: type(value).__name__)
def test_what_is_not_a_literal_is_refused_when_written(value):
    with pytest.raises(NotALiteral):
        literal_code(value)


@pytest.mark.parametrize("code", ["x", "p.q", "1 + 2", "np.ones(3)", "__import__('os')", "float('1e3')",
                                  "np.array([1], dtype=np.complex64)", "np.array([1], order='F')", "-'a'",
                                  "{1: 'a'}", "{'a': x}", "lambda: 0", "print(1)", "slice(1)",
                                  "slice(1.5, None, None)", "slice(x, None, None)", "Ellipsis"])
def test_anything_else_is_refused_when_read(code):
    with pytest.raises(NotALiteral):
        _read(code)
