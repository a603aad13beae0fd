"""Evidence a property shows the reader, besides its verdict: curves, heatmaps, histograms and tables.

A property calls `exhibit(...)` with plain data (numbers, lists, strings); the plugin carries it with the
test's verdict (harness.engine.verdicts, so it crosses pytest-xdist workers), report.json lists it under
"exhibits", and harness.reporting.figures draws it next to report.html. Exhibits of one `name` from several
implementations share one figure (one curve or panel per implementation), so readings compare across them.

Kinds and their data:
- "curves": {"x_label", "y_label", "series": {label: {"x": [...], "y": [...]}}, optional "log_x", "log_y",
  "band": {label: {"x": [...], "low": [...], "high": [...]}}, "outliers" (default true: a curve far from
  the implementations' median is drawn apart and named; false for curves that differ by sampling noise)}
- "heatmaps": {"panels": {title: 2-D list}, optional "row_label", "col_label"}
- "histograms": {"x_label", "samples": {label: [...]}}
- "table": {"columns": [...], "rows": [[...], ...]}, or {"cells": {column: value}}: this implementation's row,
  which the report merges with its other cells of the same name (one row per implementation)
"""

from __future__ import annotations

import math

import numpy as np

from harness.engine.declarations import RUNNING

KINDS = ("curves", "heatmaps", "histograms", "table")


class ExhibitError(ValueError):
    """An exhibit that the report could not show."""


def _plain(value: object) -> object:
    """NumPy scalars and arrays as JSON values (non-finite floats as strings, which JSON lacks)."""
    if isinstance(value, np.ndarray):
        return [_plain(x) for x in value.tolist()]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(x) for x in value]
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else repr(float(value))
    if isinstance(value, (np.integer, np.bool_)):
        return value.item()
    if value is None or isinstance(value, (str, int, bool)):
        return value
    raise ExhibitError(f"exhibit data holds a {type(value).__name__}; only numbers, strings, lists and dicts travel")


def exhibit(name: str, kind: str, data: dict, *, caption: str) -> None:
    """Record evidence of the running property: `name` (a slug, shared by the implementations whose evidence
    belongs in one figure), `kind` (KINDS), `data` (see the module's docstring), and one sentence saying what
    it shows. Outside a suite run (no property running) it does nothing."""
    if kind not in KINDS:
        raise ExhibitError(f"exhibit {name!r}: kind {kind!r} is not one of {KINDS}")
    if not caption:
        raise ExhibitError(f"exhibit {name!r} needs a caption: one sentence on what it shows")
    running = RUNNING.get()
    if running is None:
        return
    running.exhibits.append({"name": name, "kind": kind, "caption": caption, "data": _plain(data)})


def record_headroom(name: str, reading: str, ratio: float, caption: str) -> None:
    """The `reading` cell of this implementation's row in the `name` table: how close it came to its allowance
    (worst |error| / allowed; below 1 passes, and a small ratio holds with room to spare)."""
    exhibit(name, "table", {"cells": {reading: ratio}}, caption=caption)
