"""Where a CUDA kernel's code paths change, as its launcher knows them, and the fixed problems that reach them.

A kernel walks the keys in tiles (a K/V tile in shared memory, or a warp's chunk), holds a number of query rows
per block, and may specialise on the head dims (a template argument, the columns a lane owns). Its record
declares that geometry (impls/cuda/cuda_records.py, `geometry=`) from the launcher's own constants, and every CPU
record runs, against the oracle and under each checker (properties/test_cuda_kernels.py), the problems
`tile_edge_cases` derives from it: for each head-dim class, two key tiles + 1 keys and two query blocks + 1
rows, batch 2 with 2 kv heads (grouped where the kernel takes GQA), causal in the record's alignment, and
masked; on the smallest class, the window and softcap where the kernel takes them. These are not bounded by a CPU
record's max_seq, which bounds only the random draws.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from protocol.registry import Capabilities

SHARP = 8.0  # the causal cases' scale times sqrt(d)


@dataclass(frozen=True)
class TileCase:
    """One fixed problem (a specs.problems.build recipe) and what it reaches, for messages."""

    name: str
    recipe: dict = field(hash=False)


@dataclass(frozen=True)
class TileGeometry:
    """A kernel's tiles: keys per tile for each head-dim class (the largest d and d_v of the class, None for a
    kernel that reads every key in one pass), query rows per block, and whether a block's rows are (query head,
    position) pairs of the heads sharing a kv head (group x n_q rows, WMMA) or positions of one head."""

    key_tiles: Mapping[int, int | None]
    query_rows: int
    rows_span_group: bool = False

    def __post_init__(self) -> None:
        if not self.key_tiles or self.query_rows < 1:
            raise ValueError(f"a tile geometry needs head-dim classes and query rows >= 1, got {self}")

    def tile_edge_cases(self, caps: Capabilities) -> tuple[TileCase, ...]:
        """For each head-dim class: masked, and causal in `caps`' alignment (plain where the kernel takes
        neither), at two key tiles + 1 keys and two query blocks + 1 rows; batch 2, 2 kv heads."""
        heads_kv = 2
        heads = 2 * heads_kv if caps.gqa else heads_kv
        group = heads // heads_kv
        rows = 2 * self.query_rows + 1
        n_q = -(-rows // group) if self.rows_span_group else rows
        found = []
        for d, tile in sorted(self.key_tiles.items()):
            n_k = 2 * tile + 1 if tile else n_q
            shape = dict(batch=2, heads=heads, heads_kv=heads_kv, d=d, d_v=d)
            variants = []
            if caps.mask:
                variants.append(("masked", dict(mask_layout="full", mask_density=0.5)))
            if caps.causal:
                # scores of standard deviation 8: a row's maximum rises past a lazy threshold of 2^8 (exp2 units)
                # from one key tile to a later one in tens of rows of each case, so a rescale fires there
                variants.append((f"causal {caps.causal_alignment}", dict(causal=True, scale=SHARP / math.sqrt(d))))
            if tile and d == min(self.key_tiles) and (caps.window_size or caps.softcap):
                # beyond the seeds, on the smallest class: a window reaching one key past a tile, so the band's
                # left edge cuts the second tile for the last rows and the first rows skip no tile, and a cap
                mods = {"window": (tile + 1, 1)} if caps.window_size else {}
                mods.update({"softcap": 2.0} if caps.softcap else {})
                variants.append((" ".join(f"{key} {value}" for key, value in mods.items()), mods))
            for label, extra in variants or [("plain", {})]:
                q_len, k_len = n_q, n_k
                if not caps.cross:
                    q_len = k_len = max(n_q, n_k)
                elif extra.get("causal") and caps.causal_alignment == "top_left":
                    q_len = max(n_q, n_k)  # row i sees keys <= i: some row must see the last key tile
                recipe = dict(shape, n_q=q_len, n_k=k_len, seed=d + q_len + k_len, **extra)
                found.append(TileCase(f"d={d} {label} n_q={q_len} n_k={k_len}", recipe))
        return tuple(found)
