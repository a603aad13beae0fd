"""Whether a peer's packages are installed here: the records' probe, which imports nothing."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable


def installed(*modules: str, installer: str = "tox -e peers") -> Callable[[], str | None]:
    """A probe answering why a record cannot run here (the first of `modules` not installed, and what installs
    it), or None."""

    def probe() -> str | None:
        for module in modules:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed ({installer} installs it)"
        return None

    return probe
