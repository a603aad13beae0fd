"""Deviations of kernels as the seeds wrote them: what seed 002's shared-memory kernel computes, and where what it
reads is undefined (impls/cuda/kernels/seed002_optimized_attention_kernel_repaired.cu)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from specs.deviations.base import Call, Deviation, DeviationError


class UnwrittenSharedMemoryRead(Deviation):
    name = "unwritten-shared-memory-read"
    summary = ("seed 002's shared-memory kernel: thread t of a block of T stores its q row at s_mem[t d] and its k "
               "row at s_mem[(t + 1) d], where thread t + 1 stores its q row, with no barrier between (a race), "
               "and reads key k_idx at s_mem[k_idx T d], past the 2 T d floats of the launch for k_idx > 1: a "
               "query's output is defined only for one key (v_0), or with T = 1 for two keys "
               "(softmax([q.q, q.k] / sqrt(d)) over v_0, v_1); every other output is undefined")
    parameters: ClassVar[dict[str, str]] = {"block_threads": "threads per block (the launch's default)",
                                            "block_keyword": "the tile keyword that sets them"}

    def __init__(self, **params: object) -> None:
        super().__init__(**params)
        self.block_threads = params.get("block_threads")
        if not isinstance(self.block_threads, int) or self.block_threads < 1:
            raise DeviationError("unwritten-shared-memory-read: block_threads is the launch's threads per block")

    def _threads(self, tiles) -> int:
        return int(tiles.get(self.params.get("block_keyword"), self.block_threads))

    def transform(self, result, q, k, v, keywords):
        n = q.shape[2]
        if n != 2 or self._threads(keywords) != 1:
            return result
        dtype = result.out.dtype
        scale = dtype.type(1.0 / np.sqrt(q.shape[-1]))
        scores = np.stack([np.sum(q * q, axis=-1), np.sum(q * k, axis=-1)], axis=-1) * scale  # keys: q_i, k_i
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = weights / weights.sum(axis=-1, keepdims=True)
        out = weights[..., :1] * v[:, :, :1, :] + weights[..., 1:] * v[:, :, 1:2, :]
        return dataclasses.replace(result, out=out.astype(dtype))

    def predicted_values(self, call: Call) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """One key: every row's output is v_0, whatever the keys hold (the kernel reads a query row as the key)."""
        if call.q.shape[2] != 1:
            return {}
        shape = call.oracle.out.shape
        return {"out": (np.ones(shape, dtype=bool), np.broadcast_to(call.v[:, :, :1, :], shape))}

    def undefined(self, call: Call) -> dict[str, np.ndarray]:
        n = call.q.shape[2]
        if n == 1 or (n == 2 and self._threads(call.tiles) == 1):
            return {}
        return {"out": np.ones(call.oracle.out.shape, dtype=bool)}


KERNEL_DEVIATIONS = (UnwrittenSharedMemoryRead,)
