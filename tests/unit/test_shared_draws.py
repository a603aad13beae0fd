"""One example's draws shared by a group's records (harness.engine.shared_draws), and the group key they rest on:
what the strategies read of an implementation's capabilities (specs.strategies.ShapeCapabilities)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.engine.shared_draws import Diverged, DrawTape, same_strategy
from harness.pytest_plugin.record_groups import group_key
from protocol.registry import Capabilities, Impl, Variant
from specs.strategies import ShapeCapabilities, _problems, problems


class CountingData:
    """A stand-in for Hypothesis' data: the n-th draw of any strategy is n (so a shared draw shows)."""

    def __init__(self) -> None:
        self.draws = 0

    def draw(self, strategy, label=None):
        self.draws += 1
        return [self.draws]


def test_records_asking_for_the_same_strategies_get_the_leaders_values_as_copies():
    tape = DrawTape(CountingData())
    leader, other = tape.leader(), tape.view()
    drawn = [leader.draw(st.integers(0, 5)), leader.draw(st.booleans())]
    again = [other.draw(st.integers(0, 5)), other.draw(st.booleans())]
    assert again == drawn == [[1], [2]] and again[0] is not drawn[0]  # a record may change its value freely
    assert tape.data.draws == 2  # drawn once


def test_a_record_asking_for_another_strategy_diverges_without_drawing():
    tape = DrawTape(CountingData())
    tape.leader().draw(st.integers(0, 5))
    with pytest.raises(Diverged, match="draw 1"):
        tape.view().draw(st.integers(0, 6))  # alone, it would draw from another range
    assert tape.data.draws == 1


def test_a_record_asking_for_more_draws_than_the_leader_made_diverges_without_drawing():
    """The leader stopped after one draw (it rejected or failed): what would come next is not the example's."""
    tape = DrawTape(CountingData())
    tape.leader().draw(st.booleans())
    other = tape.view()
    assert other.draw(st.booleans()) == [1]
    with pytest.raises(Diverged, match="draw 2"):
        other.draw(st.booleans())
    assert tape.data.draws == 1


def test_a_leader_drawing_again_extends_the_tape_for_the_others():
    tape = DrawTape(CountingData())
    leader = tape.leader()
    leader.draw(st.booleans())
    leader.draw(st.booleans())  # its second run (a declared failure explained) draws past its first run's draws
    other = tape.view()
    assert [other.draw(st.booleans()), other.draw(st.booleans())] == [[1], [2]]


def _builds_of(offset: int):
    return st.builds(lambda x: x + offset, st.integers(0, 3))


@pytest.mark.parametrize("first, second, same", [
    (st.integers(0, 5), st.integers(0, 5), True),
    (st.integers(0, 5), st.integers(0, 6), False),
    (st.lists(st.sampled_from([1, 2]), min_size=1), st.lists(st.sampled_from([1, 2]), min_size=1), True),
    (st.sampled_from(["a", "b"]), st.sampled_from(["a", "b"]), True),
    # a description that names a function cannot tell two closures apart: only the same object is shared
    (_builds_of(0), _builds_of(1), False),
    (st.integers(0, 3).map(lambda x: x + 1), st.integers(0, 3).map(lambda x: x + 2), False),
    # an elided description cannot tell long lists apart
    (st.sampled_from(list(range(1000))), st.sampled_from([*range(999), -1]), False),
])
def test_strategies_are_the_same_when_their_description_says_all(first, second, same):
    assert same_strategy(first, second) is same


def _variant(dtype: str = "float32", **capabilities) -> Variant:
    impl = Impl("some-record", "module:fn", lambda q, k, v: q, Capabilities(dtypes=(dtype,), **capabilities), (),
                "numpy")
    return Variant(impl, dtype)


def test_records_the_strategies_cannot_tell_apart_share_a_key():
    assert group_key(_variant(lse=True, native=True, bias=True)) == group_key(_variant())
    assert group_key(_variant(causal=True, mask=True)) == group_key(_variant())  # a property asks for causal
    for different in (_variant("float64"), _variant(gqa=False), _variant(max_seq=64), _variant(scale=True),
                      _variant(causal_alignment="bottom_right"), _variant(compiles_per_shape=True)):
        assert group_key(different) != group_key(_variant())


def test_the_strategies_see_no_capability_outside_the_key():
    """A strategy reading a capability the key leaves out would fail: it is not there."""
    seen = ShapeCapabilities.of(Capabilities(lse=True))
    with pytest.raises(AttributeError):
        seen.lse  # noqa: B018
    assert problems(caps=Capabilities(lse=True)) is problems(caps=Capabilities(native=True))


class ReadRecording(ShapeCapabilities):
    """ShapeCapabilities that remembers which fields were read."""

    def __getattribute__(self, name: str):
        if name in ShapeCapabilities.__dataclass_fields__:
            object.__getattribute__(self, "read").add(name)
        return object.__getattribute__(self, name)


def test_the_strategies_read_every_field_of_the_key():
    """The key is no wider than what the strategies read: every field splits groups only where a draw depends on
    it (scale where a scale is drawn, causal_alignment where a causal problem is)."""
    caps = ReadRecording(scale=True, max_seq=64)
    object.__setattr__(caps, "read", set())

    @settings(max_examples=5, database=None, derandomize=True)
    @given(st.data())
    def draw(data):
        for causal in (False, True):  # the strategies as problems() builds them, given the recording fields
            data.draw(_problems.__wrapped__(caps=caps, causal=causal))

    draw()
    assert caps.read == {field.name for field in dataclasses.fields(ShapeCapabilities)}
