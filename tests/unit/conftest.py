"""Fixtures the unit tests share."""

import pytest

from harness.reporting.browser import BrowserUnavailable, find_browser


@pytest.fixture(scope="module")
def browser() -> str:
    """The headless Chromium the browser checks drive; the test skips, saying why, where there is none."""
    try:
        return find_browser()
    except BrowserUnavailable as exc:
        pytest.skip(str(exc))
