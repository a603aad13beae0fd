"""transformers' gpt-oss eager attention turns every row of a head whose sink is +inf into NaN, where the sink
should take the whole row (weight 0 on every key, output 0).

Peer: transformers (checked: 5.25.0, torch 2.13.0), models.gpt_oss.modeling_gpt_oss.eager_attention_forward. The
sink joins the softmax's denominator as one more logit; before the softmax the function subtracts the row's maximum
over the scores and the sink (a guard against bfloat16 overflow). With a sink of +inf that maximum is +inf, the
sink's own logit becomes inf - inf = NaN, and the whole row is NaN in every dtype, gradients too. The limit the
protocol asks for is finite: exp(s_j) / (exp(s_j) + exp(sink)) -> 0. A large learned sink (1e4 in bfloat16) is
finite and fine; an infinite one arrives from an overflowed parameter or from a user who writes "always attend to
the sink" as +inf. Status: new. Needs only transformers, torch and NumPy.
"""
from types import SimpleNamespace

import torch
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

torch.manual_seed(0)
q, k, v = (torch.randn(1, 2, 3, 4, dtype=torch.float64) for _ in range(3))
sinks = torch.tensor([float("inf"), 0.0], dtype=torch.float64)  # head 0's sink takes everything, head 1's is 0
module = SimpleNamespace(num_key_value_groups=1, training=False, sinks=sinks)
out, _ = eager_attention_forward(module, q, k, v, None, scaling=0.5)
print("head 0 (sink +inf):", out[0, :, 0].tolist())
print("head 1 (sink 0):   ", out[0, :, 1].tolist())
assert torch.all(out[0, :, 0] == 0), "a row whose sink is +inf should give 0"
