"""Tensors placed inside larger buffers whose margins show a kernel's reach past them.

Triton's interpreter does not check bounds: a load without its mask reads the neighbouring memory, a store
without one writes it. An input sits between margins of NaN, so an unmasked read past it brings a NaN into the
arithmetic (where a weight of 0 multiplies it, the NaN survives); an output sits between margins of NaN too, and
a margin element that is no longer NaN after the call names a store past the tensor.
"""

from __future__ import annotations

import torch


class StorePastOutput(RuntimeError):
    """A kernel wrote outside the tensor it was given."""


def guarded_empty(shape: tuple[int, ...], dtype: torch.dtype, margin: int, device: torch.device | str = "cpu"
                  ) -> torch.Tensor:
    """A contiguous tensor of `shape` with `margin` elements before and after it in memory, all NaN (-1 for an
    integer dtype, whose margins are for reading only)."""
    size = 1
    for extent in shape:
        size *= extent
    fill = float("nan") if dtype.is_floating_point else -1
    buffer = torch.full((size + 2 * margin,), fill, dtype=dtype, device=device)
    return buffer[margin:margin + size].view(shape)


def guarded_copy(x: torch.Tensor, margin: int, dtype: torch.dtype | None = None,
                 device: torch.device | str | None = None) -> torch.Tensor:
    """x copied (contiguous, in `dtype`, on `device`) between NaN margins."""
    copy = guarded_empty(tuple(x.shape), dtype or x.dtype, margin, x.device if device is None else device)
    copy.copy_(x.detach())
    return copy


def check_margins(name: str, tensor: torch.Tensor, margin: int) -> None:
    """Raise StorePastOutput naming `name` where the kernel wrote into a margin of guarded_empty's `tensor`."""
    if margin == 0:
        return
    start = tensor.storage_offset()
    buffer = torch.as_strided(tensor, (tensor.numel() + 2 * margin,), (1,), start - margin)
    before, after = buffer[:margin], buffer[margin + tensor.numel():]
    written = [(where, int((~torch.isnan(side)).sum())) for where, side in (("before", before), ("after", after))]
    written = [f"{count} elements {where} it" for where, count in written if count]
    if written:
        raise StorePastOutput(f"the kernel stored past its output {name} {tuple(tensor.shape)}: "
                              f"{' and '.join(written)} (an unmasked store)")
