"""torch.nn.functional.scaled_dot_product_attention, one record per CPU backend.

torch 2.13's CPU build has two backends: MATH (the composite formula; every
dtype, dropout, d_v != d) and FLASH_ATTENTION (a fused, tiled CPU kernel;
d_v must equal d, no dropout). Each record pins its backend with
torch.nn.attention.sdpa_kernel, so a fallback cannot hide which one ran.
Both take torch tensors (tensors="torch": autograd reaches them), torch.bfloat16 among them (ml_dtypes'
bfloat16 arrays cross as such: protocol.torch_convert), and
pass every property in it; their known defects are the same in bfloat16 as in float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from impls.torch.torch_nan_findings import nan_findings
from protocol.registry import attention_impl


def pinned_sdpa(backend: SDPBackend, q, k, v, *, scale, causal, mask, dropout_p=0.0) -> torch.Tensor:
    """One SDPA call pinned to `backend` (no fallback), wherever q, k, v live (the CUDA records use it too)."""
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal, scale=scale,
            enable_gqa=q.shape[1] != k.shape[1],
        )


def _probe(backend: SDPBackend) -> str | None:
    x = torch.zeros((1, 1, 2, 4), dtype=torch.float64)
    try:
        pinned_sdpa(backend, x, x, x, scale=None, causal=False, mask=None)
    except RuntimeError as exc:
        return f"torch {torch.__version__} has no {backend.name} kernel here: {str(exc).splitlines()[0]}"
    return None


# specs/keyword_edges.py's scale and mask edges: the derive step's comment names the edge
def scale_as_float_only(dtypes: tuple[str, ...]) -> dict:
    """The declaration of a record whose `scale` goes to torch's scaled_dot_product_attention as it came."""
    return {"scale-keyword-domain": {
        "why": "torch's scaled_dot_product_attention takes `scale` as a Python float only: a 0-d NumPy array "
               "raises TypeError (a NumPy scalar, which converts to float, is accepted)",
        "dtypes": dtypes,
        "match": r"raised TypeError: scaled_dot_product_attention\(\): argument 'scale' must be float, "
                 r"not numpy\.ndarray(?s:.*)\ninput: .*# a 0-d array",
    }}


FLASH_MASK_RANKS = {
    "mask-keyword-domain": {
        "why": "torch 2.13's CPU flash kernel takes a mask of rank 2 or 4 only: a rank-1 mask raises IndexError "
               "and a rank-3 one finds no kernel (MATH broadcasts every rank)",
        "dtypes": ("float64", "float32", "bfloat16"),
        "match": r"raised (IndexError: Dimension out of range|RuntimeError: No available kernel)(?s:.*)\ninput: "
                 r".*# [^\n]*, rank [13], shape",
    },
}


@attention_impl(name="torch-sdpa-math", backend="torch", dtypes=("float64", "float32", "float16", "bfloat16"),
                causal_alignment="top_left", tensors="torch",
                known_defects={**scale_as_float_only(("float64", "float32", "float16", "bfloat16")),
                               **nan_findings(("float64", "float32", "float16", "bfloat16"), drops_visible_nan=False)})
def sdpa_math(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    return pinned_sdpa(SDPBackend.MATH, q, k, v, scale=scale, causal=causal, mask=mask, dropout_p=dropout_p)


UNCHECKED_VALUE_LENGTH = {
    "one-key-per-value": {
        "why": "torch 2.13's CPU flash kernel does not check that v has as many rows as k has keys: "
               "it returns an output instead of raising",
        "dtypes": ("float64", "float32", "bfloat16"),
        "properties": ("test_values_of_another_length_are_rejected",),
        "match": r"accepted k with n_k=\d+ keys and v with \d+ values",
    },
}


GROUP_SUM_IN_BFLOAT16 = {
    "differentiable-end-to-end": {
        "why": "with enable_gqa, torch 2.13's CPU flash backward rounds each query head's dK to bfloat16 before "
               "summing the group's eight: at n = 1025 one element in 65600 ends 3.7 ulps off, past 4 x the naive "
               "backward's error, whose group sum stays in float32",
        "dtypes": ("bfloat16",),
        "properties": ("test_long_gradients_match_the_oracle_backward",),
        "match": r"dK differs from the float64 oracle's backward beyond the tolerance(?s:.*)"
                 r"input: build\(heads=8, n_q=1025, n_k=1025, ",  # heads_kv=1, left out of the recipe
    },
}


@attention_impl(name="torch-sdpa-flash-cpu", backend="torch", dtypes=("float64", "float32", "bfloat16"),
                causal_alignment="top_left", value_dim=False, fused=True, tensors="torch",
                known_defects={**UNCHECKED_VALUE_LENGTH, **FLASH_MASK_RANKS, **GROUP_SUM_IN_BFLOAT16,
                               **scale_as_float_only(("float64", "float32", "bfloat16")),
                               **nan_findings(("float64", "float32", "bfloat16"), drops_visible_nan=True)},
                probe=lambda: _probe(SDPBackend.FLASH_ATTENTION))
def sdpa_flash_cpu(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    # the flash kernel takes only inputs whose last dim is contiguous (torch's sdp_utils: "No available kernel"
    # otherwise, where unpinned dispatch would fall back to MATH): the adapter copies, as dispatch cannot here
    q, k, v = (x.contiguous() for x in (q, k, v))
    return pinned_sdpa(SDPBackend.FLASH_ATTENTION, q, k, v, scale=scale, causal=causal, mask=mask)
