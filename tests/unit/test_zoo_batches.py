"""The zoo's batches (zoo/run.py): defects share a process only when they run on the same claims, so each one
runs on exactly the properties it would run on alone."""

from __future__ import annotations

from collections import Counter

from zoo.defects import DEFECTS
from zoo.run import BATCH, batches


def test_a_batch_holds_defects_of_one_claim_set_and_every_defect_once_in_order():
    found = batches(DEFECTS)
    assert [d.name for _, batch in found for d in batch] == [d.name for d in sorted(
        DEFECTS, key=lambda d: [tuple(sorted(x.breaks)) for x in DEFECTS].index(tuple(sorted(d.breaks))))]
    for claims, batch in found:
        assert all(tuple(sorted(d.breaks)) == claims for d in batch), (claims, [d.name for d in batch])
    # a claim set of n defects makes full batches of BATCH and one of the rest, never more processes
    per_set = Counter(tuple(sorted(d.breaks)) for d in DEFECTS)
    assert Counter(claims for claims, _ in found) == Counter({claims: -(-n // BATCH) for claims, n in per_set.items()})
    assert max(per_set.values()) > BATCH  # the split above is exercised


def test_claims_named_for_the_run_put_every_defect_on_them():
    found = batches(DEFECTS[:12], ("sdpa-formula",))
    assert [(claims, len(batch)) for claims, batch in found] == [
        (("sdpa-formula",), BATCH), (("sdpa-formula",), BATCH), (("sdpa-formula",), 12 - 2 * BATCH)]
