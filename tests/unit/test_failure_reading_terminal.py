"""The terminal summary fits the terminal: the claims x subjects matrix folds into blocks of columns, no line is
wider than the terminal, every verdict appears in some block, and the unexpected failures and errors come last,
by claim, each with its one-line summary and the path to its bug report."""

from __future__ import annotations

import random

import pytest

from harness.reporting.report_text import SYMBOLS, bug_ids, terminal_lines, verdict_symbol

STATUSES = ("pass", "pass", "pass", "skip", "fail", "error")


def synthetic_report(subjects: int = 55, claims: int = 125, seed: int = 0) -> dict:
    """A main-job-sized report: subject names and slugs longer than the main job's, every kind of verdict, some
    cells without one."""
    rng = random.Random(seed)
    impls = [f"impl-{i}" + ("-with-a-long-name" * (i % 3)) + f"[float{16 * (1 + i % 4)}]"
             for i in range(subjects)]
    slugs = [f"claim-{i}" + "-x" * rng.randrange(0, 19) for i in range(claims)]
    verdicts = []
    for slug in slugs:
        for impl in impls:
            if rng.random() < 0.1:
                continue  # not applicable: no verdict
            status = rng.choice(STATUSES)
            expected = status == "fail" and rng.random() < 0.8
            detail = (f"{slug} fails on {impl}: out differs from the float64 oracle beyond the tolerance\n  more"
                      if status == "fail" else "E   RuntimeError: the fixture broke\nlast line" if status == "error"
                      else "")
            verdicts.append({"claim": slug, "impl": impl, "status": status, "declared": expected, "detail": detail})
    summary = {"pass": 0, "skip": 0, "error": 0, "expected_fail": 0, "unexpected_fail": 0}
    return {"impls": impls, "claims": [{"slug": s} for s in slugs], "verdicts": verdicts, "summary": summary,
            "unavailable": [{"target": "impls.cuda_x:on_device", "reason": "no CUDA device: " + "driver " * 20}],
            "time_s": {impl: {"tests": 1.5, "calls": 0.5} for impl in impls}}


def read_blocks(lines: list[str]) -> dict[tuple[int, str], str]:
    """(subject number, claim) -> symbol, read back from the printed blocks."""
    found, numbers, pending = {}, None, None
    for line in lines:
        if line.startswith("subjects "):
            numbers = "header"
        elif numbers == "header":
            numbers = [int(n) for n in line.split()]
        elif numbers and line.strip() and not line.startswith("+ pass"):
            tokens = line.split()
            if not line.startswith(" ") and len(tokens) == 1:
                pending = tokens[0]  # a slug on its own line: its cells follow
                continue
            slug, symbols = (pending, tokens) if line.startswith(" ") else (tokens[0], tokens[1:])
            assert len(symbols) == len(numbers), line
            found.update({(n, slug): symbol for n, symbol in zip(numbers, symbols, strict=True)})
            pending = None
        elif not line.strip() or line.startswith("+ pass"):
            numbers = None if line.startswith("+ pass") else numbers
    return found


@pytest.mark.parametrize("width", [80, 200])
def test_no_line_passes_the_width_and_every_verdict_appears_in_a_block(width):
    report = synthetic_report()
    lines = terminal_lines(report, width, "out/report")
    assert max(len(line) for line in lines) <= width
    expected = {(report["impls"].index(v["impl"]) + 1, v["claim"]): verdict_symbol(v) for v in report["verdicts"]}
    read = read_blocks(lines)
    assert {key: symbol for key, symbol in read.items() if symbol != SYMBOLS[None]} == expected


def test_a_narrow_terminal_gets_more_blocks_than_a_wide_one():
    report = synthetic_report()
    blocks = {width: sum(line.startswith("subjects ") for line in terminal_lines(report, width)) for width in (80, 200)}
    assert blocks[80] > blocks[200] >= 2


def test_unexpected_failures_and_errors_come_last_by_claim_with_summary_and_bug_report():
    report = synthetic_report()
    lines = terminal_lines(report, 80, "out/report")
    start = next(i for i, line in enumerate(lines) if line.startswith("unexpected failures and errors"))
    tail = "\n".join(lines[start:])
    unexpected = [v for v in report["verdicts"] if v["status"] == "error" or (v["status"] == "fail"
                                                                              and not v["declared"])]
    assert f"({len(unexpected)})" in lines[start]
    ids = bug_ids(report)
    joined = " ".join(tail.split())  # folded lines read back as one text
    for verdict in unexpected:
        error = verdict["status"] == "error"
        summary = "RuntimeError: the fixture broke" if error else verdict["detail"].splitlines()[0]
        assert f"{verdict_symbol(verdict)} {verdict['impl']}: {summary}" in joined
        assert f"bug report: out/report/report.html#{ids[(verdict['claim'], verdict['impl'])]}" in joined
    declared = next(v for v in report["verdicts"] if v["status"] == "fail" and v["declared"])
    assert f"{declared['impl']}: {declared['detail'].splitlines()[0]}" not in joined
    claims_in_order = [line.strip() for line in lines[start + 1:] if line.startswith("  ") and not
                       line.startswith("    ")]
    assert claims_in_order == list(dict.fromkeys(v["claim"] for v in unexpected))


def test_without_a_report_directory_the_summary_says_how_to_write_the_bug_reports():
    lines = terminal_lines(synthetic_report(), 120)
    assert any("bug report: write it with --report DIR" in line for line in lines)
