"""torch.compile(flex_attention) on the CPU: after a shape change, a block mask whose mask_mod reads a tensor fails to
compile.

FlexAttention's documentation shows mask_mods that read captured tensors (document ids, a padding mask) and has
models call `torch.compile(flex_attention)`; torch.compile's default (dynamic=None) compiles the second shape it sees
with dynamic sizes. On the CPU that second compile fails in inductor's C++ flex template ("'cur_kvSplitSize…' was not
declared in this scope"); with dynamic=False, or a mask_mod reading no tensor, the same calls run.
Status: new for the CPU template (torch 2.13.0); pytorch #134560 was a dynamic-shape failure of flex with a block
mask on CUDA (closed).
"""
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

flex = torch.compile(flex_attention)


def visible(b, h, i, j):  # a mask_mod reading a tensor (`keep`, below), as a padding or document mask does
    return keep[b, h, i, j]


errors = []
for n_q, n_k in [(17, 17), (5, 33)]:
    q, k, v = torch.randn(1, 1, n_q, 48), torch.randn(1, 1, n_k, 48), torch.randn(1, 1, n_k, 48)
    keep = torch.rand(1, 1, n_q, n_k) > 0.3
    block_mask = create_block_mask(visible, 1, 1, n_q, n_k, device="cpu")
    try:
        flex(q, k, v, block_mask=block_mask)
    except Exception as error:  # torch._inductor.exc.InductorError (a CppCompileError)
        errors.append(str(error).splitlines()[0])
assert not errors, errors
