"""specs.memo_store: the oracle and the tolerance model stored on disk between runs and workers, keyed by content
and by every file of specs/; atomic, checksummed, bounded, and off on request."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from specs.memo import Memo
from specs.memo_store import MemoStore, prune, store_dir

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("ATTN_ORACLE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _counted_memo(name: str = "total"):
    calls = []

    def total(x: np.ndarray) -> dict:
        calls.append(1)
        return {"sum": np.array([x.sum()])}

    return calls, (lambda: Memo(total, store=MemoStore(name)))


def test_a_second_run_reads_what_the_first_computed(cache):
    calls, new_memo = _counted_memo()
    assert new_memo()(np.ones(3))["sum"][0] == 3.0
    again = new_memo()  # a new process's memory: empty, the store behind it full
    assert again(np.ones(3))["sum"][0] == 3.0 and len(calls) == 1 and again.stored_hits == 1
    assert again(np.ones(4))["sum"][0] == 4.0 and len(calls) == 2  # other content: computed
    assert not list(cache.rglob(".writing-*")), "a write left its temporary file"


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "empty"])
def test_a_corrupt_entry_is_computed_again_and_rewritten(cache, damage):
    calls, new_memo = _counted_memo()
    new_memo()(np.ones(3))
    (entry,) = cache.rglob("*.pickle")
    data = bytearray(entry.read_bytes())
    if damage == "flip a byte":
        data[-5] ^= 0xFF
    entry.write_bytes(bytes(data[: len(data) // 2]) if damage == "truncate" else b"" if damage == "empty" else data)
    memo = new_memo()
    assert memo(np.ones(3))["sum"][0] == 3.0 and len(calls) == 2 and memo.stored_hits == 0
    assert new_memo()(np.ones(3))["sum"][0] == 3.0 and len(calls) == 2  # rewritten whole


def test_what_the_store_gives_is_the_callers_own_copy(cache):
    _, new_memo = _counted_memo()
    new_memo()(np.ones(3))
    memo = new_memo()
    got = memo(np.ones(3))
    got["sum"][0] = -1.0
    assert memo(np.ones(3))["sum"][0] == 3.0 and new_memo()(np.ones(3))["sum"][0] == 3.0


def test_off_stores_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTN_ORACLE_CACHE", "off")
    calls, new_memo = _counted_memo()
    new_memo()(np.ones(3))
    new_memo()(np.ones(3))
    assert store_dir() is None and len(calls) == 2


def test_the_folder_is_bounded_oldest_first(cache):
    folder = cache / "some-version"
    folder.mkdir(parents=True)
    for age in range(5):
        path = folder / f"entry-{age}.pickle"
        path.write_bytes(b"x" * 100)
        os.utime(path, (1_000_000 - age, 1_000_000 - age))  # entry-4 written longest ago
    prune(cache, 250)
    assert sorted(p.name for p in folder.iterdir()) == ["entry-0.pickle", "entry-1.pickle"]


def test_editing_the_oracle_is_a_miss(tmp_path):
    """A copy of specs/ whose oracle doubles its output: the store the unedited oracle filled must not answer it."""
    shutil.copytree(ROOT / "specs", tmp_path / "specs", ignore=shutil.ignore_patterns("__pycache__"))
    script = textwrap.dedent("""
        import numpy as np
        from specs.tolerance import forward_allowance
        from specs.tolerance.model import _FORWARD_MEMO
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal((1, 1, 3, 4)) for _ in range(3))
        result, _ = forward_allowance(q, k, v, dtype="float32")
        print(float(result.out[0, 0, 0, 0]), _FORWARD_MEMO.stored_hits)
    """)

    def run() -> tuple[float, int]:
        env = {**os.environ, "ATTN_ORACLE_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(tmp_path)}
        done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120, check=True)
        value, hits = done.stdout.split()
        return float(value), int(hits)

    unedited, hits = run()
    assert hits == 0 and run() == (unedited, 1)
    with open(tmp_path / "specs" / "reference.py", "a") as reference:
        reference.write(textwrap.dedent("""
            import dataclasses

            _unedited = attention

            def attention(q, k, v, **kwargs):
                result = _unedited(q, k, v, **kwargs)
                return dataclasses.replace(result, out=2 * result.out)
        """))
    edited, hits = run()
    assert hits == 0 and edited == 2 * unedited
