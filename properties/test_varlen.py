"""Variable-length batches beyond the seeds (issue 22, specs.varlen): packed sequences attend each alone.

Every dense property already reaches a varlen implementation packed among decoys (protocol.dense_adapters); these
check the face itself: packs of up to 16 sequences of very unequal lengths, 0 and 1 among them, with NaN rows past
cu_seqlens[-1] and NaN keys past seqused_k, and the packing arguments outside the protocol.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, reject
from hypothesis import strategies as st

from harness.api import CallFailed, backward_of
from harness.api.assertions import names
from harness.api.explain import judge_sequence_gradients
from harness.api.face_calls import call_face, expect_face_raised, face_output
from harness.api.markers import checks
from harness.api.reproducible import reproducible
from harness.api.trial import Trial
from properties.face_checks import check_sequence, source_problems
from specs.problems import Problem, build
from specs.tolerance import ToleranceUndefined, gradient_allowance
from specs.varlen import PackedInputs, pack_sequences, sequence_kwargs, to_dense

TAIL = 3  # rows past cu_seqlens[-1]


def _check_each_sequence(variant, data, fill: str) -> None:
    """A pack of up to 16 sequences of very unequal lengths, its unused positions filled with `fill`: each
    sequence's output and log-sum-exp against its own dense attention (properties.face_checks.check_sequence)."""
    problem = data.draw(source_problems(variant, "varlen", max_batch=16, max_n=40), label="problem")
    batch, n_q, n_k = problem.q.shape[0], problem.n_q, problem.n_k
    length = st.one_of(st.sampled_from((0, 1)), st.integers(0, 40))
    lengths_q = [min(n, n_q) for n in data.draw(st.lists(length, min_size=batch, max_size=batch), label="lengths_q")]
    lengths_k = [min(n, n_k) for n in data.draw(st.lists(length, min_size=batch, max_size=batch), label="lengths_k")]
    caps = variant.capabilities
    if not caps.empty_sequences:  # declared: every sequence has queries and keys
        lengths_q, lengths_k = ([max(n, 1) for n in lengths] for lengths in (lengths_q, lengths_k))
    check_each_sequence(variant, problem, lengths_q, lengths_k, fill)


@reproducible
def check_each_sequence(variant, problem: Problem, lengths_q: list[int], lengths_k: list[int], fill: str) -> None:
    """The pack of `problem`'s sequences at these lengths, its unused positions filled with `fill`: each sequence's
    output and log-sum-exp against its own dense attention (properties.face_checks.check_sequence)."""
    caps = variant.capabilities
    unused = 2 if caps.seqused_k else 0
    trial = Trial(variant, problem)
    packed = pack_sequences(*trial.inputs(), lengths_q, lengths_k, unused_k=unused, tail=TAIL, fill=fill)
    extra = {"return_lse": True} if caps.lse else {}
    raw = call_face(trial, "varlen", packed.arrays, {**packed.keywords, **problem.handed(variant.dtype).kwargs(),
                                                     **extra}, problem)
    out_raw, lse = raw if caps.lse else (raw, None)
    heads, d_v = problem.q.shape[1], problem.v.shape[-1]
    out = face_output(trial, out_raw, (len(packed.q), heads, d_v), problem)
    if lse is not None and tuple(lse.shape) != (heads, len(packed.q)):
        trial.fail(f"return_lse=True returned lse of shape {tuple(lse.shape)}, expected (heads, total_q) = "
                   f"{(heads, len(packed.q))}", problem)
    exact = trial.exact_inputs()
    for b, rows, _ in packed.packing().sequences():
        if rows.start == rows.stop:
            continue
        q, k, v = (x[b:b + 1, :, :n] for x, n in zip(exact, (lengths_q[b], lengths_k[b], lengths_k[b]), strict=True))
        got = out[rows].transpose(1, 0, 2)[None]
        check_sequence(trial, b, got, None if lse is None else lse[:, rows][None], (q, k, v), problem,
                       pack_keys=max(lengths_k))


@checks("varlen-is-each-sequence-alone")
@pytest.mark.requires("varlen")
@given(data=st.data())
def test_each_packed_sequence_attends_alone(variant, data):
    _check_each_sequence(variant, data, "garbage")


@checks("hidden-non-finite-never-reaches-output")
@pytest.mark.requires("varlen")
@given(data=st.data())
def test_nan_past_the_sequences_reaches_no_sequence(variant, data):
    """NaN in every row past cu_seqlens[-1] and every key past seqused_k: no sequence may see them, so none may
    show them (a pack's unused positions, as FlashAttention's varlen tests poison them)."""
    _check_each_sequence(variant, data, "nan")


def _bad_packings(packed: PackedInputs, seqused_k: bool) -> list[tuple[str, str, PackedInputs]]:
    """(what is wrong, the argument the error must name, the pack) for each way a packing breaks the protocol."""
    cu_q, cu_k = packed.cu_seqlens_q, packed.cu_seqlens_k
    bad = [
        ("a decreasing cu_seqlens_q", "cu_seqlens_q", dict(cu_seqlens_q=cu_q[[0, 2, 1, 3]])),
        ("a decreasing cu_seqlens_k", "cu_seqlens_k", dict(cu_seqlens_k=cu_k[[0, 2, 1, 3]])),
        ("cu_seqlens_k[-1] past the packed keys", "cu_seqlens_k",
         dict(cu_seqlens_k=np.append(cu_k[:-1], len(packed.k) + 1).astype(np.int32))),
        ("an int64 cu_seqlens_q", "cu_seqlens_q", dict(cu_seqlens_q=cu_q.astype(np.int64))),
        ("a cu_seqlens_k of batch entries, not batch + 1", "cu_seqlens", dict(cu_seqlens_k=cu_k[:-1])),
        ("a cu_seqlens_q that starts past 0", "cu_seqlens_q", dict(cu_seqlens_q=(cu_q + 1).astype(np.int32))),
        ("a max_seqlen_q below the longest sequence", "max_seqlen_q", dict(max_seqlen_q=1)),
        ("a max_seqlen_k below the longest sequence", "max_seqlen_k", dict(max_seqlen_k=1)),
    ]
    if seqused_k:
        bad.append(("a seqused_k past its sequence's keys", "seqused_k",
                    dict(seqused_k=(packed.seqused_k + 3).astype(np.int32))))
    return [(what, name, replace(packed, **change)) for what, name, change in bad]


@checks("varlen-rejects-bad-packing")
@pytest.mark.requires("varlen")
def test_bad_packings_raise_errors_naming_them(variant):
    caps = variant.capabilities
    problem = build(batch=3, heads=2, heads_kv=1 if caps.gqa else 2, n_q=4, n_k=5, d=8, d_v=8, seed=22)
    for what, _, _ in _bad_packings(_pack_of_three(Trial(variant, problem)), caps.seqused_k):
        check_bad_packing_refused(variant, problem, what)


def _pack_of_three(trial: Trial) -> PackedInputs:
    unused = 2 if trial.variant.capabilities.seqused_k else 0
    return pack_sequences(*trial.inputs(), [3, 2, 1], [2, 5, 3], unused_k=unused, tail=1, fill="garbage")


@reproducible
def check_bad_packing_refused(variant, problem: Problem, what: str) -> None:
    """The pack of `problem`'s three sequences broken as `what` says (_bad_packings): the varlen call raises, naming
    the argument."""
    trial = Trial(variant, problem)
    _, name, broken = next(bad for bad in _bad_packings(_pack_of_three(trial), variant.capabilities.seqused_k)
                           if bad[0] == what)
    summary = expect_face_raised(trial, "varlen", broken.arrays, broken.keywords, problem, what)
    if not names(summary, name):
        trial.fail(f"{what} raised an error that does not name {name}: {summary}", problem)


@checks("varlen-is-each-sequence-alone")
@pytest.mark.requires("varlen", "gradients")
@given(data=st.data())
def test_each_packed_sequence_has_its_own_gradients(variant, data):
    """dQ, dK, dV of a pack of up to 16 sequences of unequal lengths: each sequence's rows equal the gradients of
    its own dense attention within the gradient tolerance, and rows no sequence uses (past cu_seqlens[-1], keys
    past seqused_k, finite garbage) get gradient exactly 0 (varlen backward NaN: flash-attention #752, #1947)."""
    problem = data.draw(source_problems(variant, "varlen", max_batch=16, max_n=24), label="problem")
    batch, n_q, n_k = problem.q.shape[0], problem.n_q, problem.n_k
    caps = variant.capabilities
    smallest = 0 if caps.empty_sequences else 1
    lengths_q, lengths_k = (data.draw(st.lists(st.integers(smallest, n), min_size=batch, max_size=batch), label=label)
                            for n, label in ((n_q, "lengths_q"), (n_k, "lengths_k")))
    check_each_sequence_gradients(variant, problem, lengths_q, lengths_k)


@reproducible
def check_each_sequence_gradients(variant, problem: Problem, lengths_q: list[int], lengths_k: list[int]) -> None:
    """dQ, dK, dV of the pack of `problem`'s sequences at these lengths against each sequence's own dense backward,
    and exactly 0 on rows no sequence uses (test_each_packed_sequence_has_its_own_gradients)."""
    caps = variant.capabilities
    unused = 2 if caps.seqused_k else 0
    trial = Trial(variant, problem)
    packed = pack_sequences(*trial.inputs(), lengths_q, lengths_k, unused_k=unused, tail=TAIL, fill="garbage")
    d_out = np.random.default_rng(problem.recipe.seed).standard_normal(
        (len(packed.q), problem.q.shape[1], problem.v.shape[-1])).astype(trial.dtype)
    d_out[int(packed.cu_seqlens_q[-1]):] = 0
    face = replace(variant.impl, fn=variant.impl.face("varlen"))
    keywords = {"cu_seqlens_q": packed.cu_seqlens_q, "cu_seqlens_k": packed.cu_seqlens_k, **packed.keywords,
                **problem.handed(variant.dtype).kwargs()}
    try:
        grads = backward_of(face, packed.q, packed.k, packed.v, d_out, **keywords)
    except CallFailed as failure:
        trial.fail(failure.summary, problem)
    grads = [g.astype(np.float64) for g in grads]
    zero = [np.ones(len(x), bool) for x in (packed.q, packed.k, packed.v)]  # rows whose gradients must be 0
    exact = trial.exact_inputs()
    for b, rows, keys in packed.packing().sequences():
        if rows.start == rows.stop or keys.start == keys.stop:
            continue  # no query or no key: its rows take no part, and their gradients are 0
        zero[0][rows] = zero[1][keys] = zero[2][keys] = False
        sequence = tuple(x[b:b + 1, :, :n] for x, n in zip(exact, (lengths_q[b], lengths_k[b], lengths_k[b]),
                                                            strict=True))
        kwargs = sequence_kwargs(trial.oracle_kwargs(problem), b)
        try:
            oracle = gradient_allowance(*sequence, to_dense(d_out[rows].astype(np.float64)), dtype=trial.dtype,
                                        **kwargs)
        except ToleranceUndefined:
            reject()
        got = judge_sequence_gradients(trial, problem, sequence, to_dense(d_out[rows]), kwargs,
                                       tuple(to_dense(grad[where]) for grad, where in zip(grads, (rows, keys, keys),
                                                                                          strict=True)))
        for name, grad, exact_grad, allowance in zip(("dQ", "dK", "dV"), got, oracle.grads, oracle.allowances,
                                                     strict=True):
            trial.expect_close(grad, exact_grad, allowance, what=f"{name} of sequence {b}",
                               versus="the float64 oracle's backward", problem=problem)
    for name, grad, rows in zip(("dQ", "dK", "dV"), grads, zero, strict=True):
        if np.any(grad[rows] != 0):
            where = int(np.flatnonzero(rows)[np.argmax(np.any(grad[rows] != 0, axis=(1, 2)))])
            trial.fail(f"{name} is not 0 at packed row {where}, which takes no part in any sequence's attention: "
                       f"{grad[where].reshape(-1)[:4]}", problem)
