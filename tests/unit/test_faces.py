"""The varlen and kv-cache faces (issue 22): the loader reads them, the specification's checks name the argument
at fault, the oracles equal per-sequence dense attention, and the dense adapters hand the implementation what the
protocol says and catch what a dense output cannot show."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from protocol.dense_adapters import DECOY_LENGTHS, FaceCheckFailed
from protocol.registry import ImplLoadError, load_impl
from specs.kv_cache import build_cache, check_kv_cache, kv_cache_attention
from specs.reference import attention
from specs.validation import AttentionInputError
from specs.varlen import check_packing, pack_sequences, packing_of, to_dense, varlen_attention
from tests.fixtures import face_impls

FIXTURES = "tests/fixtures/face_impls.py"


def _dense(seed: int = 0, batch: int = 3, heads: int = 4, heads_kv: int = 2, n_q: int = 5, n_k: int = 7):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, heads, n_q, 8)), rng.standard_normal((batch, heads_kv, n_k, 8)),
            rng.standard_normal((batch, heads_kv, n_k, 6)))


# -- the loader -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "message"), [
    ("varlen_in_the_wrong_order", "takes q, k, v, cu_seqlens_q"),
    ("varlen_with_a_bias", "belong to the dense face only"),
    ("dense_then_varlen_without_its_function", "has no fn.attention_varlen"),
    ("kv_cache_aligned_top_left", "aligns causal bottom-right"),
    ("unknown_face", "must be distinct names among"),
])
def test_faces_outside_the_protocol_are_load_errors(name, message):
    with pytest.raises(ImplLoadError, match=message):
        load_impl(f"{FIXTURES}:{name}")


def test_a_varlen_first_record_has_a_dense_face_and_its_own():
    impl = load_impl("zoo/correct_faces.py:varlen_padded_and_masked")
    caps = impl.capabilities
    assert caps.varlen and not caps.kvcache and caps.seqused_k and not caps.mask and caps.causal
    assert impl.face("varlen").__name__ == "varlen_padded_and_masked"
    assert impl.fn is not impl.face("varlen")
    assert list(inspect.signature(impl.fn).parameters)[:3] == ["q", "k", "v"]
    with pytest.raises(ValueError, match="offers the faces"):
        impl.face("kvcache")


def test_the_torch_record_offers_both_faces():
    pytest.importorskip("torch")
    impl = load_impl("impls.torch.torch_flash_varlen:flash_attn_varlen")
    assert (impl.name, impl.backend) == ("torch-flash-varlen", "torch")  # read from the record, not its adapter
    assert impl.capabilities.faces == ("varlen", "kvcache")
    assert impl.capabilities.block_table and impl.capabilities.cache_leftpad and not impl.capabilities.num_splits


# -- the specification --------------------------------------------------------------------------------------------
def test_bad_packings_name_their_argument():
    cu = np.array([0, 2, 5], np.int32)
    with pytest.raises(AttentionInputError, match="cu_seqlens_q must be non-decreasing"):
        check_packing(5, 5, np.array([0, 3, 2], np.int32), cu, 3, 3)
    with pytest.raises(AttentionInputError, match=r"cu_seqlens_k\[-1\] = 5 is past"):
        check_packing(5, 4, cu, cu, 3, 3)
    with pytest.raises(AttentionInputError, match="cu_seqlens_q must be an int32 array"):
        check_packing(5, 5, cu.astype(np.int64), cu, 3, 3)
    with pytest.raises(AttentionInputError, match="both must be batch \\+ 1"):
        check_packing(5, 5, cu, cu[:2], 3, 3)
    with pytest.raises(AttentionInputError, match="max_seqlen_k = 2 is less than the longest sequence, 3"):
        check_packing(5, 5, cu, cu, 3, 2)
    with pytest.raises(AttentionInputError, match=r"seqused_k\[1\] = 4 is outside 0..3"):
        check_packing(5, 5, cu, cu, 3, 3, np.array([1, 4], np.int32))


def test_the_varlen_oracle_is_each_sequence_alone():
    q, k, v = _dense()
    lengths_q, lengths_k = [2, 0, 5], [0, 3, 7]
    packed = pack_sequences(q, k, v, lengths_q, lengths_k, unused_k=2, tail=3)
    assert packed.cu_seqlens_q.tolist() == [0, 2, 2, 7] and packed.cu_seqlens_k.tolist() == [0, 2, 7, 16]
    assert np.isnan(packed.q[7:]).all() and np.isnan(packed.k[[0, 1, 5, 6, 14, 15, 16, 17, 18]]).all()
    out, lse = varlen_attention(packed.q, packed.k, packed.v, packed.packing(), causal=True)
    assert np.all(out[0:2] == 0) and np.all(lse[:, 0:2] == -np.inf)  # the first sequence has no key
    expected = attention(q[2:3, :, :5], k[2:3], v[2:3], causal=True, causal_alignment="bottom_right")
    np.testing.assert_allclose(out[2:7], expected.out[0].swapaxes(0, 1), rtol=1e-12)
    np.testing.assert_allclose(lse[:, 2:7], expected.lse[0], rtol=1e-12)
    assert np.all(out[7:] == 0)


def test_each_packed_row_has_its_place_and_rows_no_sequence_uses_have_none():
    q, k, v = _dense()
    packed = pack_sequences(q, k, v, [2, 0, 5], [0, 3, 7], unused_k=2, tail=3)
    packing = packing_of(*packed.arrays, **packed.keywords)
    sequence, position = packing.places(len(packed.q))
    assert sequence.tolist() == [0, 0, 2, 2, 2, 2, 2, -1, -1, -1] and position.tolist()[:7] == [0, 1, 0, 1, 2, 3, 4]
    sequence, position = packing.places(len(packed.k), keys=True)
    assert np.flatnonzero(sequence < 0).tolist() == [0, 1, 5, 6, 14, 15, 16, 17, 18]  # NaN-poisoned, unused
    assert sequence[2:5].tolist() == [1] * 3 and position[7:14].tolist() == list(range(7))
    with pytest.raises(AttentionInputError, match=r"v must be packed \(total, heads, dim\), got shape"):
        packing_of(packed.q, packed.k, packed.v[0], *packed.arrays[3:], **packed.keywords)


def test_bad_caches_name_their_argument():
    q, k, v = _dense()
    built = build_cache(q, k, v, lengths_k=[7, 3, 5], n_new=1, page_size=2)
    kwargs = dict(built.keywords)
    table = kwargs["block_table"].copy()
    table[1, 0] = len(built.k_cache)
    with pytest.raises(AttentionInputError, match=r"block_table\[1, 0\] = \d+ is not a page of the cache"):
        check_kv_cache(*built.arrays, **{**kwargs, "block_table": table})
    table = kwargs["block_table"].copy()
    table[1, -1] = -5  # past sequence 1's pages: never read, so anything goes
    check_kv_cache(*built.arrays, **{**kwargs, "block_table": table})
    with pytest.raises(AttentionInputError, match=r"cache_seqlens\[0\] = 99 plus 1 new keys is past"):
        check_kv_cache(*built.arrays, **{**kwargs, "cache_seqlens": np.array([99, 2, 4], np.int32)})
    with pytest.raises(AttentionInputError, match="cache_batch_idx and block_table exclude each other"):
        check_kv_cache(*built.arrays, **kwargs, cache_batch_idx=np.zeros(3, np.int32))
    with pytest.raises(AttentionInputError, match="k and v must be given together"):
        check_kv_cache(built.q, built.k_cache, built.v_cache, built.k, None, **kwargs)


@pytest.mark.parametrize("layout", [dict(page_size=1), dict(page_size=16), dict(page_size=3, leftpad=[1, 0, 2]),
                                    dict(spare_rows=2, leftpad=[2, 1, 0]), {}])
def test_the_kv_cache_oracle_is_dense_attention_over_the_slots(layout):
    q, k, v = _dense(seed=3)
    built = build_cache(q, k, v, lengths_k=[7, 2, 5], n_new=2, **layout)
    assert np.isnan(built.k_cache).any()  # padding, spare slots and pages are NaN
    out, lse = kv_cache_attention(*built.arrays, built.layout, causal=True)
    for b, n_k in enumerate([7, 2, 5]):
        expected = attention(q[b:b + 1], k[b:b + 1, :, :n_k], v[b:b + 1, :, :n_k], causal=True,
                             causal_alignment="bottom_right")
        np.testing.assert_allclose(out[b], expected.out[0].swapaxes(0, 1), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(lse[b], expected.lse[0], rtol=1e-12)
        where = built.layout.where(b, built.layout.slots(b))
        after_k = built.expected_caches()[0]
        np.testing.assert_array_equal(to_dense(after_k[where])[0], k[b, :, :n_k])


# -- the dense adapters -------------------------------------------------------------------------------------------
def test_the_adapter_packs_decoys_of_lengths_zero_and_one():
    assert {0, 1} <= {n for pair in DECOY_LENGTHS[:2] for n in pair}
    impl = load_impl("tests.fixtures.face_impls:varlen_recording")
    q, k, v = _dense()
    out = impl.fn(q, k, v, causal=True)
    expected = attention(q, k, v, causal=True, causal_alignment="bottom_right")
    np.testing.assert_allclose(out, expected.out, rtol=1e-12)
    seen = face_impls.RECORDED
    lengths_q = np.diff(seen["cu_seqlens_q"]).tolist()
    assert lengths_q == [1, 5, 0, 5, 1, 5, 3]  # decoy, sequence, decoy, ...
    assert np.isnan(seen["q"][-3:]).all() and seen["seqused_k"].tolist() == [0, 7, 1, 7, 1, 7, 7]


def test_the_adapter_catches_a_varlen_right_only_at_equal_lengths():
    impl = load_impl("zoo/wrong_faces.py:varlen_equal_lengths_only")
    q, k, v = _dense()
    with pytest.raises(FaceCheckFailed, match="decoy sequence 0 of the pack has no key, but its output is not 0"):
        impl.fn(q, k, v)


def test_the_adapter_catches_a_cache_right_only_at_equal_lengths():
    impl = load_impl("zoo/wrong_faces.py:cache_equal_lengths_only")
    q, k, v = _dense()
    with pytest.raises(FaceCheckFailed, match=r"decoy sequence 3 of the cache \(n_q=5, n_k=10\) differs from the"):
        impl.fn(q, k, v)


def test_the_adapter_catches_a_cache_slot_it_must_not_touch():
    impl = load_impl("zoo/wrong_faces.py:cache_clears_slots_past_the_end")
    q, k, v = _dense()
    with pytest.raises(FaceCheckFailed, match=r"k_cache\[.*\] after the call is .*0\.0.*, expected .*nan"):
        impl.fn(q, k, v)
    correct = load_impl("zoo/correct_faces.py:paged_cache_gathered")
    np.testing.assert_allclose(correct.fn(q, k, v, causal=True),
                               attention(q, k, v, causal=True, causal_alignment="bottom_right").out, rtol=1e-12)


def test_the_kv_cache_adapter_rejects_keys_and_values_of_other_lengths():
    impl = load_impl("zoo/correct_faces.py:paged_cache_gathered")
    q, k, v = _dense()
    with pytest.raises(AttentionInputError, match="k has n_k=7 keys but v has 6 values"):
        impl.fn(q, k, v[:, :, :6])
