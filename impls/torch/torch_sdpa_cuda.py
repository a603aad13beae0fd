"""torch.nn.functional.scaled_dot_product_attention on a CUDA device, one record per fused backend.

Seed 000 § Flash Attention: FLASH_ATTENTION is FlashAttention-2, EFFICIENT_ATTENTION xFormers' memory-efficient
kernel, CUDNN_ATTENTION cuDNN's fused attention. Each record pins its backend with
torch.nn.attention.sdpa_kernel, so a fallback to MATH cannot hide which one ran. They take CPU torch tensors
(tensors="torch"), move q, k, v and the mask to "cuda" (autograd flows through .to()) and return the CUDA
output; the harness brings it back with .cpu(). Without a CUDA device the probe says why and the records are
listed as not run.

What the backends accept (torch's sdp_utils.cpp) and what the records do about it:
* head dims: efficient needs d and d_v divisible by 4 (float32) or 8 (half types), cuDNN by 8; every record
  pads q, k (and v) with zero columns to a multiple of 8, which adds exactly 0 to every q.k and gives zero
  output columns, sliced off. The default scale is 1/sqrt(d) of the unpadded d.
* a unit last stride: the device copies are made contiguous.
* flash: no attn_mask (no mask keyword), d_v == d (value_dim=False), float16/bfloat16, and is_causal only
  when n_q == n_k. Top-left causal with n_q < n_k sees no key past n_q, so it runs on the first n_q keys;
  with n_q > n_k the first n_k rows are a square causal problem and the others see every key.
* mask together with causal: folded into one boolean mask (top-left), as torch's documentation asks.
* cuDNN: float16/bfloat16; n_k == 1 is rejected, so one hidden zero key is appended (masked off, so the
  causal flag, a no-op for a single key, goes into the mask); dropout only at multiples of 1/16, so the record
  takes no dropout_p (the dropout properties use 0.1: every call would raise).
The dropout of flash and efficient comes from torch's CUDA generator: not a function of our dropout_seed.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from impls.torch.torch_sdpa import pinned_sdpa
from protocol.registry import attention_impl

DEVICE = "cuda"
HEAD_DIM_MULTIPLE = 8  # the strictest alignment among the three backends (cuDNN, efficient in half types)


def _pad_head_dim(x: torch.Tensor) -> torch.Tensor:
    extra = -x.shape[-1] % HEAD_DIM_MULTIPLE
    return F.pad(x, (0, extra)) if extra else x


def _top_left(n_q: int, n_k: int) -> torch.Tensor:
    """Key j visible to query i iff j <= i."""
    return torch.ones((n_q, n_k), dtype=torch.bool, device=DEVICE).tril()


def _flash(q, k, v, *, scale: float, causal: bool, dropout_p: float) -> torch.Tensor:
    n_q, n_k = q.shape[2], k.shape[2]

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
        return pinned_sdpa(SDPBackend.FLASH_ATTENTION, q, k, v, scale=scale, causal=causal, mask=None,
                           dropout_p=dropout_p)

    if not causal or n_q == n_k:
        return run(q, k, v, causal)
    if n_q < n_k:
        return run(q, k[:, :, :n_q], v[:, :, :n_q], True)
    return torch.cat([run(q[:, :, :n_k], k, v, True), run(q[:, :, n_k:], k, v, False)], dim=2)


def sdpa_on_cuda(backend: SDPBackend, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                 scale: float | None, causal: bool, mask: torch.Tensor | None,
                 dropout_p: float = 0.0) -> torch.Tensor:
    """Move the call to the CUDA device and adapt it to what `backend` accepts (module docstring)."""
    d, d_v = q.shape[-1], v.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    q, k, v = (_pad_head_dim(x.to(DEVICE)).contiguous() for x in (q, k, v))
    if backend == SDPBackend.FLASH_ATTENTION:
        return _flash(q, k, v, scale=scale, causal=causal, dropout_p=dropout_p)[..., :d_v]
    batch, heads, n_q, n_k = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    if mask is not None:
        mask = mask.to(DEVICE).expand(batch, heads, n_q, n_k)
        if causal:
            mask, causal = mask & _top_left(n_q, n_k), False
    if backend == SDPBackend.CUDNN_ATTENTION and n_k == 1:
        k, v = (F.pad(x, (0, 0, 0, 1)) for x in (k, v))
        seen = mask if mask is not None else torch.ones((batch, heads, n_q, 1), dtype=torch.bool, device=DEVICE)
        mask, causal = F.pad(seen, (0, 1), value=False), False  # causal top-left: every row sees key 0
    out = pinned_sdpa(backend, q, k, v, scale=scale, causal=causal, mask=mask, dropout_p=dropout_p)
    return out[..., :d_v]


def probe(backend: SDPBackend) -> str | None:
    """Why `backend` cannot run here (no CUDA device, or a tiny call fails), or None."""
    if not torch.cuda.is_available():
        if torch.version.cuda is None:
            return f"no CUDA device: torch {torch.__version__} was built without CUDA (torch.version.cuda is None)"
        return f"no CUDA device visible to torch {torch.__version__} (built for CUDA {torch.version.cuda})"
    x = torch.zeros((1, 1, 8, 64), dtype=torch.float16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            sdpa_on_cuda(backend, x, x, x, scale=None, causal=False, mask=None)
            torch.cuda.synchronize()
        except RuntimeError as exc:
            name = backend.name.split("_")[0].lower()  # flash, efficient, cudnn: as torch's warnings name them
            why = [line for line in (str(w.message).splitlines()[0] for w in caught)
                   if name in line.lower() and "disabled" not in line and "not used because" not in line]
            detail = f" ({'; '.join(why[:2])})" if why else ""
            return (f"torch {torch.__version__} cannot run {backend.name} on {torch.cuda.get_device_name()}: "
                    f"{str(exc).splitlines()[0]}{detail}")
    return None


@attention_impl(name="torch-sdpa-cuda-flash", backend="torch", dtypes=("float16", "bfloat16"),
                causal_alignment="top_left", value_dim=False, fused=True, tensors="torch",
                probe=lambda: probe(SDPBackend.FLASH_ATTENTION))
def sdpa_cuda_flash(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    return sdpa_on_cuda(SDPBackend.FLASH_ATTENTION, q, k, v, scale=scale, causal=causal, mask=None,
                        dropout_p=dropout_p)


@attention_impl(name="torch-sdpa-cuda-efficient", backend="torch", dtypes=("float32", "float16", "bfloat16"),
                causal_alignment="top_left", fused=True, tensors="torch",
                probe=lambda: probe(SDPBackend.EFFICIENT_ATTENTION))
def sdpa_cuda_efficient(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    return sdpa_on_cuda(SDPBackend.EFFICIENT_ATTENTION, q, k, v, scale=scale, causal=causal, mask=mask,
                        dropout_p=dropout_p)


@attention_impl(name="torch-sdpa-cuda-cudnn", backend="torch", dtypes=("float16", "bfloat16"),
                causal_alignment="top_left", fused=True, tensors="torch",
                probe=lambda: probe(SDPBackend.CUDNN_ATTENTION))
def sdpa_cuda_cudnn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    return sdpa_on_cuda(SDPBackend.CUDNN_ATTENTION, q, k, v, scale=scale, causal=causal, mask=mask)
