"""Varlen against padding to the longest sequence (issue 22), side by side in one run: torch-flash-varlen on the
packed tensor, and torch-flash-tiled on the batch padded to the longest sequence with a key-padding mask (what a
kernel without a varlen face is given). float32, 8 heads, d = 64, forward and forward + backward, for two packs
whose lengths differ 4x and 16x. Each group's second benchmark records the ratio (padded time / varlen time, from
the minima) in its extra_info; nothing here asserts a time.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from impls.torch.torch_flash import flash_attention_tiled  # noqa: E402
from impls.torch.torch_flash_varlen import flash_attn_varlen  # noqa: E402

HEADS, D = 8, 64
PACKS = {  # lengths of the sequences of a pack: spread (longest / shortest) 4x and 16x
    "4x": (256, 1024, 512, 256, 768, 1024, 384, 256),
    "16x": (64, 1024, 128, 64, 256, 1024, 96, 512),
}
MINIMA: dict[tuple[str, str], dict[str, float]] = {}


def _inputs(lengths: tuple[int, ...]):
    rng = np.random.default_rng(len(lengths))
    packed = [torch.as_tensor(rng.standard_normal((sum(lengths), HEADS, D)), dtype=torch.float32) for _ in range(3)]
    cu = torch.as_tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)
    longest = max(lengths)
    padded = [torch.zeros((len(lengths), HEADS, longest, D)) for _ in range(3)]
    for b, (start, n) in enumerate(zip(cu[:-1].tolist(), lengths, strict=True)):
        for dense, x in zip(padded, packed, strict=True):
            dense[b, :, :n] = x[start:start + n].transpose(0, 1)
    keys = torch.arange(longest)[None, :] < torch.as_tensor(lengths)[:, None]
    return packed, cu, padded, keys[:, None, None, :]


def _runner(kind: str, mode: str, lengths: tuple[int, ...]):
    packed, cu, padded, mask = _inputs(lengths)
    longest = max(lengths)
    inputs = packed if kind == "varlen" else padded

    def run():
        leaves = [x.detach().requires_grad_(mode == "fwd+bwd") for x in inputs]
        if kind == "varlen":
            out = flash_attn_varlen(*leaves, cu, cu, longest, longest, causal=True)
        else:
            out = flash_attention_tiled(*leaves, causal=True, causal_alignment="bottom_right", mask=mask)
        if mode == "fwd+bwd":
            out.sum().backward()

    return run


@pytest.mark.parametrize("mode", ["forward", "fwd+bwd"])
@pytest.mark.parametrize("spread", list(PACKS))
@pytest.mark.parametrize("kind", ["padded", "varlen"])
def test_varlen_against_padding(benchmark, kind, spread, mode):
    benchmark.group = f"varlen vs padded, lengths {spread} apart, {mode}"
    benchmark.pedantic(_runner(kind, mode, PACKS[spread]), rounds=3, warmup_rounds=1, iterations=1)
    if benchmark.stats is None:
        return
    times = MINIMA.setdefault((spread, mode), {})
    times[kind] = benchmark.stats.stats.min
    if len(times) == 2:
        benchmark.extra_info["padded_over_varlen"] = times["padded"] / times["varlen"]
