"""The first run's calls answer the second run's (harness.engine.call_replay): by content, in call order, the
inputs left as the call left them, raised errors raised again; what the first run did not call is called."""

from __future__ import annotations

import numpy as np
import pytest

from harness.engine.call_replay import kept_call, recording, replaying


class Counting:
    """An implementation that answers each call with how many calls it has had (so a replayed answer shows)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, q: np.ndarray) -> np.ndarray:
        self.calls += 1
        return q + self.calls


def test_outside_a_log_every_call_runs():
    impl, q = Counting(), np.zeros(3)
    assert kept_call(lambda: impl(q), "impl", q)[0] == 1
    assert kept_call(lambda: impl(q), "impl", q)[0] == 2


def test_the_second_run_gets_the_first_runs_answers_in_order_without_calling():
    impl, q = Counting(), np.zeros(3)
    with recording() as log:
        first = [kept_call(lambda: impl(q), "impl", q)[0] for _ in range(2)]
    for _ in range(2):  # every second run starts from the first call again
        with replaying(log):
            again = [kept_call(lambda: impl(q), "impl", q)[0] for _ in range(2)]
        assert again == first == [1, 2]
    assert impl.calls == 2
    with replaying(log):  # a third call on the same inputs was never made: it runs
        [kept_call(lambda: impl(q), "impl", q) for _ in range(3)]
    assert impl.calls == 3


def test_other_content_is_called():
    impl, q = Counting(), np.zeros(3)
    with recording() as log:
        kept_call(lambda: impl(q), "impl", q, {"causal": False})
    with replaying(log):
        kept_call(lambda: impl(q), "impl", q, {"causal": True})
        kept_call(lambda: impl(q + 1), "impl", q + 1, {"causal": False})
        kept_call(lambda: impl(q), "another impl", q, {"causal": False})
    assert impl.calls == 4


def test_a_keyword_without_content_is_never_kept():
    impl, q = Counting(), np.zeros(3)
    closure = lambda x: x  # noqa: E731 - a keyword whose repr does not say what it computes
    with recording() as log:
        kept_call(lambda: impl(q), "impl", q, {"score_mod": closure})
    with replaying(log):
        kept_call(lambda: impl(q), "impl", q, {"score_mod": closure})
    assert impl.calls == 2


def test_a_raised_error_is_raised_again():
    def fails():
        raise ValueError("head_dim 7 unsupported")

    q = np.zeros(3)
    with recording() as log, pytest.raises(ValueError):
        kept_call(fails, "impl", q)
    with replaying(log), pytest.raises(ValueError, match="head_dim 7 unsupported"):
        kept_call(lambda: pytest.fail("called again"), "impl", q)


def test_inputs_are_left_as_the_call_left_them_and_answers_are_copies():
    def scribbles(q: np.ndarray) -> np.ndarray:
        q[0] = 42.0
        return np.ones(2)

    q = np.zeros(3)
    with recording() as log:
        kept_call(lambda: scribbles(q), "impl", q)
    q_again = np.zeros(3)
    with replaying(log):
        out = kept_call(lambda: pytest.fail("called again"), "impl", q_again)
        out[0] = -1.0  # the caller writing to its answer cannot reach the log
        assert kept_call(lambda: np.full(2, 7.0), "impl", np.zeros(3))[0] == 7.0  # the log's one answer is used
    assert q_again[0] == 42.0
    with replaying(log):
        assert kept_call(lambda: pytest.fail("called again"), "impl", np.zeros(3))[0] == 1.0


def test_an_answer_that_cannot_be_copied_is_not_kept():
    torch = pytest.importorskip("torch")
    weight = torch.ones(3, requires_grad=True)
    calls = []

    def in_a_graph():
        calls.append(1)
        return weight * 2  # not a leaf: deepcopy refuses it

    q = np.zeros(3)
    with recording() as log:
        kept_call(in_a_graph, "impl", q)
    with replaying(log):
        assert kept_call(in_a_graph, "impl", q).tolist() == [2.0, 2.0, 2.0]
    assert len(calls) == 2
