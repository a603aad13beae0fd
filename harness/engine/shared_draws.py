"""One example's draws shared by the records of a group (harness.pytest_plugin.record_groups).

Hypothesis draws an example once, through the group's first record (the leader), whose draws are recorded on a
tape. Each other record runs the property on the same example through its own view of the tape: its k-th draw gets
a copy of the leader's k-th value when it asks for the same strategy (the same object, or a strategy of
Hypothesis' own whose description (repr) names only its builtin strategies and literal values, so that equal
descriptions draw from equal distributions). A record that asks for another strategy, or for more draws than the
leader made, would draw differently alone: it diverges (Diverged) and draws nothing, so what the example draws
stays the leader's alone, and the record is judged on its own run instead.
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


class Diverged(BaseException):
    """A record asked for a draw the leader did not make: alone, it would be judged on other examples. (A
    BaseException: a property's `except Exception` around its draws cannot swallow it.)"""


def _plain(description: str) -> bool:
    """Whether a strategy's repr describes it completely: builtin strategies of literal values, nothing elided."""
    if "..." in description:
        return False
    return set(_NAME.findall(_STRING.sub("''", description))) <= _PLAIN_NAMES


def is_data(value: object) -> bool:
    """Whether a test's argument is Hypothesis' interactive `data` object, or a record's view of a tape."""
    return isinstance(value, (LeaderData, SharedData)) or (type(value).__name__ == "DataObject"
                                                           and hasattr(value, "draw"))


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
    """The leader's draws of one example, in order."""

    data: object  # Hypothesis' data object of the example
    draws: list[_Draw] = field(default_factory=list)

    def leader(self) -> LeaderData:
        """The leader's `data`: Hypothesis' own, each draw recorded."""
        return LeaderData(self)

    def view(self) -> SharedData:
        """Another record's `data`: the leader's draws, in order."""
        return SharedData(self)


class LeaderData:
    """The leader's `data`: draws from the example, each recorded (a copy) on the tape."""

    def __init__(self, tape: DrawTape) -> None:
        self._tape = tape

    def draw(self, strategy, label=None):
        value = self._tape.data.draw(strategy, label=label)
        self._tape.draws.append(_Draw(strategy, copy.deepcopy(value)))
        return value


class SharedData:
    """A record's `data`: a copy of the leader's k-th draw for its k-th, where it asks for the same strategy."""

    def __init__(self, tape: DrawTape) -> None:
        self._tape = tape
        self._position = 0

    def draw(self, strategy, label=None):
        position, draws = self._position, self._tape.draws
        self._position += 1
        if position >= len(draws) or not same_strategy(draws[position].strategy, strategy):
            raise Diverged(f"draw {position + 1} ({label or strategy!r}) is not the leader's")
        return copy.deepcopy(draws[position].value)
