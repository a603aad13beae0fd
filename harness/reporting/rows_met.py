"""Whether a run met an implementation's rows of the expectations table exactly (CONTRACT 2: a row covers exactly its
symptom): read from the run's report.json, so the suite's own tests and the defect zoo's runner judge a run alike."""

from __future__ import annotations

from protocol.known_defects import Row


def missed_rows(subject: str, rows: tuple[Row, ...], report: dict) -> tuple[str, ...]:
    """What keeps `subject` (a name as the run reports it, without [dtype]) from meeting exactly its `rows` in a
    run's `report`: a row whose claim did not fail as the row says (in one of its dtypes: the verdict a failure the
    row covered, the row not listed as uncaught), and a failure or error of the subject outside its rows."""
    verdicts = [v for v in report["verdicts"] if v["impl"].rpartition("[")[0] == subject]
    found = {(v["claim"], v["impl"]): v for v in verdicts}
    missed = []
    for row in rows:
        for dtype in row.dtypes:
            variant = f"{subject}[{dtype}]"
            verdict = found.get((row.claim, variant))
            uncaught = any(f" {variant} declares" in line and row.describe() in line
                           for line in report["uncaught_declared_defects"])
            if verdict is None or verdict["status"] != "fail" or not verdict["expected"] or uncaught:
                missed.append(f"{variant}: not caught as {row.describe()}; "
                              f"{verdict and (verdict['status'], verdict['detail'][:300])}")
    missed += [f"{v['impl']}: {v['claim']} {v['status']} outside its rows: {v['detail'][:300]}"
               for v in verdicts if v["status"] in ("fail", "error") and not v["expected"]]
    return tuple(missed)
