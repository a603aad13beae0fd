"""Every CUDA kernel executed on the CPU under the checkers of impls/cuda/runtime/on_cpu.py, on the problems the
properties draw (small: each call is a build-cached driver process) and on the fixed tile-edge cases its
declared geometry gives (impls/cuda/geometry.py: two key tiles + 1, two query blocks + 1, every head-dim class,
batch 2 with 2 kv heads, causal and masked): AddressSanitizer for out-of-bounds global and shared accesses,
ThreadSanitizer for races between the threads of a block, and the emulator's barrier accounting for divergence
(a thread that returned, or threads at different __syncthreads(), while others wait). The same checks on a GPU
are compute-sanitizer's memcheck, racecheck and synccheck (tools/gpu-check). The fixed cases also run against
the oracle on the plain CPU build (tiled-equals-global, seed 001 § 2.2): the paths past the first key tile and
the first query block are where a tiled kernel's online softmax and barriers can break."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.api.markers import checks
from harness.api.reproducible import reproducible
from harness.api.trial import Trial, check_against_oracle, problems_for
from impls.cuda.geometry import TileCase
from impls.cuda.runtime.on_cpu import KernelDefect
from properties.kv_cache_plans import cache_plans
from protocol.registry import SCORE_MODS, Variant
from specs.kv_cache import build_cache
from specs.problems import Problem, build
from specs.strategies import with_score_mod

# the random draws stay small (one sequence, one kv head; query heads still grouped: GQA), each call near a
# second under the sanitizers; the fixed tile-edge cases reach the tiles, batches and kv heads they leave out
SMALL = dict(max_n=40, max_d=32, max_batch=1, max_heads_kv=1)
CHECKED_EXAMPLES = 8  # each example is a process; shrinking a found defect adds more
CHECKER_CLAIMS = {"memcheck": "kernel-memory-safe", "racecheck": "kernel-race-free",
                  "synccheck": "kernel-barrier-uniform"}


def check_kernel(variant: Variant, data: st.DataObject, checker: str) -> None:
    """Draw a small problem (and block sizes where the kernel takes them; score modifications where it takes them)
    and run the kernel under `checker`."""
    caps = variant.capabilities
    blocks = {keyword: data.draw(st.integers(1, 70), label=keyword) for keyword in caps.tile_keywords}
    causal = caps.causal and data.draw(st.booleans(), label="causal")
    masked = caps.mask and not causal and data.draw(st.booleans(), label="masked")
    base = problems_for(variant, causal=causal, masked=masked, **SMALL)
    mods = [mod for mod in SCORE_MODS if getattr(caps, mod)]
    if mods and data.draw(st.booleans(), label="score modifications"):  # the band's and the cap's own paths
        keyword = data.draw(st.sampled_from(mods), label="modification")
        base = with_score_mod(base, keyword, tuple(m for m in mods if m != keyword))
    problem = data.draw(base, label="problem")
    run_checked(Trial(variant, problem), checker, blocks)


@reproducible
def run_checked(trial: Trial, checker: str, blocks: dict, case: str | None = None) -> None:
    """Run the trial's problem under `checker` (at the tile edge case named `case`); a report fails the claim the
    checker encodes."""
    try:
        trial.variant.impl.fn.cuda_run(*trial.inputs(), **trial.problem.kwargs(), **blocks, executor=checker)
    except KernelDefect as defect:
        # ThreadSanitizer also reports accesses to freed memory: those break memory safety, not race freedom
        memory = checker == "racecheck" and "ThreadSanitizer: data race" not in defect.report
        at = f" at the tile edge case {case}" if case else ""
        trial.fail(f"{checker} reports a defect in {defect.kernel} ({defect.entry}){at}: "
                   f"{defect.report.splitlines()[0]}", details=(defect.report,),
                   claim="kernel-memory-safe" if memory else CHECKER_CLAIMS[checker], observed={"checker": checker})


def tile_edge_cases(variant: Variant) -> list[tuple[TileCase, Problem]]:
    """The fixed cases of the kernel's declared geometry, built; a skip where it declares none."""
    geometry = getattr(variant.impl.fn, "cuda_geometry", None)
    if geometry is None:
        pytest.skip("the record declares no tile geometry (cuda_records(geometry=...)): no fixed tile-edge cases")
    return [(case, build(**case.recipe)) for case in geometry.tile_edge_cases(variant.capabilities)]


def check_tile_edges(variant: Variant, checker: str) -> None:
    for case, problem in tile_edge_cases(variant):
        run_checked(Trial(variant, problem), checker, {}, case.name)


@checks("kernel-memory-safe")
@pytest.mark.requires("cuda_checkers")
@settings(max_examples=CHECKED_EXAMPLES)
@given(data=st.data())
def test_kernel_accesses_stay_in_bounds(variant, data):
    check_kernel(variant, data, "memcheck")


@checks("kernel-race-free", "kernel-memory-safe")
@pytest.mark.requires("cuda_checkers")
@settings(max_examples=CHECKED_EXAMPLES)
@given(data=st.data())
def test_kernel_threads_do_not_race(variant, data):
    check_kernel(variant, data, "racecheck")


@checks("kernel-barrier-uniform")
@pytest.mark.requires("cuda_checkers")
@settings(max_examples=CHECKED_EXAMPLES)
@given(data=st.data())
def test_every_thread_reaches_every_barrier(variant, data):
    check_kernel(variant, data, "synccheck")


@checks("kernel-memory-safe")
@pytest.mark.requires("cuda_checkers")
def test_kernel_accesses_stay_in_bounds_at_tile_edges(variant):
    check_tile_edges(variant, "memcheck")


@checks("kernel-race-free", "kernel-memory-safe")
@pytest.mark.requires("cuda_checkers")
def test_kernel_threads_do_not_race_at_tile_edges(variant):
    check_tile_edges(variant, "racecheck")


@checks("kernel-barrier-uniform")
@pytest.mark.requires("cuda_checkers")
def test_every_thread_reaches_every_barrier_at_tile_edges(variant):
    check_tile_edges(variant, "synccheck")


@checks("tiled-equals-global")
@pytest.mark.requires("cuda_checkers")
def test_tile_edges_match_oracle(variant):
    """Each fixed tile-edge case on the plain CPU build, within the tolerance model of the oracle."""
    for _, problem in tile_edge_cases(variant):
        check_against_oracle(variant, problem)


@checks("kernel-memory-safe", "kernel-race-free", "kernel-barrier-uniform")
@pytest.mark.requires("cuda_checkers", "kvcache")
@settings(max_examples=CHECKED_EXAMPLES // 2)
@given(data=st.data())
def test_kv_cache_face_under_the_checkers(variant, data):
    """The kernel's kv-cache face (issue 22) under each checker: sequences of unequal cached lengths, paged caches of
    1, 16 and 256 slots in shuffled order with NaN in the slots and pages no sequence uses, block_table entries past
    a sequence's pages outside the pool (properties/test_kv_cache.py's layouts)."""
    problem = data.draw(problems_for(variant, causal=variant.capabilities.causal and data.draw(st.booleans()),
                                     empty_rows=True, **{**SMALL, "max_batch": 3}), label="problem")
    check_kv_cache_face_under_the_checkers(variant, problem, data.draw(cache_plans(variant, problem), label="cache"))


@reproducible
def check_kv_cache_face_under_the_checkers(variant: Variant, problem: Problem, plan: dict) -> None:
    """The kernel's kv-cache face on the cache `plan` builds (specs.kv_cache.build_cache) under each checker."""
    trial = Trial(variant, problem)
    cache = build_cache(*trial.inputs(), **plan)
    for checker, claim in CHECKER_CLAIMS.items():
        try:
            variant.impl.fn.cuda_kv_cache_run(*(x if x is None else x.copy() for x in cache.arrays),
                                              **cache.keywords, **problem.kwargs(), executor=checker)
        except KernelDefect as defect:
            memory = checker == "racecheck" and "ThreadSanitizer: data race" not in defect.report
            trial.fail(f"{checker} reports a defect in {defect.kernel} ({defect.entry}) through the kv-cache face: "
                       f"{defect.report.splitlines()[0]}", details=(defect.report,),
                       claim="kernel-memory-safe" if memory else claim, observed={"checker": checker})
