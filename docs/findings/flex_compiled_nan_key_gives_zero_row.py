"""torch.compile(flex_attention) on the CPU returns 0, not NaN, for a query whose every score is NaN.

Peer: torch (checked: 2.13.0), flex_attention under torch.compile, inductor's fused C++ kernel for the CPU. With one
key holding NaN, each row's only score is NaN; flex's eager path and SDPA's MATH kernel return NaN, the compiled
kernel returns a row of zeros, as for a row that sees no key, so the NaN is replaced by a plausible output instead of
propagating. Status: new (torch's CPU flash kernel for SDPA does the same). Needs only torch.
"""
import torch
from torch.nn.attention.flex_attention import flex_attention

flex = torch.compile(flex_attention, dynamic=False)
torch.manual_seed(0)
q, k, v = torch.randn(1, 1, 2, 16), torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)  # one key
k[0, 0, 0] = float("nan")  # every score is NaN
out = flex(q, k, v)
print("compiled:", out[0, 0, :, 0].tolist(), " eager:", flex_attention(q, k, v)[0, 0, :, 0].tolist())
assert out.isnan().all(), "a NaN the row sees should reach its output"
