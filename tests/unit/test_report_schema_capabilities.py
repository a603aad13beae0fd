"""report.json's schema describes every record's capabilities as protocol.registry states them: each backend a
record may have, and every field of Capabilities that is not a boolean by name (the schema takes any other field
as a boolean), so a new capability cannot make a valid report fail its schema."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources

from protocol.registry import BACKENDS, Capabilities

SCHEMA = json.loads(resources.files("harness.reporting").joinpath("report.schema.json").read_text(encoding="utf-8"))
CAPABILITIES = SCHEMA["$defs"]["capabilities"]


def test_every_backend_is_in_the_schema():
    assert set(CAPABILITIES["properties"]["backend"]["enum"]) == {*BACKENDS, "user"}


def test_every_capability_that_is_not_a_boolean_is_named():
    not_boolean = {field.name for field in dataclasses.fields(Capabilities)
                   if not isinstance(getattr(Capabilities(), field.name), bool)}
    assert not_boolean <= set(CAPABILITIES["properties"])
