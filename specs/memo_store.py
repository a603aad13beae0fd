"""The store on disk behind specs.memo: the oracle and the tolerance model that an earlier run, or another pytest
worker, computed are read back instead of computed again (the ci profile draws the same problems every run).

Where: $ATTN_ORACLE_CACHE, else $XDG_CACHE_HOME/attention-spec/oracle, else ~/.cache/attention-spec/oracle, one
folder per version of everything a result depends on besides its arguments (`environment_key`): the bytes of every
file of specs/, the package's version, Python's, NumPy's and ml_dtypes', and the BLAS NumPy calls. An entry is
named by the digest of its key (the memo's content key: every array's dtype, shape and bytes, every keyword, the
function) and holds the digest of its body, then the body (the pickled result); it is written to a temporary file
and renamed into place, so a reader sees a whole entry or none, and read back only when the digest matches: a
corrupt or truncated entry is a miss, computed and written again. The folder is bounded: past `budget_bytes` the
entries written longest ago go. ATTN_ORACLE_CACHE=off (pytest's --no-oracle-cache sets it) turns the store off.
Entries are pickles: the folder is the user's own, as pytest's cache is.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import pickle
import platform
import tempfile
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import numpy as np

SPECS = Path(__file__).resolve().parent
DEFAULT_BUDGET_BYTES = 512 * 2**20
_DIGEST = 32  # bytes of blake2b over the body, at the head of every entry
_MISSING = object()


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _blas() -> str:
    """The BLAS NumPy calls (its name and version): another BLAS may round a product differently."""
    config = np.show_config(mode="dicts") or {}
    blas = config.get("Build Dependencies", {}).get("blas", {})
    return f"{blas.get('name', '?')} {blas.get('version', '?')}"


@functools.cache
def environment_key(specs: Path = SPECS) -> str:
    """A digest of what a stored result depends on besides its arguments (module docstring)."""
    digest = hashlib.blake2b(digest_size=16)
    for path in sorted(specs.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(specs)).encode() + b"\0" + path.read_bytes() + b"\0")
    versions = (_version("attention-spec"), platform.python_version(), np.__version__, _version("ml_dtypes"), _blas())
    digest.update(repr(versions).encode())
    return digest.hexdigest()


def store_dir() -> Path | None:
    """The folder of this environment's entries, or None when the store is off."""
    root = os.environ.get("ATTN_ORACLE_CACHE")
    if root == "off":
        return None
    base = Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "attention-spec"
    return (base if root else base / "oracle") / environment_key()


class MemoStore:
    """Entries of one memoised function (`name`) in the store folder; `get` and `put` by the memo's content key."""

    def __init__(self, name: str, *, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.name, self.budget_bytes = name, budget_bytes
        self._written = 0  # bytes this process wrote since it last pruned the folder

    def _path(self, key: Hashable) -> Path | None:
        folder = store_dir()
        if folder is None:
            return None
        return folder / f"{self.name}-{hashlib.blake2b(repr(key).encode(), digest_size=20).hexdigest()}.pickle"

    def get(self, key: Hashable) -> Any:
        """The stored value, or `MemoStore.MISSING` (none, unreadable, or its digest does not match)."""
        path = self._path(key)
        try:
            data = path.read_bytes() if path is not None else b""
        except OSError:
            return _MISSING
        head, body = data[:_DIGEST], data[_DIGEST:]
        if len(head) < _DIGEST or hashlib.blake2b(body, digest_size=_DIGEST).digest() != head:
            return _MISSING
        try:
            return pickle.loads(body)
        except Exception:  # a body that passed its digest yet does not load (a class since renamed) is a miss
            return _MISSING

    def put(self, key: Hashable, value: Any) -> None:
        """Store `value` under `key` atomically; a folder that cannot be written leaves the run without a store."""
        path = self._path(key)
        if path is None:
            return
        try:
            body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):  # a value that cannot be stored is recomputed
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".writing-", delete=False) as handle:
                handle.write(hashlib.blake2b(body, digest_size=_DIGEST).digest() + body)
            os.replace(handle.name, path)
        except OSError:
            return
        self._written += len(body) + _DIGEST
        if self._written > self.budget_bytes // 16:
            self._written = 0
            prune(path.parent.parent, self.budget_bytes)

    MISSING = _MISSING


def prune(root: Path, budget_bytes: int) -> None:
    """Remove the entries under `root` written longest ago until what is left fits `budget_bytes` (every
    environment's folder counts: an old version's entries go first, as nothing reads them)."""
    entries = []
    for path in root.rglob("*.pickle"):
        try:
            stat = path.stat()
        except OSError:
            continue
        entries.append((stat.st_mtime, stat.st_size, path))
    held = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries, key=lambda entry: entry[0]):
        if held <= budget_bytes:
            break
        path.unlink(missing_ok=True)
        held -= size
