"""Copies of the Triton FlashAttention kernels (impls/triton/flash_kernels.py) with textual changes, as records an
outside user could write around impls.triton.triton_flash.triton_attention: the zoo's wrong Triton kernels (one
mistake each, zoo/wrong_triton.py) and correct ones written another way (zoo/correct_triton.py). Each copy is
derived from the kernels' file when it is first called, so it follows the kernels instead of going stale; a change
whose text no longer occurs exactly once fails loudly. Importing this module needs no Triton (the zoo's list is read
everywhere); calling a copy does."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

KERNELS = Path(__file__).resolve().parent.parent / "impls" / "triton" / "flash_kernels.py"
CAPABILITIES = dict(dtypes=("float32",), tensors="torch", tile_keywords=("block_rows", "block_cols"),
                    min_block_size=16, lse=True, fused=True, causal_alignment="top_left", max_seq=1024)


def _cache() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "attention-spec" / "triton-copies"


def changed_kernels(name: str, changes: tuple[tuple[str, str], ...]) -> ModuleType:
    """The kernels' module with each (text, replacement) of `changes` made, imported once per process."""
    source = KERNELS.read_text()
    for original, replacement in changes:
        if source.count(original) != 1:
            raise RuntimeError(f"{name}: the text it changes occurs {source.count(original)} times in "
                               f"{KERNELS.name}: {original!r}")
        source = source.replace(original, replacement)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    module_name = f"triton_copy_{name}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    path = _cache() / f"{module_name}.py"  # @triton.jit reads its function's source from a file
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(source)
        os.replace(partial, path)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def record(module: str, name: str, doc: str, changes: tuple[tuple[str, str], ...]) -> Callable:
    """A record of triton_attention on the changed copy `name`, defined as `module`'s (its __name__), its docstring
    `doc` (the zoo's mistake)."""

    def attention(q, k, v, *, scale=None, causal=False, dropout_p=0.0, dropout_seed=None, block_rows=64,
                  block_cols=64, return_lse=False, window_size=None, softcap=0.0):
        from impls.triton.triton_flash import triton_attention  # Triton, where the copy runs

        return triton_attention(q, k, v, scale=scale, causal=causal, dropout_p=dropout_p, dropout_seed=dropout_seed,
                                block_rows=block_rows, block_cols=block_cols, return_lse=return_lse,
                                window_size=window_size, softcap=softcap, kernels=changed_kernels(name, changes))

    attention.__name__ = attention.__qualname__ = name
    attention.__module__ = module
    attention.__doc__ = doc
    attention.attention_capabilities = CAPABILITIES
    return attention
