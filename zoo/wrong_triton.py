"""Deliberately wrong Triton FlashAttention kernels: one mistake each in a copy of impls/triton/flash_kernels.py
(zoo/triton_copies.py makes the copy and the record), the mistakes Triton kernels are known for: a load or a store
without its boundary mask (the interpreter checks no bounds; on a GPU they read or write a neighbour's memory), a
backward reading the wrong tile, the online softmax's rescale forgotten, the causal diagonal off by one, a
derivative dropped. zoo/catches.toml says what each must break; tests/triton/test_triton_zoo.py requires each
caught exactly (tox -e triton)."""

from __future__ import annotations

from zoo.triton_copies import record

NEXT_AFTER_VALUE_LOAD = "other=0.0).to(tl.float32)\n        new_max"

triton_value_load_unmasked = record(
    __name__, "triton_value_load_unmasked",
    "the forward loads its V tile without the key-boundary mask: past n_k it reads whatever follows V in memory",
    ((f"mask=seen[:, None] & (vdims[None, :] < d_v), {NEXT_AFTER_VALUE_LOAD}",
      f"mask=vdims[None, :] < d_v, {NEXT_AFTER_VALUE_LOAD}"),))

triton_output_store_unmasked = record(
    __name__, "triton_output_store_unmasked",
    "the forward stores its output tile without the row mask: a tile past n_q writes past the output",
    (("acc.to(Out.dtype.element_ty),\n             mask=row_ok[:, None] & (vdims[None, :] < d_v))",
      "acc.to(Out.dtype.element_ty),\n             mask=vdims[None, :] < d_v)"),))

triton_dk_from_first_query_tile = record(
    __name__, "triton_dk_from_first_query_tile",
    "the backward accumulates dK and dV of a key tile from its first query tile at every step of the loop",
    (("        rows = row0 + tl.arange(0, BLOCK_M)\n", "        rows = start + tl.arange(0, BLOCK_M)\n"),))

triton_unrescaled_output = record(
    __name__, "triton_unrescaled_output",
    "the forward does not rescale its output accumulator when a later key tile raises a row's maximum",
    (("acc = acc * rescale[:, None] + tl.dot(p, v,", "acc = acc + tl.dot(p, v,"),))

triton_diagonal_hidden = record(
    __name__, "triton_diagonal_hidden",
    "the window's right bound is exclusive: causal hides each query's own key (the diagonal)",
    (("(past <= right))", "(past < right))"),))

triton_softcap_derivative_dropped = record(
    __name__, "triton_softcap_derivative_dropped",
    "the backward forgets softcap's derivative 1 - tanh^2 on dS",
    (("        d_s = d_s * (1.0 - capped * capped)\n", "        d_s = d_s + 0.0 * capped\n"),))
