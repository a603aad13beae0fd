"""protocol.rank_pool through the sharded adapter: a rank that raises is a 'raised' verdict naming the rank, a rank
waiting in a collective its peer never joins is a timeout within the group's timeout, a rank that dies is a crash;
after each the pool is started afresh and the next call is right. Shards come back in place for both layouts. A
script that calls a sharded implementation needs no `if __name__ == "__main__"` guard (a reproduction snippet has
none): the ranks do not run it again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.engine.guarded_call import CallFailed, call_in_process
from protocol.rank_pool import GROUP_TIMEOUT_S, INTERPRETED_GROUP_TIMEOUT_S, POOL, group_timeout_s
from protocol.registry import load_impl

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = "tests/fixtures/sharded_impls.py"
Q = np.arange(2 * 3 * 7 * 2, dtype=np.float64).reshape(2, 3, 7, 2)


def _call(name: str, world: int = 2):
    impl = load_impl(f"{FIXTURES}:{name}")
    return call_in_process(impl.fn, (Q, Q, Q), {"world_size": world}, "torch", timeout_s=60)


@pytest.fixture(autouse=True)
def fresh_pool(monkeypatch):
    """Each test's pools start where Triton's interpreter is not chosen (the group timeout is GROUP_TIMEOUT_S,
    whatever an earlier test of the worker left in the environment), and are closed after it."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    yield
    POOL.close()


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_the_shards_come_back_in_place(world):
    np.testing.assert_array_equal(torch.as_tensor(_call("returns_queries", world)).numpy(), Q)


def test_a_rank_that_raises_fails_the_call_naming_it_and_the_next_call_is_right():
    with pytest.raises(CallFailed, match=r"the implementation raised ValueError: rank one refuses \(rank 1\)") as info:
        _call("rank_one_raises")
    assert info.value.kind == "raised"
    np.testing.assert_array_equal(torch.as_tensor(_call("returns_queries")).numpy(), Q)


def test_a_rank_waiting_in_a_collective_its_peer_never_joins_is_a_timeout():
    started = time.monotonic()
    with pytest.raises(CallFailed, match="waited for its peers past the group's") as info:
        _call("rank_zero_waits")
    waited = time.monotonic() - started
    assert info.value.kind == "timeout" and waited < GROUP_TIMEOUT_S + 30, f"the timeout came after {waited:.1f} s"
    np.testing.assert_array_equal(torch.as_tensor(_call("returns_queries")).numpy(), Q)


@pytest.mark.parametrize(("target", "how"), [("rank_one_dies", r"exit status 3"),
                                             ("rank_one_is_killed", r"killed by SIGKILL")])
def test_a_rank_that_dies_is_a_crash_saying_how_and_the_pool_is_rebuilt(target, how):
    with pytest.raises(CallFailed, match=rf"rank 1 died during the call \({how}\)") as info:
        _call(target)
    assert info.value.kind == "crashed"
    np.testing.assert_array_equal(torch.as_tensor(_call("returns_queries")).numpy(), Q)


def test_a_script_without_a_main_guard_calls_a_sharded_implementation(tmp_path):
    """multiprocessing would run the script again in each rank, which would start a pool of its own there."""
    script = tmp_path / "repro.py"
    script.write_text(textwrap.dedent(f"""\
        import torch
        from protocol.registry import load_impl
        q = torch.arange(12.0).reshape(1, 2, 3, 2)
        out = load_impl({FIXTURES + ':returns_queries'!r}).fn(q, q, q, world_size=2)
        print("same" if torch.equal(out, q) else "changed")
        """))
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (done.returncode, done.stdout.strip()) == (0, "same"), done.stderr[-3000:]


@pytest.mark.parametrize(("setting", "expected"), [("1", INTERPRETED_GROUP_TIMEOUT_S), ("0", GROUP_TIMEOUT_S)])
def test_a_pool_started_under_triton_s_interpreter_waits_longer_for_its_peers(monkeypatch, setting, expected):
    monkeypatch.setenv("TRITON_INTERPRET", setting)
    assert group_timeout_s() == expected
