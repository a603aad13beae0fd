"""The statistical dropout properties catch masks that are wrong only in how their uniforms are laid out
(tests/fixtures/dropout_stat_impls.py: keyed on i + j, on i - j, repeating over heads, one position at 1.5 p; each
passed the neighbouring-pairs and 1000-seed tests these replaced), and pass correct masks drawn in unusual
orders, run as a user would (--impl, a report)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from properties.dropout_checks import offset_pairs, pair_families
from specs.statistics import binomial_power, binomial_pvalue
from tests.fixtures.runs import run_suite

pytest.importorskip("torch")

IMPLS = "tests/fixtures/dropout_stat_impls.py"
CAUGHT = {  # function -> (the claim it must fail, what the failure must say)
    "mask_keyed_on_i_plus_j": ("dropout-independent", "the keeps at anti-diagonal (row +1, column -1) agree"),
    "mask_keyed_on_i_minus_j": ("dropout-independent", "the keeps at diagonal (row +1, column +1) agree"),
    "mask_period_two_over_heads": ("dropout-independent", "1 of 101 pair families: the keeps at head +2 agree"),
    "one_position_at_one_and_a_half_p": ("dropout-on-weights", "position [0, 1, 7, 0] was dropped"),
}
CORRECT = {  # function -> the dropout claims it must pass
    "hash_mask_in_transposed_blocks": {"dropout-on-weights", "dropout-independent", "dropout-unbiased",
                                       "dropout-seeded"},
    "torch_uniforms_drawn_transposed": {"dropout-on-weights", "dropout-independent", "dropout-unbiased"},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    names = [*CAUGHT, *CORRECT]
    return run_suite("properties/test_dropout.py", *(a for n in names for a in ("--impl", f"{IMPLS}:{n}")),
                     report_dir=tmp_path_factory.mktemp("dropout-statistics"))


@pytest.mark.parametrize("function", sorted(CAUGHT))
def test_the_wrong_mask_fails_its_claim(run, function):
    claim, message = CAUGHT[function]
    run.expect_caught(f"{IMPLS}:{function}[float64]", {claim})
    assert message in run.verdict(claim, f"{IMPLS}:{function}[float64]")["detail"]


@pytest.mark.parametrize("function", sorted(CORRECT))
def test_the_unusual_correct_mask_passes_every_dropout_claim(run, function):
    verdicts = {v["claim"]: v for v in run.report["verdicts"] if v["impl"] == f"{IMPLS}:{function}[float64]"}
    assert {c for c, v in verdicts.items() if v["status"] == "pass"} >= CORRECT[function], \
        {c: (v["status"], v["detail"][:400]) for c, v in verdicts.items()}


def test_the_pairs_are_disjoint_and_cover_each_offset():
    """Disjoint pairs make the agreements iid under independence, so each count is exactly binomial."""
    shape = (2, 4, 48, 48)
    for name, (first, second) in pair_families(shape).items():
        both = np.concatenate([first, second])
        assert np.unique(both).size == both.size, name
    first, second = offset_pairs(shape, (0, 0, 2, -2))
    (_, _, i, j), (_, _, i2, j2) = np.unravel_index(first, shape), np.unravel_index(second, shape)
    assert np.all((i2 - i == 2) & (j2 - j == -2)) and first.size == 2 * 4 * 24 * 46



@pytest.mark.parametrize(("trials", "wrong", "level"), [(200, 0.15, 1e-3), (300, 0.05, 1e-6), (150, 0.1, 1e-2)])
def test_binomial_power_sums_the_rejected_counts(trials, wrong, level):
    """The bisection finds the same rejection region as testing every count (wrong = p: the size, <= level)."""
    counts = np.arange(trials + 1)
    rejected = np.array([binomial_pvalue(int(c), trials, 0.1) < level for c in counts])
    assert binomial_power(trials, 0.1, wrong, level) == pytest.approx(stats.binom.pmf(counts[rejected], trials,
                                                                                      wrong).sum(), rel=1e-12)
    assert binomial_power(trials, 0.1, 0.1, level) <= level
