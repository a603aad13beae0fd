"""The gradient, dropout, fused and determinism properties catch each deliberately wrong implementation of
tests/fixtures/flash_family_impls.py (run as a user would, with --impl and a report), and pass the correct ones written
in unusual ways (exp(S - logsumexp S) with NumPy's mask; our tiled FlashAttention with 3 x 5 blocks)."""

from __future__ import annotations

import pytest

from tests.fixtures.runs import run_suite

pytest.importorskip("torch")

IMPLS = "tests/fixtures/flash_family_impls.py"
PROPERTIES = ("properties/test_gradients.py", "properties/test_dropout.py", "properties/test_fused.py",
              "properties/test_determinism.py")
CAUGHT = {  # function -> (record name, the claims it must fail)
    "detached_normaliser": ("wrong-detached-normaliser", {"differentiable-end-to-end"}),
    "backward_without_row_dot": ("wrong-backward-without-row-dot", {"differentiable-end-to-end"}),
    "nan_gradient_of_masked_rows": ("wrong-nan-gradient-of-masked-rows", {"fully-masked-rows-zero-gradients"}),
    "dropout_mask_shared_by_heads": ("wrong-dropout-mask-shared-by-heads", {"dropout-independent"}),
    "dropout_without_rescale": ("wrong-dropout-without-rescale", {"dropout-on-weights", "dropout-unbiased"}),
    "dropout_rate_doubled": ("wrong-dropout-rate-doubled", {"dropout-on-weights", "dropout-independent"}),
    "dropout_mask_per_block": ("wrong-dropout-mask-per-block", {"dropout-seeded"}),
    "dropout_ignores_seed": ("wrong-dropout-ignores-seed", {"dropout-seeded", "deterministic"}),
    # float64: fused-equals-unfused is implied there by dropout-seeded, which catches the transposed mask
    "fused_mask_transposed": ("wrong-fused-mask-transposed", {"dropout-seeded"}),
    "nondeterministic_key_order": ("wrong-nondeterministic-key-order", {"deterministic"}),
}
CORRECT = {"logsumexp_form": "correct-logsumexp-form", "flash_tiled_odd_blocks": "correct-flash-tiled-odd-blocks"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    names = [*CAUGHT, *CORRECT]
    # small draws only: the tiled one's 3 x 5 blocks take past the call limit at the long regimes' 1025 keys
    return run_suite(*PROPERTIES, "--long-regimes", "no", *(a for n in names for a in ("--impl", f"{IMPLS}:{n}")),
                     report_dir=tmp_path_factory.mktemp("flash-family"))


@pytest.mark.parametrize("function", sorted(CAUGHT))
def test_the_wrong_implementation_fails_its_claims(run, function):
    name, claims = CAUGHT[function]
    run.expect_caught(f"{name}[float64]", claims)


@pytest.mark.parametrize("function", sorted(CORRECT))
def test_the_correct_implementation_passes_every_claim(run, function):
    verdicts = [v for v in run.report["verdicts"] if v["impl"] == f"{CORRECT[function]}[float64]"]
    assert verdicts and all(v["status"] in ("pass", "skip") for v in verdicts), \
        [(v["claim"], v["detail"][:300]) for v in verdicts if v["status"] not in ("pass", "skip")]
    assert sum(v["status"] == "pass" for v in verdicts) >= 7
