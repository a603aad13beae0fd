"""xformers' Triton split-k decoding kernel (xformers 0.0.35, `xformers.ops.fmha.triton_splitk.FwOp`), the operator
`memory_efficient_attention_forward` dispatches decoding to on GPUs, under Triton's interpreter where no GPU is.

Running it on the CPU: the operator declares CUDA its only device, so dispatch never picks it for CPU tensors; the
adapter calls `FwOp.apply(Inputs(...), needs_gradient=True)` (the output and its LSE, as dispatch would) after
asking the operator's own `not_supported_reasons`, all but the CPU's device reason kept: a call the operator refuses
on a GPU is refused here, by its reason (AttentionInputError). Its calls run in a worker process (declared native:
the interpreter checks no bounds, so a store past a tensor would corrupt the pytest process's heap). It runs on
triton 3.6.0 only: its kernel builds block pointers (`tl.make_block_ptr`), which triton 3.9 removed ("Block pointers
have been removed in favor of the tensor descriptor API"), on GPUs too.

The mapping, xformers' documented semantics: q (batch, n_q, heads, d), keys and values (batch, n_k, heads, d) (BMHK);
grouped-query attention in the BMGHK layout (a kv head's group of query heads as the H axis, its keys broadcast over
it, a stride-0 view); `scale` None is 1/sqrt(d). The operator takes head dims of 16, 32, 64, 128, 256 and 512: q
and k are zero-padded to the next one (their scores do not change) and v too, the output cut back to d_v, with the
protocol's scale passed explicitly. Faces, each through xformers' block-diagonal masks on one packed sequence:
- dense: no mask, or causal as `BlockDiagonalCausalWithOffsetPaddedKeysMask` (bottom-right, each batch entry a
  block);
- varlen: `BlockDiagonalGappyKeysMask` (each sequence's keys where cu_seqlens_k puts them, seqused_k of them where
  given; causal:
  `BlockDiagonalCausalWithOffsetGappyKeysMask`); rows past cu_seqlens_q[-1] are 0;
- kvcache: the new keys and values written into the cache at cache_seqlens (the caller's job in xformers), then
  `BlockDiagonal(Causal)WithOffsetPaddedKeysMask` with the cache's length as the padding.
Where no GPU is, the launch's question about the GPU's generation (torch.cuda.get_device_capability, which picks
head dim 128's tiles) is answered (8, 0), an A100's: the tiles it runs with there; the calls run in their own worker
process, where nothing else asks. A varlen pack with a sequence of no query fails inside the operator's reshape
(empty_sequences False: not asked). The operator refuses causal masks with more than 16 queries a sequence and
causal varlen sequences of unequal query lengths (its reasons); forward only, no dropout. float16 only: the operator
takes float16 and bfloat16 queries, and the interpreter multiplies bfloat16 `tl.dot` operands' raw bits
(triton-lang/triton#11584).
"""

from __future__ import annotations

import functools
import itertools
import os

from impls.peers.availability import installed
from protocol.registry import attention_impl
from protocol.triton_interpreter import interpret_without_gpu, interpreted_max_seq
from specs.kv_cache import check_kv_cache
from specs.validation import AttentionInputError, check_shapes
from specs.varlen import check_packing

HEAD_DIMS = (16, 32, 64, 128, 256, 512)  # triton_splitk.FwOp.shape_not_supported_reasons
SM80 = (8, 0)  # the GPU generation the kernel's launch is told it runs on where there is none (A100's)


@functools.cache
def _xformers():
    """xformers' fmha modules, with its Triton operators enabled (flash-attn, which xformers imports where it is
    installed, with its Triton backend: its CUDA build is not)."""
    interpret_without_gpu()  # a record imported by name (a test) decides too, before Triton is
    os.environ["XFORMERS_ENABLE_TRITON"] = "1"
    os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"
    import torch
    from xformers.ops.fmha import attn_bias, common, triton_splitk

    if not torch.cuda.is_available():  # the launch asks the GPU's generation to pick head dim 128's tiles
        torch.cuda.get_device_capability = lambda device=None: SM80
    return attn_bias, common, triton_splitk


def _padded(x, size: int):
    import torch

    return x if x.shape[-1] == size else torch.nn.functional.pad(x, (0, size - x.shape[-1]))


def _split_k(q, k, v, bias, scale):
    """FwOp on q (batch, n_q, heads, d) and k, v (batch, n_k, heads_kv, d / d_v), batch 1 under a block-diagonal
    mask -> (out, lse (batch, heads, n_q)); out (batch, n_q, heads, d_v), or under a padded-keys mask the operator's
    (sequences, n_q, heads, d_v)."""
    _, common, triton_splitk = _xformers()
    d, d_v = q.shape[-1], v.shape[-1]
    size = next((s for s in HEAD_DIMS if s >= max(d, d_v)), None)
    if size is None:
        raise AttentionInputError(f"head dims d={d}, d_v={d_v}: the split-k operator takes at most {HEAD_DIMS[-1]}")
    heads, heads_kv = q.shape[2], k.shape[2]
    group = heads // heads_kv
    q5 = _padded(q, size).unflatten(2, (heads_kv, group))
    k5, v5 = (_padded(x, size)[:, :, :, None].expand(-1, -1, -1, group, -1) for x in (k, v))
    scale = d ** -0.5 if scale is None else scale
    inputs = common.Inputs(q5, k5, v5, attn_bias=bias, scale=float(scale))
    reasons = [r for r in triton_splitk.FwOp.not_supported_reasons(inputs) if not r.startswith("device=")]
    if reasons:
        raise AttentionInputError(f"xformers' split-k operator refuses this call: {'; '.join(reasons)}")
    out, context = triton_splitk.FwOp.apply(inputs, needs_gradient=True)
    return out.flatten(2, 3)[..., :d_v], context.lse.flatten(1, 2)


def _padded_blocks(q, k, v, lengths: list[int], *, causal: bool, scale):
    """q (batch, n_q, heads, d) over keys (batch, n_k, heads_kv, d) of which sequence b uses the first lengths[b]:
    each batch entry a block of one packed sequence, its keys padded to n_k (BlockDiagonal(Causal)WithOffset
    PaddedKeysMask, causal aligned bottom-right) -> (out (batch, n_q, heads, d_v), lse (batch, heads, n_q))."""
    attn_bias, _, _ = _xformers()
    batch, n_q = q.shape[:2]
    mask = attn_bias.BlockDiagonalCausalWithOffsetPaddedKeysMask if causal else attn_bias.BlockDiagonalPaddedKeysMask
    bias = mask.from_seqlens(q_seqlen=[n_q] * batch, kv_padding=k.shape[1], kv_seqlen=lengths)
    out, lse = _split_k(q.flatten(0, 1)[None], k.flatten(0, 1)[None], v.flatten(0, 1)[None], bias, scale)
    return out.reshape(batch, n_q, *out.shape[-2:]), lse[0].unflatten(1, (batch, n_q)).transpose(0, 1)


def _check_shapes(q, k, v) -> None:
    """The protocol's shape rules on (batch, heads, n, d) tensors, then the operator's dtypes."""
    check_shapes(*(x.detach().numpy() for x in (q, k, v)), finite=False)
    _check_dtype(q)


def _check_dtype(q) -> None:
    if q.dtype.is_floating_point and q.dtype.itemsize != 2:
        raise AttentionInputError(f"q is {q.dtype}: xformers' split-k operator takes float16 or bfloat16 queries")


def xformers_splitk(q, k, v, *, scale=None, causal=False, return_lse=False):
    """The protocol's (batch, heads, n, d) through FwOp, each batch entry a block of one packed sequence when
    causal."""
    _check_shapes(q, k, v)
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    if causal:
        out, lse = _padded_blocks(q, k, v, [k.shape[1]] * q.shape[0], causal=True, scale=scale)
    else:
        out, lse = _split_k(q, k, v, None, scale)
    out = out.transpose(1, 2)
    return (out, lse) if return_lse else out


def xformers_splitk_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, scale=None,
                           causal=False, seqused_k=None, return_lse=False):
    """Packed (total, heads, d) through a gappy-keys block-diagonal mask: sequence i's keys start at
    cu_seqlens_k[i] and number seqused_k[i] (or the whole of its keys)."""
    import torch

    packing = check_packing(q.shape[0], k.shape[0], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            seqused_k)
    _check_shapes(*(x.transpose(0, 1)[None] for x in (q, k, v)))
    attn_bias, _, _ = _xformers()
    cu_q, cu_k = (list(map(int, cu)) for cu in (packing.cu_q, packing.cu_k))
    mask = attn_bias.BlockDiagonalCausalWithOffsetGappyKeysMask if causal else attn_bias.BlockDiagonalGappyKeysMask
    bias = mask.from_seqlens(q_seqlen=[b - a for a, b in itertools.pairwise(cu_q)], kv_seqstarts=cu_k,
                             kv_seqlen=[int(n) for n in packing.used_k])
    rows = cu_q[-1]
    out, lse = _split_k(q[None, :rows], k[None], v[None], bias, scale)
    tail = q.shape[0] - rows
    out = torch.cat([out.reshape(rows, *out.shape[-2:]), out.new_zeros((tail, *out.shape[-2:]))])
    lse = torch.cat([lse[0], lse.new_full((lse.shape[1], tail), -torch.inf)], dim=1)
    return (out, lse) if return_lse else out


def xformers_splitk_kvcache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens, scale=None, causal=False,
                            return_lse=False):
    """Decoding over a cache: the new keys and values written at cache_seqlens, then every sequence's keys as a block
    padded to the cache's length."""
    import torch

    layout = check_kv_cache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens)
    _check_dtype(q)
    with torch.no_grad():
        for b in range(layout.batch if k is not None else 0):
            where = tuple(torch.as_tensor(i) for i in layout.where(b, layout.written(b)))
            k_cache[where] = k[b]
            v_cache[where] = v[b]
    n_new = 0 if k is None else k.shape[1]
    out, lse = _padded_blocks(q, k_cache, v_cache, [int(s) + n_new for s in cache_seqlens], causal=causal,
                              scale=scale)
    return (out, lse) if return_lse else out


xformers_splitk = attention_impl(name="xformers-splitk", backend="peers", dtypes=("float16",), tensors="torch",
                                 differentiable=False, causal_alignment="bottom_right", lse=True, native=True,
                                 max_seq=interpreted_max_seq(),
                                 empty_sequences=False,
                                 faces=("dense", "varlen", "kvcache"),
                                 probe=installed("xformers", "triton", installer="tox -e triton-peers"))(
    xformers_splitk)
xformers_splitk.attention_varlen = xformers_splitk_varlen
xformers_splitk.attention_kvcache = xformers_splitk_kvcache
