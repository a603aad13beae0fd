"""liger-kernel's fused neighbourhood attention (`liger_kernel.transformers.functional.
liger_fused_neighborhood_attention`, Triton kernels) as models call it, under Triton's interpreter where no GPU is
(protocol.triton_interpreter chooses it before this module's import reaches liger).

Liger's documented semantics: q, k, v (batch, heads, seq_len, head_dim), one length and one head count for all
three, d_v = d (the record declares cross, gqa and value_dim False); `scale` None means 1/sqrt(d); query i sees the
keys within kernel_size // 2 of position i (kernel_size odd, dilation 1 here). So the protocol's window (w, w) is
kernel_size 2w + 1, no window is a neighbourhood wider than the sequence (2n + 1), and a window of unequal or
unbounded sides is not a neighbourhood: the adapter refuses it by name. Autograd reaches q, k, v through liger's own
backward. Its forward calls run in a worker process (declared native: the interpreter checks no bounds, and a store
past a tensor would corrupt the pytest process's heap). Float32 and float16: the interpreter multiplies bfloat16
`tl.dot` operands' raw bits (triton-lang/triton#11584), and liger's kernels dot bfloat16 tiles as they are, so
bfloat16 says nothing about liger here.
"""

from __future__ import annotations

from impls.peers.availability import installed
from impls.score_mod_checks import checked_mods
from protocol.registry import attention_impl
from protocol.triton_interpreter import interpreted_max_seq
from specs.validation import AttentionInputError


@attention_impl(name="liger-neighborhood", backend="peers", dtypes=("float32", "float16"), tensors="torch",
                causal_alignment="top_left", cross=False, gqa=False, value_dim=False, native=True,
                max_seq=interpreted_max_seq(),
                probe=installed("liger_kernel", "triton", installer="tox -e triton-peers"))
def liger_neighborhood_attention(q, k, v, *, scale=None, window_size=None):
    from liger_kernel.transformers.functional import liger_fused_neighborhood_attention

    window = checked_mods(q, k, v, window_size=window_size).window
    n = q.shape[2]
    if window is None:
        kernel_size = 2 * n + 1
    elif window[0] == window[1] >= 0:
        kernel_size = 2 * window[0] + 1
    else:
        raise AttentionInputError(f"window_size={window}: liger's neighbourhood is symmetric and bounded (left == "
                                  "right >= 0)")
    return liger_fused_neighborhood_attention(q, k, v, kernel_size=kernel_size, dilation=1, scale=scale)
