"""seed_generators (harness.engine.call_state) leaves every generator a call can draw from as the library's own
seeding would: a torch implementation without dropout_seed draws the same mask after either."""

from __future__ import annotations

import numpy as np
import pytest

from harness.engine.call_state import seed_generators

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("seed", [0, 7, 2**31 - 1])
def test_torch_and_numpy_draw_as_after_their_own_seeding(seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    expected = torch.rand(64), torch.nn.functional.dropout(torch.ones(64), p=0.5), np.random.random(8)
    torch.manual_seed(seed + 1)  # anything else, so that a seeding that does nothing shows
    np.random.seed(seed + 1)
    seed_generators(seed)
    got = torch.rand(64), torch.nn.functional.dropout(torch.ones(64), p=0.5), np.random.random(8)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    np.testing.assert_array_equal(got[2], expected[2])
