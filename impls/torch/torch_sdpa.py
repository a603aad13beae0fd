"""torch.nn.functional.scaled_dot_product_attention, one record per CPU backend.

torch 2.13's CPU build has two backends: MATH (the composite formula; every
dtype, dropout, d_v != d) and FLASH_ATTENTION (a fused, tiled CPU kernel;
d_v must equal d, no dropout). Each record pins its backend with
torch.nn.attention.sdpa_kernel, so a fallback cannot hide which one ran.
Both take torch tensors (tensors="torch": autograd reaches them), torch.bfloat16 among them (ml_dtypes'
bfloat16 arrays cross as such: protocol.torch_convert), and
pass every property in it; their known defects are the same in bfloat16 as in float32.
Beyond the seeds, both take the protocol's `bias` as SDPA's float attn_mask (added to the scaled scores). SDPA
takes one attn_mask and refuses one beside is_causal, so with a bias the adapter folds the boolean mask and the
causal horizon (top-left, SDPA's) into it as -inf. The MATH path gives the bias its gradient (differentiable_mods);
the FLASH path refuses a float mask that requires grad, so its record does not declare it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from impls.score_mod_checks import checked_mods
from protocol.registry import attention_impl


def pinned_sdpa(backend: SDPBackend, q, k, v, *, scale, causal, mask, dropout_p=0.0) -> torch.Tensor:
    """One SDPA call pinned to `backend` (no fallback), wherever q, k, v live (the CUDA records use it too)."""
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal, scale=scale,
            enable_gqa=q.shape[1] != k.shape[1],
        )


def folded_bias(bias: torch.Tensor | None, mask: torch.Tensor | None, causal: bool, q: torch.Tensor,
                k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor | None, bool]:
    """(attn_mask, is_causal) for SDPA: the boolean mask without a bias; with one, the bias checked against the
    protocol (specs.score_mods: SDPA would take an integer one, or NaN) and the keys the mask or the top-left
    causal horizon hides set to -inf, and is_causal off."""
    if bias is None:
        return mask, causal
    checked_mods(q, k, v, bias=bias)
    n_q, n_k = q.shape[2], k.shape[2]
    hidden = torch.tensor(float("-inf"), dtype=bias.dtype)
    if mask is not None:
        bias = torch.where(mask, bias, hidden)
    if causal:
        bias = torch.where(torch.ones(n_q, n_k, dtype=torch.bool).tril(), bias, hidden)
    return bias, False


def _probe(backend: SDPBackend) -> str | None:
    x = torch.zeros((1, 1, 2, 4), dtype=torch.float64)
    try:
        pinned_sdpa(backend, x, x, x, scale=None, causal=False, mask=None)
    except RuntimeError as exc:
        return f"torch {torch.__version__} has no {backend.name} kernel here: {str(exc).splitlines()[0]}"
    return None


@attention_impl(name="torch-sdpa-math", backend="torch", dtypes=("float64", "float32", "float16", "bfloat16"),
                causal_alignment="top_left", tensors="torch", differentiable_mods=("bias",))
def sdpa_math(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    mask, causal = folded_bias(bias, mask, causal, q, k, v)
    return pinned_sdpa(SDPBackend.MATH, q, k, v, scale=scale, causal=causal, mask=mask, dropout_p=dropout_p)


@attention_impl(name="torch-sdpa-flash-cpu", backend="torch", dtypes=("float64", "float32", "bfloat16"),
                causal_alignment="top_left", value_dim=False, fused=True, tensors="torch",
                probe=lambda: _probe(SDPBackend.FLASH_ATTENTION))
def sdpa_flash_cpu(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    mask, causal = folded_bias(bias, mask, causal, q, k, v)
    # the flash kernel takes only inputs whose last dim is contiguous (torch's sdp_utils: "No available kernel"
    # otherwise, where unpinned dispatch would fall back to MATH): the adapter copies, as dispatch cannot here
    q, k, v = (x.contiguous() for x in (q, k, v))
    return pinned_sdpa(SDPBackend.FLASH_ATTENTION, q, k, v, scale=scale, causal=causal, mask=mask)
