"""The checks of seeds 001 and 003 (and seed 000's readings of the dot product) can fail, and fail for the
reason they name: each is run in-process on a deliberately wrong implementation or input (it must raise)
and on a correct one written unusually (it must not). Checks that are facts about the suite's own
builders live here too: the worked examples have the sizes the seeds state, the split/merge helpers
round-trip, the seed code quoted in the properties is the seed's.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.api.assertions import assert_within
from harness.api.evidence import PropertyViolation
from harness.api.observe import observe_weights
from harness.api.trial import Trial
from impls.seeds.seed_code import seed001_multihead
from interpretations import geometric_checks as geometric
from properties import formula_checks as formula
from properties import head_checks as heads
from protocol.registry import Variant, load_impl
from specs import examples
from specs.catalogue import load_claims
from specs.problems import build
from specs.reference import attention, merge_heads, split_heads
from specs.tolerance import dot_product_allowance, score_perturbation_allowance
from tests.fixtures.runs import ROOT

SEEDS = ROOT.parent / "shared" / "seeds"
CORRECT = ("impls.numpy.numpy_reference:reference_attention", "exp2_attention", "lse_halves_attention")
# Self-attention problems: grouped heads, lengths past 16, a dominant key per row, near-uniform rows.
PROBLEMS = (build(batch=2, heads=4, heads_kv=2, n_q=7, n_k=7, d=5, d_v=7, seed=1),
            build(heads=3, n_q=18, n_k=18, d=20, d_v=18, seed=2, score_style="spiky"),
            build(n_q=5, n_k=5, d=3, d_v=5, seed=3, score_style="integers"))


def _trial(target: str, problem, dtype: str = "float64") -> Trial:
    if not target.startswith("impls."):
        target = f"{ROOT}/tests/fixtures/wrong_head_impls.py:{target}"
    return Trial(Variant(load_impl(target), dtype), problem)


def _observe(trial: Trial, derive=lambda problem: problem):
    """The weights `trial`'s implementation applies on derive(its problem)."""
    return observe_weights(trial, derive(trial.problem))


def _unit_self_attention(problem):
    return geometric.self_attention(problem, unit=True)


def _message(exc: BaseException) -> str:
    """What the plugin matches a refutation against (harness.engine.declarations)."""
    return exc.message() if isinstance(exc, PropertyViolation) else f"{type(exc).__name__}: {exc}"


def _refutes(slug: str, excinfo) -> bool:
    return re.search(load_claims()[slug].refutation, _message(excinfo.value)) is not None


# -- seed 000 § 自注意力: X times its own transpose -----------------------------------------

@pytest.mark.parametrize("target", CORRECT)
@pytest.mark.parametrize("problem", PROBLEMS, ids=repr)
def test_symmetric_scores_accept_correct_attention(target, problem):
    trial = _trial(target, problem)
    geometric.expect_symmetric_scores(trial, _observe(trial, geometric.self_attention))


@pytest.mark.parametrize("wrong", ["positional_bias", "doubled_keys", "unscaled"])
@pytest.mark.parametrize("problem", PROBLEMS[:2], ids=repr)
def test_symmetric_scores_reject_bias_and_mis_scaled_keys(wrong, problem):
    trial = _trial(wrong, problem)
    with pytest.raises(PropertyViolation, match=r"differs from S_ji \(Q = K = X: the scores are the symmetric"):
        geometric.expect_symmetric_scores(trial, _observe(trial, geometric.self_attention))


# -- seed 000 § 向量化: unit vectors score by cosine -------------------------------------------

@pytest.mark.parametrize("target", CORRECT)
@pytest.mark.parametrize("problem", PROBLEMS, ids=repr)
def test_cosine_weights_accept_correct_attention(target, problem):
    trial = _trial(target, problem)
    geometric.expect_cosine_weights(trial, _observe(trial, _unit_self_attention))


@pytest.mark.parametrize("wrong, message", [("unscaled", "differ by more than scores in"),
                                            ("positional_bias", "differ by more than scores in"),
                                            ("negated_scores", "more weight than query")])
def test_cosine_weights_reject_wrong_scores(wrong, message):
    trial = _trial(wrong, PROBLEMS[0])
    with pytest.raises(PropertyViolation, match=message):
        geometric.expect_cosine_weights(trial, _observe(trial, _unit_self_attention))


# -- seed 003 § 第一个概念: the dot product as a distance --------------------------------------

CROSS = build(batch=2, heads=2, heads_kv=1, n_q=4, n_k=9, d=3, d_v=9, seed=5)


@pytest.mark.parametrize("target", CORRECT)
def test_unit_vectors_by_nearness_accepts_correct_attention(target):
    trial = _trial(target, CROSS)
    geometric.expect_weights_rank_by_distance(trial, _observe(trial, geometric.unit_queries_and_keys))


def test_unit_vectors_by_nearness_rejects_negated_scores():
    trial = _trial("negated_scores", CROSS)
    with pytest.raises(PropertyViolation, match="gets a smaller weight"):
        geometric.expect_weights_rank_by_distance(trial, _observe(trial, geometric.unit_queries_and_keys))


@pytest.mark.parametrize("target", CORRECT)
def test_literal_distance_reading_is_refuted_by_attention(target):
    """Keys of lengths 1/4 .. 4: attention prefers a long aligned key over a nearer short one."""
    trial = _trial(target, CROSS)
    with pytest.raises(PropertyViolation) as excinfo:
        geometric.expect_dot_product_ranks_like_distance(trial, _observe(trial, geometric.keys_of_many_lengths))
    assert _refutes("dot-product-as-distance-literal", excinfo)


def test_literal_distance_reading_holds_for_distance_scores():
    trial = _trial("distance_scores", CROSS)
    geometric.expect_dot_product_ranks_like_distance(trial, _observe(trial, geometric.keys_of_many_lengths))


def test_dot_product_attention_ignores_components_orthogonal_to_the_keys():
    """Seed 002's projection reading holds for dot-product attention: the scores change only by s (dq . k_j),
    where dq is the move's leftover projection onto the keys, and the weights by the first-order bound of that."""
    p = build(n_q=3, n_k=2, d=3, d_v=2, seed=12)
    moved = geometric.orthogonal_move(p.q, p.k, 12)
    one_hot = np.eye(2)[None, None]
    dq = moved - p.q
    # |s dq.k_j| as computed plus its rounding, plus the rounding of both score computations
    rounding = dot_product_allowance(dq, p.k) + dot_product_allowance(moved, p.k) + dot_product_allowance(p.q, p.k)
    leftover = np.abs(dq @ p.k.swapaxes(-1, -2)) + rounding.bound
    allowance = score_perturbation_allowance(p.q, p.k, one_hot, leftover.max(axis=-1, keepdims=True) / np.sqrt(3))
    assert_within(attention(moved, p.k, one_hot).out, attention(p.q, p.k, one_hot).out, allowance,
                  what="weights of q + a component orthogonal to every key", versus="the weights of q")


# -- seed 003 § 2- qk点乘: q1 against x2, x3, x4 only ------------------------------------------

@pytest.mark.parametrize("target", CORRECT)
def test_own_key_reading_is_refuted_by_attention(target):
    trial = _trial(target, examples.four_tokens(0))
    with pytest.raises(PropertyViolation) as excinfo:
        formula.expect_own_key_ignored(trial, _observe(trial))
    assert _refutes("query-compared-only-with-other-tokens", excinfo)


def test_own_key_reading_holds_for_attention_without_the_diagonal():
    trial = _trial("excludes_own_key", examples.four_tokens(0))
    formula.expect_own_key_ignored(trial, _observe(trial))


# -- seed 001 § 2.3: each head weights by its own queries and keys ---------------------------

@pytest.mark.parametrize("target", CORRECT)
@pytest.mark.parametrize("h", [0, 3])
def test_head_as_if_alone_accepts_correct_attention(target, h):
    heads.expect_head_as_if_alone(_trial(target, PROBLEMS[0]), h)


def test_head_as_if_alone_rejects_shared_weights():
    with pytest.raises(PropertyViolation, match="out of query head 3 run alone differs"):
        heads.expect_head_as_if_alone(_trial("shared_head_weights", PROBLEMS[0]), 3)


# -- seed 003 § 第三个概念 多头 (GQA): query head h reads kv head h // group, and no other -------

@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
@pytest.mark.parametrize("target", CORRECT)
@pytest.mark.parametrize("g", [0, 1])
def test_kv_head_shift_accepts_correct_attention(target, g, dtype):
    heads.expect_kv_head_read_by_its_group(_trial(target, PROBLEMS[0], dtype), g)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_kv_head_shift_rejects_a_fifth_leaked_from_the_next_kv_head(dtype):
    """Half the shift (the old allowance) let this pass: the leak moves other heads by c / 5."""
    with pytest.raises(PropertyViolation, match="the change of out when the values of kv head 0 move"):
        heads.expect_kv_head_read_by_its_group(_trial("leaks_fifth_of_next_kv_head", PROBLEMS[0], dtype), 0)


# -- seed 001 § 1.3: assert k_len == v_len ----------------------------------------------------

@pytest.mark.parametrize("target", CORRECT[:1])
def test_rejection_accepts_implementations_that_raise(target):
    trial = _trial(target, PROBLEMS[1])
    for mismatched in formula.mismatched_values(PROBLEMS[1]):
        formula.expect_rejected(trial, mismatched)


def test_rejection_catches_values_read_only_up_to_n_k():
    trial = _trial("ignores_extra_values", PROBLEMS[1])
    more, _ = formula.mismatched_values(PROBLEMS[1])
    with pytest.raises(PropertyViolation, match="accepted k with n_k=18 keys and v with 19 values"):
        formula.expect_rejected(trial, more)


# -- seed 003 § 第三个概念 多头: concatenation, then W_O -----------------------------------------

def _torch_case(heads_count: int = 3, head_dim: int = 5):
    module, w_o = heads.torch_multihead(heads_count, head_dim, seed=4)
    x = np.random.default_rng(4).standard_normal((2, 6, heads_count * head_dim))
    return heads.run_torch_multihead(module, x), x, w_o


def test_concat_then_projection_accepts_torch_multihead():
    out, x, w_o = _torch_case()
    heads.expect_concat_then_projection(out, x, 3, w_o)


@pytest.mark.parametrize("mix", ["reversed heads", "averaged heads"])
def test_concat_then_projection_rejects_other_combinations(mix):
    _, x, w_o = _torch_case()
    x_heads = split_heads(x, 3)
    per_head = attention(x_heads, x_heads, x_heads).out
    combined = (per_head[:, ::-1] if mix == "reversed heads" else np.broadcast_to(per_head.mean(1, keepdims=True),
                                                                                   per_head.shape))
    with pytest.raises(AssertionError, match=r"the multi-head output differs from concat\(Z_1..Z_3\) W_O"):
        heads.expect_concat_then_projection(merge_heads(np.ascontiguousarray(combined)) @ w_o, x, 3, w_o)


def test_w_o_literal_reduction_is_refuted_by_torch_and_holds_for_one_head_wide_output():
    out, _, _ = _torch_case()
    with pytest.raises(AssertionError) as excinfo:
        heads.expect_output_projection_reduces_to_one_head(out, 3, 5)
    assert _refutes("output-projection-reduces-to-one-head", excinfo)
    heads.expect_output_projection_reduces_to_one_head(out[..., :5], 3, 5)


# -- seed 001 § 1.3: the seed's split / merge --------------------------------------------------

def _torch_inputs(batch: int, lengths: tuple[int, ...], hdim: int):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    return [torch.from_numpy(rng.standard_normal((batch, n, hdim))) for n in lengths]


def test_seed_split_merge_as_written_cut_512_into_8_blocks_of_64():
    split, merge = heads.seed_split_merge(8, 64)
    heads.expect_split_merge(split, merge, *_torch_inputs(2, (3, 4, 4), 512), num_head=8)


def test_split_merge_check_accepts_permute_and_rejects_missing_transpose():
    q, k, v = _torch_inputs(2, (5, 4, 4), 12)

    def permuted_split(x):
        return x.unflatten(-1, (3, 4)).permute(0, 2, 1, 3)

    def permuted_merge(x, b):
        return x.permute(0, 2, 1, 3).flatten(-2)

    def reshaped_split(x):  # the classic bug: heads are not feature blocks, though merge undoes it
        return x.reshape(x.shape[0], 3, x.shape[1], 4)

    def reshaped_merge(x, b):
        return x.reshape(b, x.shape[2], 12)

    heads.expect_split_merge(permuted_split, permuted_merge, q, k, v, num_head=3)
    with pytest.raises(AssertionError, match="not cut into 3 disjoint 4-dim subspaces"):
        heads.expect_split_merge(reshaped_split, reshaped_merge, q, k, v, num_head=3)


@given(batch=st.integers(1, 3), n=st.integers(1, 20), count=st.integers(1, 8), head_dim=st.integers(1, 16),
       seed=st.integers(0, 2**32 - 1))
def test_reference_split_then_merge_is_identity(batch, n, count, head_dim, seed):
    x = np.random.default_rng(seed).standard_normal((batch, n, count * head_dim))
    split = split_heads(x, count)
    assert split.shape == (batch, count, n, head_dim)
    assert np.array_equal(merge_heads(split), x)
    assert np.array_equal(split_heads(merge_heads(split), count), split)


@pytest.mark.skipif(not SEEDS.is_dir(), reason=f"the seed documents are not at {SEEDS}")
def test_quoted_seed_code_is_the_seeds():
    seed = re.sub(r"\s+", "", (SEEDS / "001_16e7e18349ffb2ee.txt").read_text(encoding="utf-8"))
    assert re.sub(r"\s+", "", seed001_multihead.SEED_SPLIT_MERGE) in seed


# -- the seeds' worked examples and numbers ----------------------------------------------------

def _original(slug: str) -> str:
    return load_claims()[slug].original


def test_worked_example_000_has_the_seeds_shapes():
    stated = [tuple(map(int, pair)) for pair in re.findall(r"(\d+)\s*×\s*(\d+)", _original("worked-example-shapes"))]
    tokens, features, width = examples.WORKED_000_SIZES
    assert stated == [(tokens, features), (features, width), (tokens, width), (tokens, tokens)]
    p = examples.worked_example_000(0)
    assert p.q.shape == p.k.shape == p.v.shape == (1, 1, tokens, width)


def test_worked_example_001_has_the_seeds_shapes():
    text = _original("worked-example-cross-shapes")
    n_q, n_k = map(int, re.findall(r"序列长度为(\d+)", text))
    (d,) = map(int, re.findall(r"特征维度均为(\d+)", text))
    p = examples.worked_example_001(0)
    assert (p.q.shape, p.k.shape, p.v.shape) == ((1, 1, n_q, d), (1, 1, n_k, d), (1, 1, n_k, d))


def test_seed003_examples_have_the_seeds_sizes():
    tokens = len(re.search(r'"(.+?)"', _original("woaini-self-attention-matrix"))[1])
    (features,) = map(int, re.findall(r"用(\d+)个编码的向量", _original("woaini-self-attention-matrix")))
    p = examples.woaini(0)
    assert p.q.shape == p.k.shape == (1, 1, tokens, features) and np.array_equal(p.q, p.k)
    named = max(map(int, re.findall(r"x(\d+)", _original("query-compared-only-with-other-tokens"))))
    assert examples.four_tokens(0).q.shape[2] == named


def test_siwuxiang_numbers_are_the_sentences():
    stated = examples.similarities(_original("siwuxiang-weights-sum-to-one"))
    assert tuple(stated.values()) == examples.SIWUXIANG_WEIGHTS
    assert len(stated) == len(examples.SIWUXIANG_ANIMALS)


def test_distribution_check_catches_a_mistyped_number():
    mistyped = _original("siwuxiang-weights-sum-to-one").replace("1/6", "1/5")
    with pytest.raises(AssertionError, match="sum to 31/30, not 1"):
        formula.expect_distribution(examples.similarities(mistyped))
    with pytest.raises(AssertionError, match="states no similarities"):
        formula.expect_distribution(examples.similarities("四不像什么也不像"))

