"""Deliberately wrong sharded attention (protocol.faces' "sharded" face): our ring and Ulysses
(impls/distributed) with one mistake each, the mistakes context-parallel attention is known for: partial results
merged without rescaling the running output, a rotated block's causal mask at the block's local offset, zigzag
chunks taken in the wrong order, Ulysses' heads put back in the wrong order, a backward that drops the LSE's share
of the remote blocks. zoo/catches.toml says what each must break; tests/distributed/test_distributed_zoo.py requires
each caught exactly (tox -e distributed)."""

from __future__ import annotations

import numpy as np
import torch

from impls.distributed.ring import RingPlan, merge_weights, ring_face, visibility
from impls.distributed.ulysses import UlyssesPlan, ulysses_face

WRONG = dict(dtypes=("float64",), tensors="torch", lse=True, faces=("sharded",))


class _UnrescaledMerge(RingPlan):
    @staticmethod
    def merge(out, lse, out_b, lse_b):
        merged = torch.logaddexp(lse, lse_b)
        return out + merge_weights(lse_b, merged)[..., None] * out_b, merged


class _LocalBlockOffset(RingPlan):
    def visible(self, step):
        rows, keys = (np.arange(len(held)) for held in (self.rows[self.rank], self.keys[self.owner(step)]))
        return visibility(rows, keys, len(rows), len(keys), self.causal, self.alignment, self.window)


class _ZigzagChunksSwapped(RingPlan):
    def positions(self, length):
        positions, n = super().positions(length)
        return [np.concatenate([held[len(held) // 2:], held[:len(held) // 2]]) for held in positions], n


class _RemoteLseDropped(RingPlan):
    def block_cotangents(self, step, weight, out_b, out, d_out, d_lse):
        g_out, g_lse = super().block_cotangents(step, weight, out_b, out, d_out, d_lse)
        return g_out, (g_lse if step == 0 else weight * d_lse)


class _HeadsBackReversed(UlyssesPlan):
    def to_sequence(self, x, lengths):
        back = super().to_sequence(x, lengths)
        share = back.shape[1] // self.world
        return torch.cat(list(reversed(back.split(share, dim=1))), dim=1)


def _wrong(layout: str, face, mistake: str, **declared):
    """A wrong implementation as an outside one is written: capabilities as an attribute, named by its target."""
    face.__doc__, face.__module__ = mistake, __name__
    face.attention_capabilities = dict(WRONG, sharding=layout, **declared)
    return face


def _wrong_ring(layout: str, plan_type: type[RingPlan], mistake: str):
    """Our ring over `layout` with one step of `plan_type` wrong."""
    return _wrong(layout, ring_face(layout, plan_type), mistake, ring_merge=True)


ring_merge_unrescaled = _wrong_ring(
    "contiguous", _UnrescaledMerge,
    "the ring merges a block's partial result without rescaling the running output by its new share")
ring_block_mask_at_local_offset = _wrong_ring(
    "contiguous", _LocalBlockOffset,
    "the causal mask of a rotated block is laid at the block's local positions, as if it were the diagonal block")
zigzag_chunks_swapped = _wrong_ring(
    "zigzag", _ZigzagChunksSwapped,
    "a zigzag rank takes its two chunks in the wrong order (2W - 1 - r first), so its positions are misread")
ring_backward_drops_remote_lse = _wrong_ring(
    "contiguous", _RemoteLseDropped,
    "the backward passes a remote block only dLSE's share, dropping <dO, out_b - out> (the LSE's gradient there)")
ulysses_heads_back_reversed = _wrong(
    "contiguous", ulysses_face(_HeadsBackReversed),
    "Ulysses' second all-to-all puts the heads back in reversed rank order", heads_divisible=True)
