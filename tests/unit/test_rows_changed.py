"""`attention-spec rows MEASURED`: the rows a file written by --accept-expectations adds to the table and those it
leaves out, compared as rows (subject, claim, dtypes, deviation), whatever the files' order, grouping and comments."""

from __future__ import annotations

from harness.command_line.cli import main
from protocol.expectations import rows_changed

ROW = '''[[row]]
subject = "{subject}"
claim = [{claims}]
dtypes = ["float64"]
deviation = "{deviation}"
why = "w"
reported = "here: a test"
'''


def _table(*rows: tuple[str, str, str]) -> str:
    return "\n".join(ROW.format(subject=s, claims=c, deviation=d) for s, c, d in rows)


def test_rows_are_compared_whatever_their_grouping_and_order():
    table = _table(("numpy-tiled", '"sdpa-formula", "rows-sum-to-one"', "float32-softmax"))
    measured = "# written by accept mode\n" + _table(("numpy-tiled", '"rows-sum-to-one"', "float32-softmax"),
                                                     ("numpy-tiled", '"causal-alignment"', "keyless-row-nan"),
                                                     ("numpy-tiled", '"sdpa-formula"', "float32-softmax"))
    assert rows_changed(table, measured) == (["numpy-tiled | causal-alignment | float64 | keyless-row-nan"], [])
    assert rows_changed(measured, table) == ([], ["numpy-tiled | causal-alignment | float64 | keyless-row-nan"])


def test_the_command_prints_the_rows_and_says_what_it_cannot_read(tmp_path, capsys):
    (tmp_path / "table.toml").write_text(_table(("numpy-tiled", '"sdpa-formula"', "float32-softmax")))
    (tmp_path / "measured.toml").write_text(_table(("numpy-tiled", '"sdpa-formula"', "float32-result")))
    assert main(["rows", str(tmp_path / "measured.toml"), "--table", str(tmp_path / "table.toml")]) == 0
    assert capsys.readouterr().out.splitlines() == ["+ numpy-tiled | sdpa-formula | float64 | float32-result",
                                                    "- numpy-tiled | sdpa-formula | float64 | float32-softmax",
                                                    "1 added, 1 left out"]
    assert main(["rows", str(tmp_path / "missing.toml"), "--table", str(tmp_path / "table.toml")]) == 2
    assert "missing.toml" in capsys.readouterr().err
