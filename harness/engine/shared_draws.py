"""One example's draws shared by the records of a group (harness.pytest_plugin.record_groups).

Hypothesis draws an example once; each record of the group then runs the property on it through its own view of
the example's `data`. A record's k-th draw gets the value the first record to draw k-th drew (a copy), when it asks
for the same strategy: the same object, or a strategy of Hypothesis' own whose description (repr) names only its
builtin strategies and literal values, so that equal descriptions draw from equal distributions. Any other draw,
and every draw after a record's first unmatched one, is the record's own, from the same example's data: a value
that record's strategy can produce, so every record is judged on a valid example of its own property.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

# the names a plain description may contain: Hypothesis' builtin strategies and their keyword arguments
_PLAIN_NAMES = frozenset({
    "integers", "floats", "booleans", "sampled_from", "lists", "sets", "frozensets", "tuples", "one_of", "none",
    "just", "min_value", "max_value", "min_size", "max_size", "unique", "allow_nan", "allow_infinity",
    "allow_subnormal", "exclude_min", "exclude_max", "width", "True", "False", "None", "inf", "nan", "e"})
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def _plain(description: str) -> bool:
    """Whether a strategy's repr describes it completely: builtin strategies of literal values, nothing elided."""
    if "..." in description:
        return False
    return set(_NAME.findall(_STRING.sub("''", description))) <= _PLAIN_NAMES


def is_data(value: object) -> bool:
    """Whether a test's argument is Hypothesis' interactive `data` object, or a record's SharedData view of it."""
    return isinstance(value, SharedData) or (type(value).__name__ == "DataObject" and hasattr(value, "draw"))


def same_strategy(first: object, second: object) -> bool:
    """Whether a value drawn from `first` is a draw of `second` (module docstring)."""
    if first is second:
        return True
    if type(first) is not type(second):
        return False
    description = repr(first)
    return description == repr(second) and _plain(description)


@dataclass
class _Draw:
    strategy: object
    value: object


@dataclass
class DrawTape:
    """The draws of one example, in order, as the records of the group made them."""

    data: object  # Hypothesis' data object of the example
    draws: list[_Draw] = field(default_factory=list)

    def view(self) -> SharedData:
        """A record's own reading of the example's data."""
        return SharedData(self)


class SharedData:
    """A record's `data`: the tape's draws where its strategies match, its own draws otherwise."""

    def __init__(self, tape: DrawTape) -> None:
        self._tape = tape
        self._position = 0
        self._diverged = False

    def draw(self, strategy, label=None):
        tape, position = self._tape, self._position
        self._position += 1
        if not self._diverged and position < len(tape.draws):
            if same_strategy(tape.draws[position].strategy, strategy):
                return copy.deepcopy(tape.draws[position].value)
            self._diverged = True
        value = tape.data.draw(strategy, label=label)
        if not self._diverged and position == len(tape.draws):
            tape.draws.append(_Draw(strategy, copy.deepcopy(value)))
        return value
