"""torch.compile(flex_attention) on the CPU accepts values of another length than the keys and returns an output.

Peer: torch (checked: 2.13.0), flex_attention under torch.compile, inductor's fused C++ kernel for the CPU. flex's
documentation has key and value share their sequence length (B, Hkv, S, E) and (B, Hkv, S, Ev); the compiled kernel
takes v with 2 positions beside k with 1 and returns an output, where a shape error is due (what a model passing a
stale value cache would need to see); its eager path refuses the call. Status: new (torch's CPU flash kernel for
SDPA does the same). Needs only torch.
"""
import torch
from torch.nn.attention.flex_attention import flex_attention

flex = torch.compile(flex_attention, dynamic=False)
q, k, v = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16), torch.randn(1, 1, 2, 16)  # 1 key, 2 values
try:
    out = flex(q, k, v)
    print("accepted k with 1 key and v with 2 values, returned", tuple(out.shape))
except Exception as error:  # a clear refusal is what the documented shapes call for
    out = None
    print("refused:", type(error).__name__, str(error).splitlines()[0])
assert out is None, "v of another length than k was accepted"
