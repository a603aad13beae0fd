"""Correct Triton FlashAttention kernels written another way: copies of impls/triton/flash_kernels.py changed by
zoo/triton_copies.py where the change keeps the result (the online softmax does not depend on the order its key
tiles come in). Every applicable property must pass on each (tests/triton/test_triton_zoo.py, tox -e triton)."""

from __future__ import annotations

from zoo.triton_copies import record

FORWARD_LOOP = ("    for col0 in range(start, stop, block_cols):\n"
                "        cols = col0 + tl.arange(0, BLOCK_N)\n"
                "        col_ok = (tl.arange(0, BLOCK_N) < block_cols) & (cols < stop)\n"
                "        k = tl.load(")
KEYS_LOOP = "    for row0 in range(start, stop, block_rows):\n        rows = row0 + tl.arange(0, BLOCK_M)\n"

triton_tiles_last_to_first = record(
    __name__, "triton_tiles_last_to_first",
    "the forward visits its key tiles from the last (a partial tile first) to the first, and the backward its "
    "query tiles likewise",
    ((FORWARD_LOOP,
      "    tiles = tl.cdiv(stop - start, block_cols)\n"
      "    for tile in range(tiles):\n"
      "        col0 = start + (tiles - 1 - tile) * block_cols\n"
      + FORWARD_LOOP.partition("\n")[2]),
     (KEYS_LOOP,
      "    tiles = tl.cdiv(stop - start, block_rows)\n"
      "    for tile in range(tiles):\n"
      "        row0 = start + (tiles - 1 - tile) * block_rows\n"
      "        rows = row0 + tl.arange(0, BLOCK_M)\n")))

CORRECT_TRITON = ("triton_tiles_last_to_first",)
