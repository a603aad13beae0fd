"""The Triton FlashAttention-2 (impls/triton/triton_flash.py) as records of CONTRACT 1: `triton-flash` (causal
top-left) and `triton-flash-bottom-right`, the same kernels with the alignment's offset. Importing this module
needs no Triton (the records' probe says where it is missing; tox -e triton installs it), so every run can tell
which records exist."""

from __future__ import annotations

from typing import TYPE_CHECKING

from impls.peers.availability import installed
from protocol.registry import attention_impl
from protocol.triton_interpreter import interpreted_max_seq

if TYPE_CHECKING:
    import torch

MIN_BLOCK = 16  # tl.dot's smallest tile side on a GPU


def _record(causal_alignment: str):
    def triton_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
                     causal: bool = False, dropout_p: float = 0.0, dropout_seed: int | None = None,
                     block_rows: int = 64, block_cols: int = 64, return_lse: bool = False,
                     window_size: tuple[int, int] | None = None, softcap: float = 0.0):
        from impls.triton.triton_flash import triton_attention  # Triton is imported where it runs

        return triton_attention(q, k, v, scale=scale, causal=causal, causal_alignment=causal_alignment,
                                dropout_p=dropout_p, dropout_seed=dropout_seed, block_rows=block_rows,
                                block_cols=block_cols, return_lse=return_lse, window_size=window_size,
                                softcap=softcap)

    triton_flash.__doc__ = f"triton_attention, causal aligned {causal_alignment}."
    return triton_flash


# tiles of at least 16: tl.dot's smallest on a GPU
TRITON_CAPABILITIES = dict(backend="triton", probe=installed("triton", installer="tox -e triton"),
                           dtypes=("float32", "float16", "bfloat16"), tensors="torch",
                           tile_keywords=("block_rows", "block_cols"), min_block_size=MIN_BLOCK, lse=True,
                           fused=True, max_seq=interpreted_max_seq())
triton_flash = attention_impl(name="triton-flash", causal_alignment="top_left",
                              **TRITON_CAPABILITIES)(_record("top_left"))
triton_flash_bottom_right = attention_impl(name="triton-flash-bottom-right", causal_alignment="bottom_right",
                                           **TRITON_CAPABILITIES)(_record("bottom_right"))
