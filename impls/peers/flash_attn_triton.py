"""flash-attn's Triton backend (flash-attn 2.8.3.post2, `FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE`): the public
flash_attn_func, flash_attn_varlen_func and flash_attn_with_kvcache with their Triton kernels beneath, under Triton's
interpreter where no GPU is (protocol.triton_interpreter chooses it before this module's import reaches flash-attn).

Running it on the CPU: the backend's operators are torch custom ops registered for CUDA only
(`device_types="cuda"`); the adapter registers the same Python functions for the CPU, so the calls reach the same
Triton kernels, launched under the interpreter. Nothing else of flash-attn is changed. The interpreter checks no
bounds: a store past a tensor writes into the process's heap (the varlen kernel's does, and malloc aborts), so the
record declares native code and its calls, every face's, run in a worker process (harness.engine.isolation).

The mapping, flash-attn's documented semantics: q, k, v (batch, n, heads, d) for the dense face (the protocol's
(batch, heads, n, d) transposed, a view), packed (total, heads, d) with int32 cu_seqlens for varlen, (batch, n_q,
heads, d) for the kv cache; `softmax_scale` None is 1/sqrt(d); causal is aligned bottom-right; window_size (left,
right) with -1 unbounded (the protocol's negative side); the LSE, natural log, (batch, heads, n_q) dense. The
backend returns the varlen LSE as (total_q, heads) and the kv cache's as (batch * heads, n_q), not the documented
(heads, total_q) and (batch, heads, n_q): the adapter puts them in the documented layouts
(docs/findings/flash_attn_triton_lse_layouts.py). d_v = d (value_dim False). Dropout has no seed the caller
chooses (dropout_p only).

What the adapter does not offer, and why: `alibi_slopes` (the backend asserts `alibi_slopes.is_cuda`: on the CPU it
cannot be called), the kv cache's `cache_leftpad`, `block_table` and `num_splits` (the backend's fwd_kvcache takes
them and never reads them: docs/findings/flash_attn_triton_kvcache_block_table_ignored.py), bfloat16 (the
interpreter multiplies bfloat16 `tl.dot` operands' raw bits, triton-lang/triton#11584). window_size and softcap are
offered, as flash-attn's API offers them: the backend ignores both (its rows in impls/expectations.toml).
"""

from __future__ import annotations

import functools
import os

from impls.peers.availability import installed
from impls.score_mod_checks import checked_mods
from protocol.registry import attention_impl
from protocol.triton_interpreter import interpret_without_gpu, interpreted_max_seq
from specs.kv_cache import check_kv_cache
from specs.validation import AttentionInputError
from specs.varlen import check_packing

PROBE = installed("flash_attn", "triton", installer="tox -e triton-peers")


@functools.cache
def _flash_attn():
    """flash_attn with its Triton backend, its CUDA-only custom ops also registered for the CPU."""
    interpret_without_gpu()  # a record imported by name (a test) decides too, before Triton is
    os.environ["FLASH_ATTENTION_TRITON_AMD_ENABLE"] = "TRUE"  # read when flash_attn_interface is imported
    import flash_attn
    from flash_attn import flash_attn_interface
    from torch._library.custom_ops import CustomOpDef

    if not flash_attn_interface.USE_TRITON_ROCM:
        raise RuntimeError("flash_attn was imported before its Triton backend was chosen "
                           "(FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE): import the record first")
    for op in vars(flash_attn_interface).values():
        if isinstance(op, CustomOpDef):
            op.register_kernel("cpu")(op._init_fn)
    return flash_attn


def _window(window_size) -> tuple[int, int]:
    """The protocol's window (None, or sides with negative = unbounded) as flash-attn's (-1 = unbounded)."""
    if window_size is None:
        return (-1, -1)
    return tuple(-1 if side < 0 else int(side) for side in window_size)


def _checked_dense(q, k, v, window_size, softcap):
    checked_mods(q, k, v, window_size=window_size, softcap=softcap)
    if v.shape[-1] != q.shape[-1]:
        raise AttentionInputError(f"v's head dim {v.shape[-1]} differs from q's {q.shape[-1]}: flash-attn takes "
                                  "d_v = d")


def flash_attn_triton(q, k, v, *, scale=None, causal=False, dropout_p=0.0, window_size=None, softcap=0.0,
                      return_lse=False):
    """flash_attn_func on the protocol's (batch, heads, n, d) tensors."""
    _checked_dense(q, k, v, window_size, softcap)
    flash_attn = _flash_attn()
    out, lse, _ = flash_attn.flash_attn_func(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), dropout_p=dropout_p, softmax_scale=scale,
        causal=causal, window_size=_window(window_size), softcap=softcap, return_attn_probs=True)
    out = out.transpose(1, 2)
    return (out, lse) if return_lse else out


def flash_attn_triton_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, scale=None,
                             causal=False, dropout_p=0.0, window_size=None, softcap=0.0, return_lse=False):
    """flash_attn_varlen_func on packed (total, heads, d) tensors; its LSE comes back as (total_q, heads) and is
    returned in the documented (heads, total_q)."""
    import torch

    check_packing(q.shape[0], k.shape[0], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    _checked_dense(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], window_size, softcap)
    flash_attn = _flash_attn()
    out, lse, _ = flash_attn.flash_attn_varlen_func(
        q, k, v, torch.as_tensor(cu_seqlens_q, dtype=torch.int32), torch.as_tensor(cu_seqlens_k, dtype=torch.int32),
        int(max_seqlen_q), int(max_seqlen_k), dropout_p=dropout_p, softmax_scale=scale, causal=causal,
        window_size=_window(window_size), softcap=softcap, return_attn_probs=True)
    return (out, lse.transpose(0, 1)) if return_lse else out


def flash_attn_triton_kvcache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens, cache_batch_idx=None,
                              scale=None, causal=False, return_lse=False):
    """flash_attn_with_kvcache; its LSE comes back as (batch * heads, n_q), batch-major, and is returned in the
    documented (batch, heads, n_q)."""
    import torch

    check_kv_cache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx)
    if v_cache.shape[-1] != q.shape[-1]:
        raise AttentionInputError(f"v_cache's head dim {v_cache.shape[-1]} differs from q's {q.shape[-1]}: "
                                  "flash-attn takes d_v = d")
    flash_attn = _flash_attn()
    index = None if cache_batch_idx is None else torch.as_tensor(cache_batch_idx, dtype=torch.int32)
    out, lse = flash_attn.flash_attn_with_kvcache(
        q, k_cache, v_cache, k, v, cache_seqlens=torch.as_tensor(cache_seqlens, dtype=torch.int32),
        cache_batch_idx=index, softmax_scale=scale, causal=causal, return_softmax_lse=True)
    return (out, lse.reshape(q.shape[0], q.shape[2], q.shape[1])) if return_lse else out


flash_attn_triton = attention_impl(name="flash-attn-triton", backend="peers", dtypes=("float32", "float16"),
                                   tensors="torch", causal_alignment="bottom_right", value_dim=False, lse=True,
                                   native=True, max_seq=interpreted_max_seq(),
                                   faces=("dense", "varlen", "kvcache"), probe=PROBE)(flash_attn_triton)
flash_attn_triton.attention_varlen = flash_attn_triton_varlen
flash_attn_triton.attention_kvcache = flash_attn_triton_kvcache
