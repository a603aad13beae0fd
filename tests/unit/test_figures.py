"""harness.reporting.figures: every exhibit kind drawn, curves that disagree drawn apart and named, the worked
examples, and a failing counterexample's weights read off the implementation that failed."""

from __future__ import annotations

import numpy as np
import pytest

from harness.api.exhibits import ExhibitError, exhibit
from harness.reporting.figures import OUTLIER, draw_figures
from protocol.registry import load_impl, variants
from specs.problem_code import rebuild
from specs.problems import build

pytest.importorskip("matplotlib", reason="the report's pictures are drawn with matplotlib")
plt = pytest.importorskip("matplotlib.pyplot")

WRONG = "tests/fixtures/report_impls.py:keys_reversed"


def _curves(impl: str, entropy: list[float]) -> dict:
    return {"name": "entropy-vs-dk", "kind": "curves", "caption": "Row entropy against d_k.", "impl": impl,
            "claims": ["scale-keeps-softmax-flat"],
            "data": {"x_label": "d_k", "y_label": "entropy", "log_x": True,
                     "series": {"scaled": {"x": [4, 16, 64], "y": entropy}}}}


def _report(verdicts: list[dict], exhibits: list[dict]) -> dict:
    return {"claims": [{"slug": "sdpa-formula", "holds": True}, {"slug": "query-compared-only-with-other-tokens",
                                                                  "holds": False}],
            "verdicts": verdicts, "exhibits": exhibits}


def _failing(claim: str, impl: str, problem: str) -> dict:
    return {"claim": claim, "impl": impl, "status": "fail", "counterexample": {"problem": problem}}


def _image(path) -> np.ndarray:
    return plt.imread(path)


def test_every_kind_is_drawn_and_a_disagreeing_curve_is_named(tmp_path):
    exhibits = [_curves(f"good-{i}", [1.0, 1.01 + 0.001 * i, 1.02]) for i in range(4)]
    exhibits.append(_curves("bad", [1.0, 0.5, 0.1]))
    exhibits.append({"name": "weights", "kind": "heatmaps", "caption": "Weights.", "impl": "good-0", "claims": [],
                     "data": {"panels": {"a": [[0.5, 0.5], [1.0, 0.0]], "b": [[1.0, 0.0], [0.0, "nan"]]}}})
    exhibits.append({"name": "scores", "kind": "histograms", "caption": "Scores.", "impl": "oracle", "claims": [],
                     "data": {"x_label": "score", "samples": {"d=4": [0.1, -0.3, 0.2], "d=64": [1.0, -2.0, 4.0]}}})
    section = draw_figures(_report([], exhibits), tmp_path, [])
    files = {f["file"]: f for f in section["drawn"]}
    assert set(files) == {"figures/entropy-vs-dk.png", "figures/weights-good-0.png", "figures/scores.png",
                          "figures/worked-examples.png"}
    for name in files:
        assert _image(tmp_path / name).shape[1] > 300, name
    caption = files["figures/entropy-vs-dk.png"]["caption"]
    assert "5 implementations" in caption and f"more than {OUTLIER:.0%} from the median): bad." in caption
    assert files["figures/entropy-vs-dk.png"]["claims"] == ["scale-keeps-softmax-flat"]
    assert {f["source"] for f in files.values()} == {"exhibit", "worked-examples"}


def test_a_failing_counterexample_shows_the_weights_the_implementation_applied(tmp_path):
    variant = variants([load_impl(WRONG)])[0]
    problem = build(n_q=3, n_k=4, d=4, seed=1)
    report = _report([_failing("sdpa-formula", variant.name, repr(problem)),
                      _failing("query-compared-only-with-other-tokens", variant.name, repr(problem)),
                      _failing("sdpa-formula", variant.name, repr(build(n_q=40, n_k=40, d=40)))], [])
    drawn = draw_figures(report, tmp_path, [variant])["drawn"]
    pictures = [f for f in drawn if f["source"] == "counterexample"]
    # the false seed sentence and the counterexample too large to read are not drawn
    assert [(f["claims"], f["impl"]) for f in pictures] == [(["sdpa-formula"], variant.name)]
    assert "largest difference" in pictures[0]["caption"]
    assert _image(tmp_path / pictures[0]["file"]).shape[1] > 600


def test_the_counterexample_is_rebuilt_bit_for_bit():
    problem = build(n_q=3, n_k=5, d=2, seed=7, mask_layout="full").scale_queries(3.0)
    again = rebuild(repr(problem))
    assert all(np.array_equal(getattr(problem, a), getattr(again, a)) for a in ("q", "k", "v", "mask"))


def test_without_matplotlib_the_report_says_why(tmp_path, monkeypatch):
    import harness.reporting.figures as figures

    def missing():
        raise ImportError("No module named 'matplotlib'")

    monkeypatch.setattr(figures, "_pyplot", missing)
    assert draw_figures(_report([], []), tmp_path, []) == {
        "drawn": [], "notes": ["no pictures: matplotlib is not installed (No module named 'matplotlib')"]}


def test_exhibits_are_checked_and_ignored_outside_a_run():
    with pytest.raises(ExhibitError, match="kind 'movie'"):
        exhibit("x", "movie", {}, caption="c")
    with pytest.raises(ExhibitError, match="needs a caption"):
        exhibit("x", "table", {}, caption="")
    exhibit("x", "table", {"columns": [], "rows": []}, caption="nothing records it here")


def test_exhibit_data_must_be_plain():
    from harness.engine.declarations import RUNNING, RunningCheck

    token = RUNNING.set(RunningCheck("p", ("sdpa-formula",)))
    try:
        exhibit("x", "table", {"columns": ["a"], "rows": [[np.float32(1.5), np.inf, np.int64(3)]]}, caption="c")
        assert RUNNING.get().exhibits[0]["data"] == {"columns": ["a"], "rows": [[1.5, "inf", 3]]}
        with pytest.raises(ExhibitError, match="only numbers, strings, lists and dicts"):
            exhibit("x", "table", {"rows": [object()]}, caption="c")
    finally:
        RUNNING.reset(token)


def test_rebuild_names_what_it_cannot_read():
    from specs.validation import AttentionInputError

    with pytest.raises(AttentionInputError, match="rebuild needs a problem's repr"):
        rebuild("")


def test_curves_that_differ_by_noise_are_not_drawn_apart(tmp_path):
    exhibits = [_curves(f"good-{i}", [1.0, 1.01 + 0.001 * i, 1.02]) for i in range(4)]
    exhibits.append(_curves("noisy", [1.0, 0.5, 0.1]))
    for record in exhibits:
        record["data"]["outliers"] = False
    (figure,) = [f for f in draw_figures(_report([], exhibits), tmp_path, [])["drawn"] if f["source"] == "exhibit"]
    assert "5 implementations" in figure["caption"] and "Drawn apart" not in figure["caption"]
