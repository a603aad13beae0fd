"""benchmarks/suite_speed.py: the cases a user runs, chosen by name, and the side-by-side ratio it writes."""

from __future__ import annotations

import pytest

from benchmarks import suite_speed


def test_cases_are_chosen_by_name_in_their_own_order():
    assert [case.name for case in suite_speed.choose("main, numpy")] == ["numpy", "main"]
    assert suite_speed.choose("") == []


def test_an_unknown_case_is_named():
    with pytest.raises(ValueError, match=r"unknown suite cases \['nmupy'\]; valid: numpy, torch, cuda, main"):
        suite_speed.choose("nmupy")


def test_each_check_runs_the_users_command_and_the_main_job_as_tox_does(tmp_path):
    check = suite_speed.CASES["torch"].command(tmp_path)
    assert check[1:5] == ["-m", "harness.command_line.cli", "check", "impls.torch.torch_flash_records:flash_tiled"]
    main = suite_speed.CASES["main"].command(tmp_path)
    assert main[1:5] == ["-m", "pytest", "properties", "interpretations"] and "-n" in main


def _run(seconds: float) -> dict:
    return {"seconds": seconds, "exit": 0, "verdicts": {"pass": 3}, "records": {"numpy-reference[float32]": 1.5},
            "tail": ""}


def test_the_ratio_is_ours_over_the_baseline_taken_side_by_side():
    data = suite_speed.summarise([{"case": "numpy", "what": "w", "ours": _run(12.0), "baseline": _run(30.0)},
                                  {"case": "main", "what": "m", "ours": _run(150.0)}], baseline="../before",
                                 environment={})
    assert [row["ratio"] for row in data["cases"]] == [0.4, None]
    text = suite_speed.markdown(data)
    assert "| numpy | w | 12.0 | 0 | 30.0 | 0.400 |" in text and "numpy-reference[float32] 1.5" in text
