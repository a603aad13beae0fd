"""One draw, many records: a property's examples are drawn once for the records that would draw them alike.

Records with the same dtype and the same ShapeCapabilities (the capabilities specs.strategies reads, and nothing
else: a strategy reading another field fails) are offered the same problems. For a Hypothesis property taking only
`variant`, the first of a group's tests to run (the leader) runs Hypothesis once for the group: each example is
drawn once, by the leader's run of the property, and every other record of the group is judged on it in turn
(harness.engine.shared_draws), its own RunningCheck current. Sharing never changes what a record is judged on:
- A record stays in the loop only while it behaves as the leader towards Hypothesis: the same draws (strategies, in
  the same order, no more) and the same validity (it rejects exactly the examples the leader rejects). Hypothesis'
  derandomized engine then generates for it, alone, exactly the examples it generates for the leader, so its
  verdict, its failures and its valid examples are those of its own run. A record that diverges (a draw the leader
  did not make, a rejection the leader did not make or the reverse) leaves the loop having drawn nothing, and runs
  alone at its turn, as before.
- A record that fails leaves the loop and runs alone at its turn: Hypothesis finds the same failure on the same
  example and shrinks it alone. The leader runs on every example (its draws are the example's), whatever it found:
  its failure too is found again, and shrunk, by its own run after the loop. Where Hypothesis gives up on the
  loop, every record runs alone.
- Each record keeps its own pytest test, id, selection (-k, --impl), verdict, valid examples and time (its own
  runs and an equal share of the drawing and the engine).
- Under pytest-xdist a group's tests go to one worker (RecordGroupScheduling, `--dist load`); with a scheduler that
  may split a group (worksteal, loadgroup, each), and with --share-draws no, every test runs alone.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import is_hypothesis_test, reject
from hypothesis.errors import StopTest, UnsatisfiedAssumption

from harness.engine.declarations import RUNNING, RunningCheck
from harness.engine.shared_draws import Diverged, DrawTape, is_data
from protocol.registry import Variant
from specs.strategies import ShapeCapabilities

# the schedulers that keep a group's tests in one worker ("load" is served by RecordGroupScheduling)
GROUPING_SCHEDULERS = ("load", "loadscope", "loadfile")


def group_key(variant: Variant) -> str:
    """What the strategies read of a record: its dtype and its ShapeCapabilities."""
    return f"{variant.dtype}|{ShapeCapabilities.of(variant.capabilities)!r}"


@dataclass
class MemberResult:
    """What one record's runs in the group's loop came to."""

    check: RunningCheck  # its count.valid: the examples it was judged on to the end
    seconds: float = 0.0  # inside its own runs of the property
    failure: BaseException | None = None  # what it raised: it runs alone at its turn, and this is raised after
    alone: bool = False  # it diverged from the leader, or Hypothesis gave up on the loop: it runs alone
    share: float = 0.0  # its time: its own runs and an equal share of the draws and Hypothesis' engine


@dataclass
class RecordGroup:
    """The tests of one property whose records share draws, in the order they run."""

    items: list[pytest.Item]
    results: dict[str, MemberResult] = field(default_factory=dict)
    loop_seconds: float = 0.0
    leader: str | None = None


GROUP = pytest.StashKey[RecordGroup]()


WORKER_FLAG = "attention_share_draws"  # the controller tells each pytest-xdist worker whether it shares draws


def sharing(config: pytest.Config) -> bool:
    """Whether this run shares draws: --share-draws yes and a scheduler that keeps a group in one process (a worker
    has the controller's word for it: it cannot see the scheduler)."""
    if hasattr(config, "workerinput"):
        return bool(config.workerinput.get(WORKER_FLAG))
    if config.getoption("share_draws") != "yes":
        return False
    return not config.pluginmanager.hasplugin("xdist") or config.getoption("dist", "no") in ("no",
                                                                                            *GROUPING_SCHEDULERS)


def _variant(item: pytest.Item) -> Variant | None:
    params = getattr(item, "callspec", None)
    if params is None or set(params.params) != {"variant"}:
        return None
    variant = params.params["variant"]
    return variant if isinstance(variant, Variant) else None


def _eligible(item: pytest.Item) -> bool:
    """A Hypothesis property of claims (harness.api.markers.checks) whose only argument pytest provides is the
    variant, with no marker that skips it."""
    return (_variant(item) is not None and isinstance(item, pytest.Function) and is_hypothesis_test(item.obj)
            and set(item.fixturenames) == {"variant"} and item.get_closest_marker("claims") is not None
            and not any(item.get_closest_marker(name) for name in ("skip", "skipif", "xfail")))


def _base(nodeid: str) -> str:
    return nodeid.partition("[")[0]


def assign(items: list[pytest.Item], skip_reason: Callable[[pytest.Item], str | None]) -> None:
    """Group the collected tests (the stash's GROUP): every eligible test that will not skip, by property and key."""
    groups: dict[tuple[str, str], list[pytest.Item]] = {}
    for item in items:
        if _eligible(item) and not skip_reason(item):
            groups.setdefault((_base(item.nodeid), group_key(_variant(item))), []).append(item)
    for members in groups.values():
        if len(members) > 1:
            group = RecordGroup(members)
            for item in members:
                item.stash[GROUP] = group


def shared_check(item: pytest.Item, new_check: Callable[[pytest.Item], RunningCheck]) -> RunningCheck | None:
    """The item's RunningCheck when the group's loop judged it to the end (running the loop if the item leads it);
    None when it runs alone."""
    group = item.stash.get(GROUP, None)
    if group is None:
        return None
    if item.nodeid not in group.results:
        _run(group, item, new_check)
    result = group.results.get(item.nodeid)
    return result.check if result is not None and result.failure is None and not result.alone else None


def call(item: pytest.Item) -> bool | None:
    """pytest_pyfunc_call: True where the group's loop judged the item (nothing left to run); a failure of the loop
    that the item's own run does not find again is raised as the loop found it; None: the item runs as usual."""
    group = item.stash.get(GROUP, None)
    result = group.results.get(item.nodeid) if group is not None else None
    if result is None or (result.alone and result.failure is None):
        return None
    if result.failure is not None:
        _call_alone(item)
        raise result.failure
    return True


def duration(item: pytest.Item, measured: float) -> float:
    """The item's own time: its share of its group's loop, and its own run where it ran alone."""
    group = item.stash.get(GROUP, None)
    result = group.results.get(item.nodeid) if group is not None else None
    if result is None:
        return measured
    return measured - (group.loop_seconds if group.leader == item.nodeid else 0.0) + result.share


def _call_alone(item: pytest.Item) -> None:
    item.obj(**{name: item.funcargs[name] for name in item._fixtureinfo.argnames})


def _run(group: RecordGroup, leader: pytest.Item, new_check: Callable[[pytest.Item], RunningCheck]) -> None:
    """Hypothesis once for every test of the group that has not run yet, `leader` first."""
    members = [leader] + [item for item in group.items if item.nodeid not in group.results and item is not leader]
    results = {item.nodeid: MemberResult(new_check(item)) for item in members}
    handle = leader.obj.hypothesis
    inner = handle.inner_test

    # the property's own name, source and signature: Hypothesis derandomizes from them (function_digest), so the
    # loop draws what the property draws alone
    @functools.wraps(inner)
    def judge_every_record(*args, **kwargs):
        tapes = {name: DrawTape(value) for name, value in kwargs.items() if is_data(value)}
        # the leader's run draws the example; a failure of it counts as valid, as the loop hides it from Hypothesis
        leader_rejected = bool(_judge(results[leader.nodeid], args,
                                      {**kwargs, **{name: tape.leader() for name, tape in tapes.items()}}))
        for item in members[1:]:
            result = results[item.nodeid]
            if result.failure is not None or result.alone:
                continue
            own = {**kwargs, **{name: tape.view() for name, tape in tapes.items()}, "variant": _variant(item)}
            rejected = _judge(result, args, own)
            if rejected is not None and rejected != leader_rejected:  # Hypothesis would count it otherwise
                result.alone = True
        if leader_rejected:
            reject()

    def _judge(result: MemberResult, args: tuple, kwargs: dict) -> bool | None:
        """The record's run of the property on this example: whether it rejected it (None: it failed or diverged)."""
        token, start = RUNNING.set(result.check), time.perf_counter()
        try:
            inner(*args, **kwargs)
        except UnsatisfiedAssumption:
            return True
        except Diverged:
            result.alone = True
            return None
        except (StopTest, KeyboardInterrupt, SystemExit):
            raise
        except BaseException as failure:  # pytest's outcomes (skip) too: the record runs alone at its turn
            result.failure = result.failure or failure
            return None
        finally:
            result.seconds += time.perf_counter() - start
            RUNNING.reset(token)
        return False

    group.leader, group.results = leader.nodeid, {**group.results, **results}
    handle.inner_test = judge_every_record
    start = time.perf_counter()
    try:
        _call_alone(leader)
    except Exception:
        for result in results.values():
            result.alone = True
    finally:
        handle.inner_test = inner
        group.loop_seconds = time.perf_counter() - start
    overhead = max(0.0, group.loop_seconds - sum(result.seconds for result in results.values())) / len(results)
    for result in results.values():
        result.share = result.seconds + overhead


def scheduler(config: pytest.Config, log, variants: list[Variant]):
    """pytest-xdist's scheduling by scope, a scope being a module's tests of the records that share a key: a group's
    tests go to one worker together, and so do the other tests of a module on one record (which share what the
    module computes once per record); every other test is a scope of its own."""
    from xdist.scheduler import LoadScopeScheduling

    keys = {variant.name: group_key(variant) for variant in variants}
    names = sorted(keys, key=len, reverse=True)  # the longest first: a name may begin another

    class RecordGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            param = nodeid.partition("[")[2][:-1]
            name = next((name for name in names if param == name or param.startswith(f"{name}-")), None)
            return f"{nodeid.partition('::')[0]}|{keys[name]}" if name is not None else nodeid

    return RecordGroupScheduling(config, log)
