"""The zoo's batches (zoo/run.py): defects share a process only when they run on the same claims, so each one
runs on exactly the properties it would run on alone."""

from __future__ import annotations

from zoo.defects import DEFECTS
from zoo.run import BATCH, batches


def test_a_batch_holds_defects_of_one_claim_set_and_every_defect_once_in_order():
    found = batches(DEFECTS)
    flat = [defect for batch in found for defect in batch]
    assert sorted(d.name for d in flat) == sorted(d.name for d in DEFECTS) and len(flat) == len(DEFECTS)
    for batch in found:
        assert 1 <= len(batch) <= BATCH
        assert len({tuple(sorted(d.breaks)) for d in batch}) == 1, [d.name for d in batch]
        assert [DEFECTS.index(d) for d in batch] == sorted(DEFECTS.index(d) for d in batch)
    assert len(found) < len(DEFECTS)  # some defects share a process


def test_claims_named_for_the_run_put_every_defect_on_them():
    found = batches(DEFECTS[:12], ("sdpa-formula",))
    assert [len(batch) for batch in found] == [BATCH, BATCH, 12 - 2 * BATCH]
