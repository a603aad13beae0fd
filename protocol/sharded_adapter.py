"""Every dense property reaches a sharded implementation (issue 39): the dense call split among the ranks of a
process group, run there, and put back together.

q (batch, heads, n_q, d), k and v are cut along their sequence axes by the implementation's layout (specs.sharding:
contiguous, zigzag or stripe, queries and keys each by their own length) for a group of `world_size` ranks
(protocol.rank_pool); each rank runs the sharded face on its shards, and the outputs (and LSE) come back in global
order. The result is a torch autograd function: its backward sends the cotangents' shards to the same ranks, which run
the call again with autograd and return their dQ, dK, dV shards (nothing is kept in the ranks between calls).

`world_size` is the adapter's own keyword: a property of the sharded face asks for a group size; otherwise the
largest of 4, 3, 2 that leaves no rank without positions (with even_shards: that divides both lengths evenly; with
heads_divisible: that divides the heads) is taken, 1 where none does (one rank holds the whole sequence: there are no
shards to make equal). Under Triton's interpreter (a record that declares the interpreted max_seq) every kernel program
runs in Python: a ring's W ranks each launch W steps over batch x heads programs (an all-to-all's, one step over their
share of the heads), so the largest group is taken whose programs stay within
protocol.triton_interpreter.INTERPRETED_SHARDED_PROGRAMS (or the one rank's, where that is more): the statistical
properties' samples of 1,024 to 2,000 batch entries run on fewer ranks rather than past the call limit.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from protocol.rank_pool import POOL, POOL_SIZE
from protocol.triton_interpreter import INTERPRETED_SHARDED_PROGRAMS, interpreting
from specs.sharding import divides_evenly, shard, unshard
from specs.validation import AttentionInputError, check_shapes

ADAPTER_KEYWORD = "world_size"


def _even(world: int, shape, layout: str) -> bool:
    return divides_evenly(shape.n_q, world, layout) and divides_evenly(shape.n_k, world, layout)


def _world_fits(world: int, shape, caps) -> bool:
    if world == 1:
        return True
    if caps.heads_divisible and shape.heads % world:
        return False
    if caps.even_shards:
        return _even(world, shape, caps.sharding)
    return shape.n_q >= world and shape.n_k >= world


def _interpreted_programs(world: int, shape, caps) -> int:
    """The (batch, head) programs the ranks of a group of `world` launch together for a call of this shape."""
    steps = world if caps.ring_merge else 1
    heads = shape.heads // world if caps.heads_divisible else shape.heads
    return world * steps * shape.batch * heads


def group_size(shape, caps, asked: int | None) -> int:
    """The group a dense call of this shape runs on: `asked`, checked, or the largest that fits (the module's
    docstring)."""
    if asked is None:
        budget = (max(INTERPRETED_SHARDED_PROGRAMS, _interpreted_programs(1, shape, caps))
                  if interpreting() and caps.max_seq is not None else None)
        return next(w for w in range(POOL_SIZE, 0, -1) if _world_fits(w, shape, caps) and (
            budget is None or _interpreted_programs(w, shape, caps) <= budget))
    if isinstance(asked, bool) or not isinstance(asked, int) or not 1 <= asked <= POOL_SIZE:
        raise AttentionInputError(f"world_size must be an integer from 1 to {POOL_SIZE}, got {asked!r}")
    if caps.even_shards and asked > 1 and not _even(asked, shape, caps.sharding):
        raise AttentionInputError(f"world_size={asked}: the {caps.sharding} layout does not split n_q={shape.n_q} "
                                  f"and n_k={shape.n_k} into equal shards, which this implementation needs "
                                  "(even_shards)")
    return asked


def _numpy(x) -> np.ndarray:
    from protocol.torch_convert import to_numpy  # bfloat16 as ml_dtypes' NumPy dtype

    return to_numpy(x.detach().contiguous())


def _shards(arrays, world: int, layout: str) -> list[tuple]:
    """Rank r's shard of each array (None stays None)."""
    split = [[None] * world if x is None else shard(x, world, layout) for x in arrays]
    return [tuple(pieces[rank] for pieces in split) for rank in range(world)]


def over_ranks(target: str, caps) -> Callable:
    """The dense function of the sharded implementation `target` with capabilities `caps` (the module's
    docstring)."""
    import torch

    from protocol.torch_convert import as_tensor

    layout = caps.sharding

    class OverRanks(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, world, keywords):
            arrays = tuple(_numpy(x) for x in (q, k, v))
            results = POOL.run(target, world, _shards(arrays, world, layout), keywords)
            ctx.arrays, ctx.world, ctx.keywords = arrays, world, keywords
            out = as_tensor(unshard([r.out for r in results], q.shape[2], layout))
            if not keywords.get("return_lse"):
                return out
            lse = as_tensor(unshard([r.lse[..., None] for r in results], q.shape[2], layout)[..., 0])
            return out, lse

        @staticmethod
        def backward(ctx, d_out, d_lse=None):
            cotangents = _shards((_numpy(d_out), None if d_lse is None else _numpy(d_lse)[..., None]), ctx.world,
                                 layout)
            cotangents = [(d, None if dl is None else dl[..., 0]) for d, dl in cotangents]
            results = POOL.run(target, ctx.world, _shards(ctx.arrays, ctx.world, layout), ctx.keywords, cotangents)
            grads = [unshard([r.grads[i] for r in results], x.shape[2], layout) for i, x in enumerate(ctx.arrays)]
            return (*(as_tensor(g) for g in grads), None, None)

    def dense(q, k, v, *, world_size: int | None = None, **keywords):
        if not all(isinstance(x, torch.Tensor) for x in (q, k, v)):
            raise AttentionInputError("a sharded implementation takes torch tensors q, k, v")
        shape = check_shapes(*(_numpy(x) for x in (q, k, v)), finite=False)
        world = group_size(shape, caps, world_size)
        return OverRanks.apply(q, k, v, world, keywords)

    return dense


def dense_over_ranks(fn: Callable, target: str, caps) -> Callable:
    """fn's dense face: the sharded face `fn` of `target` through the ranks, with a dense signature (q, k, v, fn's
    keyword-only parameters but the group, and world_size)."""
    adapted = over_ranks(target, caps)
    positional = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in ("q", "k", "v")]
    keywords = [p for name, p in inspect.signature(fn).parameters.items() if p.kind == p.KEYWORD_ONLY
                and name != "group"]
    keywords.append(inspect.Parameter(ADAPTER_KEYWORD, inspect.Parameter.KEYWORD_ONLY, default=None))
    adapted.__signature__ = inspect.Signature(positional + keywords)
    adapted.__doc__ = f"{fn.__qualname__}'s sharded face over a process group, called with dense problems."
    adapted.__wrapped_face__ = fn
    return adapted
