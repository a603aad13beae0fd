"""The oracle's score modifications beyond the seeds (specs.score_mods): closed forms and the limits each keyword
must reach (a window of 0/0 is one key, a window wider than the sequence is none, softcap -> infinity is none and a
cap bounds every score, ALiBi is the bias it denotes, a sink of -inf is none and one of +inf zeroes the output, a
sink is an extra key of zero value), and a clear error for every bad value."""

from __future__ import annotations

import numpy as np
import pytest

from impls.numpy.numpy_tiled import tiled_attention
from specs.gradients import attention_backward, score_mod_gradients
from specs.reference import attention
from specs.validation import AttentionInputError

RNG = np.random.default_rng(21)


def qkv(n_q=5, n_k=7, batch=2, heads=4, heads_kv=2, d=8, d_v=3):
    return (RNG.normal(size=(batch, heads, n_q, d)), RNG.normal(size=(batch, heads_kv, n_k, d)),
            RNG.normal(size=(batch, heads_kv, n_k, d_v)))


def same(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True) for f in ("out", "weights", "lse"))


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
@pytest.mark.parametrize("n_q, n_k", [(5, 5), (3, 7), (7, 3)])
def test_a_window_of_zero_zero_is_the_one_key_on_the_diagonal(alignment, n_q, n_k):
    q, k, v = qkv(n_q, n_k, heads=2)
    result = attention(q, k, v, window_size=(0, 0), causal_alignment=alignment)
    offset = 0 if alignment == "top_left" else n_k - n_q
    for i in range(n_q):
        j = i + offset
        if 0 <= j < n_k:
            np.testing.assert_allclose(result.out[:, :, i], v[:, :, j], rtol=1e-15)
            assert np.all(result.weights[:, :, i, j] == 1.0)
        else:  # a window outside the keys: the row sees nothing
            assert np.all(result.out[:, :, i] == 0) and np.all(result.lse[:, :, i] == -np.inf)


@pytest.mark.parametrize("causal", [False, True])
def test_a_window_wider_than_the_sequence_is_no_window(causal):
    q, k, v = qkv(6, 9)
    plain = attention(q, k, v, causal=causal)
    for window in [(9, 9), (100, 3 if causal else 100), (-1, -1), (-1, 50), (50, -1)]:
        assert same(attention(q, k, v, causal=causal, window_size=window), plain), window


def test_causal_bounds_the_window_on_the_right_at_zero():
    q, k, v = qkv(8, 8)
    for left in (0, 2, -1):
        expected = attention(q, k, v, window_size=(left, 0))
        for right in (0, 3, -1):
            assert same(attention(q, k, v, causal=True, window_size=(left, right)), expected), (left, right)


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_a_window_is_the_mask_of_its_band(alignment):
    q, k, v = qkv(6, 11)
    offset = 0 if alignment == "top_left" else 11 - 6
    past = np.arange(11)[None, :] - (np.arange(6)[:, None] + offset)
    band = (past >= -2) & (past <= 1)
    assert same(attention(q, k, v, window_size=(2, 1), causal_alignment=alignment),
                attention(q, k, v, mask=np.broadcast_to(band, (2, 4, 6, 11))))


def test_softcap_bounds_every_score_and_none_at_zero_or_below():
    q, k, v = qkv()
    q *= 10
    plain = attention(q, k, v)
    capped = attention(q, k, v, softcap=2.5)
    assert np.abs(plain.scores).max() > 2.5 and np.abs(capped.scores).max() <= 2.5
    np.testing.assert_allclose(capped.scores, 2.5 * np.tanh(plain.scores / 2.5), rtol=1e-15)
    for off in (0.0, -3.0, 0):
        assert same(attention(q, k, v, softcap=off), plain)


def test_softcap_towards_infinity_is_no_softcap():
    q, k, v = qkv()
    plain = attention(q, k, v)
    for cap, tolerance in ((1e3, 1e-5), (1e6, 1e-11)):
        # c tanh(s/c) = s - s^3 / (3 c^2) + ...: the scores move by at most |s|^3 / (3 c^2)
        np.testing.assert_allclose(attention(q, k, v, softcap=cap).out, plain.out, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
@pytest.mark.parametrize("per_batch", [False, True])
def test_alibi_is_the_bias_it_denotes_after_the_cap(alignment, per_batch):
    q, k, v = qkv(4, 9)
    slopes = RNG.uniform(0.1, 1.0, size=(2, 4) if per_batch else (4,))
    offset = 0 if alignment == "top_left" else 9 - 4
    distance = np.abs(np.arange(9)[None, :] - (np.arange(4)[:, None] + offset))
    bias = -np.broadcast_to(slopes, (2, 4))[:, :, None, None] * distance
    got = attention(q, k, v, alibi_slopes=slopes, softcap=1.5, causal_alignment=alignment)
    want = attention(q, k, v, bias=bias, softcap=1.5, causal_alignment=alignment)
    np.testing.assert_allclose(got.out, want.out, rtol=1e-14)
    np.testing.assert_allclose(got.lse, want.lse, rtol=1e-14)


def test_bias_is_added_after_the_scale_and_a_row_constant_moves_only_the_lse():
    q, k, v = qkv()
    plain = attention(q, k, v, scale=0.3)
    shift = RNG.normal(size=(2, 4, 5, 1))
    shifted = attention(q, k, v, scale=0.3, bias=shift)
    # s + c rounds: each weight moves by a few ulps of |s + c| (< 10) relative, 7 keys against |v| < 5, so an
    # output near 0 (cancellation) differs by ~1e-14 absolute
    np.testing.assert_allclose(shifted.out, plain.out, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(shifted.lse, plain.lse + shift[..., 0], rtol=1e-13)
    np.testing.assert_allclose(shifted.scores, plain.scores + shift, rtol=1e-15)


def test_a_minus_inf_bias_hides_a_key_as_the_mask_does():
    q, k, v = qkv()
    hidden = RNG.random((2, 1, 5, 7)) < 0.4
    hidden[0, 0, 1] = True  # a row that sees no key
    result = attention(q, k, v, bias=np.where(hidden, -np.inf, 0.0))
    assert same(result, attention(q, k, v, mask=~np.broadcast_to(hidden, (2, 4, 5, 7))))
    assert np.all(result.out[0, :, 1] == 0) and np.all(result.lse[0, :, 1] == -np.inf)


def test_a_sink_of_minus_infinity_is_no_sink_and_of_plus_infinity_zeroes_the_output():
    q, k, v = qkv()
    plain = attention(q, k, v)
    assert same(attention(q, k, v, sinks=np.full(4, -np.inf)), plain)
    flooded = attention(q, k, v, sinks=np.array([np.inf, 0.0, 0.0, 0.0]))
    assert np.all(flooded.out[:, 0] == 0) and np.all(flooded.weights[:, 0] == 0)
    assert np.all(flooded.lse[:, 0] == np.inf)


@pytest.mark.parametrize("causal", [False, True])
def test_a_sink_is_an_extra_key_with_zero_value(causal):
    q, k, v = qkv(6, 6)
    sinks = RNG.normal(size=4)
    result = attention(q, k, v, sinks=sinks, causal=causal, causal_alignment="bottom_right")
    # the extra key first, scored 0 by a zero key, plus the sink as its bias; a zero value
    k_plus = np.concatenate([np.zeros((2, 2, 1, 8)), k], axis=2)
    v_plus = np.concatenate([np.zeros((2, 2, 1, 3)), v], axis=2)
    bias = np.zeros((2, 4, 6, 7))
    bias[..., 0] = sinks[None, :, None]
    # bottom-right alignment over 7 keys: query i sees j <= i + 1, the extra key and the 6 real ones up to i
    want = attention(q, k_plus, v_plus, bias=bias, causal=causal, causal_alignment="bottom_right")
    np.testing.assert_allclose(result.out, want.out, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(result.lse, want.lse, rtol=1e-13)
    np.testing.assert_allclose(result.weights.sum(-1) + np.exp(sinks[None, :, None] - result.lse), 1.0, rtol=1e-13)


def test_a_row_that_sees_no_key_returns_zero_with_the_sink_as_its_lse():
    q, k, v = qkv()
    sinks = RNG.normal(size=4)
    mask = np.ones((2, 4, 5, 7), bool)
    mask[1, :, 3] = False
    result = attention(q, k, v, mask=mask, sinks=sinks)
    assert np.all(result.out[1, :, 3] == 0) and np.all(result.weights[1, :, 3] == 0)
    np.testing.assert_array_equal(result.lse[1, :, 3], sinks)


BAD = [
    (dict(window_size=3), "window_size"), (dict(window_size=(1.0, 2)), "window_size"),
    (dict(window_size=(1, 2, 3)), "window_size"), (dict(window_size=(True, 1)), "window_size"),
    (dict(softcap=np.nan), "softcap"), (dict(softcap=np.inf), "softcap"), (dict(softcap="50"), "softcap"),
    (dict(alibi_slopes=np.ones(3)), "alibi_slopes"), (dict(alibi_slopes=np.array([1.0, np.nan, 1, 1])), "alibi_slopes"),
    (dict(alibi_slopes=np.ones(4, int)), "alibi_slopes"), (dict(alibi_slopes=[1.0] * 4), "alibi_slopes"),
    (dict(sinks=np.ones((2, 4))), "sinks"), (dict(sinks=np.array([0.0, np.nan, 0, 0])), "sinks"),
    (dict(bias=np.ones((5, 6))), "bias"), (dict(bias=np.ones((5, 7), bool)), "bias"),
    (dict(bias=np.full((5, 7), np.nan)), "bias"), (dict(bias=np.full((5, 7), np.inf)), "bias"),
]


@pytest.mark.parametrize("kwargs, keyword", BAD, ids=[f"{kw}-{i}" for i, (_, kw) in enumerate(BAD)])
def test_a_bad_value_names_its_keyword(kwargs, keyword):
    q, k, v = qkv()
    with pytest.raises(AttentionInputError, match=keyword):
        attention(q, k, v, **kwargs)


@pytest.mark.parametrize("kwargs, keyword", [(kw, name) for kw, name in BAD if name != "sinks"],
                         ids=[f"{kw}-{i}" for i, (_, kw) in enumerate(BAD) if kw != "sinks"])
def test_the_numpy_tiled_record_rejects_a_bad_value_by_its_keyword(kwargs, keyword):
    q, k, v = qkv()
    with pytest.raises(AttentionInputError, match=keyword):
        tiled_attention(q, k, v, **kwargs)


@pytest.mark.parametrize("mods", [dict(softcap=0.7), dict(softcap=0.7, bias=RNG.normal(size=(2, 4, 4, 6))),
                                  dict(alibi_slopes=np.full(4, 0.3), sinks=np.ones(4), window_size=(2, 1))])
def test_the_oracle_backward_matches_central_differences_under_the_modifications(mods):
    """dQ, dK, dV of <d_out, out> against central differences in float64 (specs.gradients: softcap's derivative
    1 - tanh^2; ALiBi, bias, window and sinks leave dS = P (dP - D) as it is)."""
    q, k, v = qkv(4, 6)
    q *= 3  # scores of a few units: the cap bends them
    d_out = RNG.normal(size=(2, 4, 4, 3))
    d_q, d_k, d_v = attention_backward(q, k, v, d_out, **mods)
    step = 1e-6
    for name, x, grad in (("q", q, d_q), ("k", k, d_k), ("v", v, d_v)):
        direction = RNG.normal(size=x.shape)
        args = {"q": q, "k": k, "v": v}

        def loss(t, name=name, direction=direction, args=args):
            moved = {**args, name: args[name] + t * direction}
            return np.sum(d_out * attention(moved["q"], moved["k"], moved["v"], **mods).out)

        numeric = (loss(step) - loss(-step)) / (2 * step)
        # central differences err by O(step^2 |f'''|) + O(u |f| / step): about 1e-9 here
        assert abs(np.sum(grad * direction) - numeric) <= 1e-7 * max(1.0, abs(numeric)), name


@pytest.mark.parametrize("layout", [(2, 4, 4, 6), (4, 4, 6), (2, 1, 1, 6), (6,)])
@pytest.mark.parametrize("mods", [dict(), dict(softcap=0.7, causal=True),
                                  dict(sinks=np.ones(4), window_size=(1, 1), alibi_slopes=np.full(4, 0.3))])
def test_dbias_and_dsinks_match_central_differences(layout, mods):
    """dBias in the bias's own shape (summed over the axes it is broadcast along; dS before softcap's derivative,
    as the bias is added after the cap) and dSinks (-sum pi_i rowsum(dO * O)_i) against central differences of
    <d_out, out> in a random direction of each."""
    q, k, v = qkv(4, 6)
    q *= 3
    d_out = RNG.normal(size=(2, 4, 4, 3))
    kwargs = {**mods, "bias": RNG.normal(size=layout)}
    grads = score_mod_gradients(q, k, v, d_out, **kwargs)
    assert set(grads) == {"bias"} | ({"sinks"} if "sinks" in mods else set())
    step = 1e-6
    for name, grad in grads.items():
        assert grad.shape == np.shape(kwargs[name])
        direction = RNG.normal(size=grad.shape)

        def loss(t, name=name, direction=direction):
            return np.sum(d_out * attention(q, k, v, **{**kwargs, name: kwargs[name] + t * direction}).out)

        numeric = (loss(step) - loss(-step)) / (2 * step)
        assert abs(np.sum(grad * direction) - numeric) <= 1e-7 * max(1.0, abs(numeric)), name



def test_dsinks_at_infinite_sinks_is_the_limit_of_finite_ones():
    """A sink of +inf takes every weight (pi = 1, O = 0) and one of -inf none (pi = 0): dSinks is the limit of
    dSinks at sinks growing without bound either way, also in a row that sees no key (its LSE -inf or +inf), where
    exp(sink - LSE) alone is inf - inf."""
    q, k, v = qkv(4, 6)
    d_out = RNG.normal(size=(2, 4, 4, 3))
    mask = np.ones((4, 6), dtype=bool)
    mask[2] = False  # row 2 sees no key
    infinite = np.array([np.inf, -np.inf, np.inf, -np.inf])
    at_infinity = score_mod_gradients(q, k, v, d_out, mask=mask, sinks=infinite)["sinks"]
    near = score_mod_gradients(q, k, v, d_out, mask=mask, sinks=np.sign(infinite) * 60.0)["sinks"]
    assert np.all(np.isfinite(at_infinity))
    np.testing.assert_allclose(at_infinity, near, atol=1e-20)
