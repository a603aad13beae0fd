"""Content-addressed memory for the specification's pure functions of arrays (the float64 oracle and the naive
same-precision baselines of the tolerance model): many implementations and properties ask for the same problem's
oracle, and a run computes it once.

A key is made of the values, never of object identities: an array by its dtype, shape and a digest of its bytes
(so a caller that later writes to its own array cannot reach what was stored), a scalar or string by its repr, a
module-level function by its qualified name and an object that computes something by its own `content_key()`.
Every hit returns a copy of what was stored that shares no array with it (fresh_copy), so a caller that writes to
a returned array cannot poison the memory either; an exception of the kinds named as results (a baseline that
overflows) is remembered and raised again. The memory is bounded by the bytes of the arrays it holds: the least
recently used entries go first.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

# pytest runs a property over every implementation in turn: the entries that hit are the recent ones
DEFAULT_BUDGET_BYTES = 256 * 2**20


_PLAIN = (type(None), bool, int, float, complex, str, np.generic)


class NotContent(TypeError):
    """A value a key cannot be made of (its repr may not say all it holds, as a long array's does not)."""


def content_key(value: Any) -> Hashable:
    """A hashable key made of `value`'s content: arrays by dtype, shape and the digest of their bytes; tuples, lists
    and dicts element by element; None, numbers and strings by type and repr. Anything else is NotContent."""
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return ("array", data.dtype.str, data.shape, hashlib.blake2b(data.view(np.uint8), digest_size=16).digest())
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(content_key(item) for item in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(key), content_key(item)) for key, item in value.items())))
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, _PLAIN):
        return (type(value).__name__, repr(value))
    if callable(getattr(value, "content_key", None)):  # an object that names what it computes (a deviant model)
        return ("named", type(value).__name__, value.content_key())
    if callable(value) and "<" not in getattr(value, "__qualname__", "<"):  # a module's function, by its name
        return ("function", value.__module__, value.__qualname__)
    raise NotContent(f"no content key for a {type(value).__name__}")


def stored_bytes(value: Any) -> int:
    """The bytes of the arrays in `value` (a dataclass, tuple, dict or array), what an entry costs the memory."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, dict):
        return sum(stored_bytes(item) for item in value.values())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(stored_bytes(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, (tuple, list)):
        return sum(stored_bytes(item) for item in value)
    return 0


def fresh_copy(value: Any) -> Any:
    """A copy of `value` that shares no array with it: arrays copied, dataclasses, dicts, tuples and lists rebuilt
    around copies of their fields (a deep copy at a fraction of copy.deepcopy's cost, which walks every object
    generically); anything else deep-copied."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, dict):
        return {key: fresh_copy(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        clone = copy.copy(value)
        for field in dataclasses.fields(value):
            object.__setattr__(clone, field.name, fresh_copy(getattr(value, field.name)))
        return clone
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(fresh_copy(item) for item in value))
    if isinstance(value, (tuple, list)):
        return type(value)(fresh_copy(item) for item in value)
    return copy.deepcopy(value)


@dataclasses.dataclass
class _Raised:
    error: Exception


class Memo:
    """A bounded, content-addressed memory of one pure function's results."""

    def __init__(self, function: Callable[..., Any], *, budget_bytes: int = DEFAULT_BUDGET_BYTES,
                 raised: tuple[type[Exception], ...] = ()) -> None:
        if budget_bytes < 0:
            raise ValueError(f"a memory budget is a number of bytes >= 0, got {budget_bytes}")
        self.function = function
        self.raised = raised  # exceptions that are the function's answer for an input, remembered like results
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._held = 0
        self.hits = 0
        self.misses = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            key = content_key((args, kwargs))
        except NotContent:  # an argument the memory cannot key: computed, not remembered
            self.misses += 1
            return self.function(*args, **kwargs)
        if key in self._entries:
            self._entries.move_to_end(key)
            self.hits += 1
            stored = self._entries[key][0]
        else:
            self.misses += 1
            try:
                stored = self.function(*args, **kwargs)
            except self.raised as error:  # the same input raises it again
                stored = _Raised(error)
            self._remember(key, stored)
        if isinstance(stored, _Raised):
            raise copy.copy(stored.error)
        return fresh_copy(stored)

    def _remember(self, key: Hashable, stored: Any) -> None:
        size = stored_bytes(stored)
        if size > self.budget_bytes:
            return  # larger than the whole memory: computed every time
        self._entries[key] = (stored, size)
        self._held += size
        while self._held > self.budget_bytes:
            _, (_, freed) = self._entries.popitem(last=False)
            self._held -= freed

    @property
    def held_bytes(self) -> int:
        return self._held

    def clear(self) -> None:
        self._entries.clear()
        self._held = 0
