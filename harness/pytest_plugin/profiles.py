"""The suite's Hypothesis profiles: dev (default), ci (derandomized, no deadline, print_blob), thorough, and smoke
(ci with 3 examples: a record that costs seconds a call, kept from rotting in CI, tox -e triton-ci).

They are registered and loaded only when the suite runs (harness.pytest_plugin.options), so that installing the suite
leaves the Hypothesis settings of a user's own tests alone.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

DEFAULT = "dev"
_COMMON = dict(
    deadline=None,  # implementation calls are guarded by --impl-timeout instead
    # Every distinct failure is reported, so a declared failure never hides an undeclared one
    # (harness.api.trial raises declared ones as their own exception type).
    report_multiple_bugs=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def load(name: str | None, *, shrink: bool = True) -> None:
    """Register the suite's profiles and load `name` (None: the default, dev); shrink=False leaves out Hypothesis'
    shrink phase (the meta-test's twin: its verdicts are per cell, and every declared cell's failure is shrunk
    otherwise)."""
    # dev and thorough explore at random, wherever they run: Hypothesis's own profile for a CI environment (the CI
    # variable set) is derandomized, and a profile registered without derandomize would inherit that
    settings.register_profile("dev", max_examples=25, derandomize=False, **_COMMON)
    # ci: no target phase. Hill-climbing towards error/allowed -> 1 (harness.api.trial) costs hundreds of calls per
    # property; it is the thorough profile's job.
    settings.register_profile("ci", max_examples=15, derandomize=True, print_blob=True, database=None,
                              phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink], **_COMMON)
    settings.register_profile("thorough", max_examples=400, derandomize=False, **_COMMON)
    # smoke: every property reached, each on the first few of ci's examples (derandomized alike); a check that the
    # record still runs and agrees, not a search: its verdicts say nothing about the examples it did not draw
    settings.register_profile("smoke", settings.get_profile("ci"), max_examples=3)
    settings.load_profile(name or DEFAULT)
    if not shrink:
        phases = [phase for phase in settings.default.phases if phase is not Phase.shrink]
        settings.register_profile("unshrunk", settings(settings.default, phases=phases))
        settings.load_profile("unshrunk")
