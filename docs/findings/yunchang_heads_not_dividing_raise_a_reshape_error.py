"""yunchang's Ulysses attention, given heads that do not divide among its ranks, raises a reshape error that does not
say what is wrong (one head on two ranks: "shape '[1, 2, 2, 0, 8]' is invalid for input of size 16").

Peer: yunchang 0.6.4 (UlyssesAttention, AttnType.FA) over flash-attn 2.8.3.post2's Triton backend, under triton
3.6.0's interpreter on the CPU, two ranks over gloo. Its all-to-all (SeqAllToAll4D) reshapes the heads into
(world size, heads / world size) without checking that the world size divides them; the reshape fails inside torch.
Ulysses cannot split one head over two ranks, so a refusal is right, but the error should name the heads (as it
should name the sequence length, which it does not check either). Status: new.
"""
import os

import torch


def rank_main(rank, errors):
    torch.distributed.init_process_group("gloo", init_method="tcp://127.0.0.1:29518", rank=rank, world_size=2)
    from flash_attn import flash_attn_interface as fa
    [op.register_kernel("cpu")(op._init_fn) for op in (fa._flash_attn_forward, fa._flash_attn_backward)]
    import yunchang
    layer = yunchang.UlyssesAttention(sequence_process_group=torch.distributed.group.WORLD,
                                      attn_type=yunchang.kernels.AttnType.FA)
    q, k, v = (torch.randn(1, 2, 1, 8) for _ in range(3))  # (batch, n_local, heads, d): one head
    try:
        layer(q, k, v)
    except RuntimeError as exc:
        errors[rank] = str(exc)


os.environ.update(TRITON_INTERPRET="1", FLASH_ATTENTION_TRITON_AMD_ENABLE="TRUE")
errors = torch.multiprocessing.Manager().dict()
torch.multiprocessing.start_processes(rank_main, args=(errors,), nprocs=2, start_method="fork")
print(dict(errors))
assert all("head" in message for message in errors.values()), "the error should say the heads do not divide"
