"""report.html: the run as a document to read (CONTRACT 2's HTML form).

Readings first (each with its claims' verdicts on every implementation, its evidence and its pictures), then
every claim grouped by seed and section with its statement (the seed's sentence on demand) against the
implementations, named in the column headers; a failing cell links to its bug report, which shows the
counterexample's weights as a picture when harness.reporting.figures could draw them.
"""

from __future__ import annotations

import html
from collections import defaultdict

from harness.reporting.kernel_resources import html_section
from harness.reporting.report_text import bug_ids, exhibit_tables, reading_claims, tally, verdict_symbol
from specs.readings import READINGS, SEED_TITLES

esc = html.escape
FOLDED_ROWS = 12  # evidence tables longer than this start folded
CLASSES = {"+": "pass", "F": "fail", "x": "declared", "E": "fail", "s": "skip", ".": "none"}
STYLE = """
body{font-family:system-ui,sans-serif;max-width:none;margin:1em 2em;line-height:1.4}
h1{margin-bottom:.2em} nav ol{columns:3} figure{display:inline-block;margin:.5em 1em .5em 0;max-width:1000px}
figure img{max-width:100%;border:1px solid #ddd} figcaption{font-size:.9em;color:#333;max-width:900px}
table{border-collapse:collapse} td,th{border:1px solid #ccc;padding:2px 5px;vertical-align:top}
table.matrix td,table.grid td{text-align:center;min-width:1.3em} table.matrix thead th,table.grid thead th{height:14em;
white-space:nowrap;vertical-align:bottom}
table thead th span{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal;font-size:.8em}
table.matrix th.claim{text-align:left;min-width:26em;max-width:34em;font-weight:normal}
tr.seed th{background:#334;color:#fff;text-align:left;font-size:1.1em} tr.section th{background:#e8e8f0;text-align:left}
.statement{font-size:.85em;color:#333} td.pass{background:#d4f7d4} td.fail{background:#ff9c9c}
td.declared{background:#ffe2a8} td.skip{background:#eee} td a{color:inherit;text-decoration:none;font-weight:bold}
pre{background:#f6f6f6;padding:6px;overflow:auto;max-width:100%} section.bug{border-top:1px solid #ccc;margin-top:1em}
.unexpected{color:#b00;font-weight:bold}
"""


def _figure(figure: dict) -> str:
    return (f'<figure><img src="{esc(figure["file"])}" alt="{esc(figure["caption"][:120])}">'
            f"<figcaption>{esc(figure['caption'])}</figcaption></figure>")


def _table(columns: list, rows: list) -> str:
    head = "".join(f"<th>{esc(str(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{esc(str(x))}</td>" for x in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _reading_sections(report: dict, figures: list[dict], bugs: dict) -> str:
    by_slug = {c["slug"]: c for c in report["claims"]}
    parts = []
    for reading in READINGS:
        slugs = reading_claims(report, reading)
        rows = []
        for slug in slugs:
            counts, failing = tally(report, slug)
            links = ", ".join(f'<a href="#{bugs[(slug, impl)]}">{esc(impl)}</a>'
                              for impl in failing if (slug, impl) in bugs)
            if not by_slug[slug]["holds"] and failing and counts.startswith("declared"):
                links = (f"all {len(failing)} it applies to: the seed's sentence is false as written "
                         f'(<a href="#{bugs[(slug, failing[0])]}">the first bug report</a>)')
            note = by_slug[slug]["note"]
            rows.append(f'<tr><td><a href="#claim-{esc(slug)}"><code>{esc(slug)}</code></a> ({by_slug[slug]["kind"]})'
                        f'<div class="statement">{esc(by_slug[slug]["statement"])}</div>'
                        + (f'<div class="statement"><em>{esc(note)}</em></div>' if note else "") + "</td>"
                        f"<td>{esc(counts)}</td><td>{links}</td></tr>")
        tables = "".join(f"<details><summary><b>{esc(caption)}</b> ({len(body)} rows)</summary>{_table(columns, body)}"
                         "</details>" if len(body) > FOLDED_ROWS else f"<h4>{esc(caption)}</h4>{_table(columns, body)}"
                         for caption, columns, body in exhibit_tables(report, slugs))
        pictures = "".join(_figure(f) for f in figures if f["source"] == "exhibit" and set(f["claims"]) & set(slugs))
        verdicts = ("<table><tr><th>claim</th><th>verdicts</th><th>failing on</th></tr>" + "".join(rows) + "</table>"
                    + _reading_grid(report, slugs, bugs) if rows else "<p>None of this reading's claims ran in this "
                    "report.</p>")
        parts.append(f'<section id="reading-{reading.key}"><h3>{esc(reading.title)}</h3><p>{esc(reading.summary)}'
                     f"</p>{verdicts}{tables}{pictures}</section>")
    return "".join(parts)


def _cell(verdict: dict | None, slug: str, subject: str, bugs: dict) -> str:
    """One verdict as a coloured table cell; a failure's letter links to its bug report."""
    symbol = verdict_symbol(verdict)
    text = f'<a href="#{bugs[(slug, subject)]}">{symbol}</a>' if (slug, subject) in bugs else symbol
    title = esc(f"{subject}: " + (verdict["detail"][:200] if verdict else "not applicable"))
    return f'<td class="{CLASSES[symbol]}" title="{title}">{text}</td>'


def _reading_grid(report: dict, slugs: list[str], bugs: dict) -> str:
    """The reading's claims against every implementation they apply to, folded away until asked for."""
    cells = {(v["claim"], v["impl"]): v for v in report["verdicts"] if v["claim"] in slugs}
    subjects = [s for s in report["impls"] if any((slug, s) in cells for slug in slugs)]
    head = "".join(f'<th title="{esc(s)}"><span>{esc(s)}</span></th>' for s in subjects)
    rows = "".join(f'<tr><th><a href="#claim-{esc(slug)}"><code>{esc(slug)}</code></a></th>'
                   + "".join(_cell(cells.get((slug, s)), slug, s, bugs) for s in subjects) + "</tr>" for slug in slugs)
    return (f"<details><summary>verdicts per implementation ({len(subjects)})</summary><table class=\"grid\">"
            f"<thead><tr><th>claim</th>{head}</tr></thead><tbody>{rows}</tbody></table></details>")


def _matrix(report: dict, bugs: dict) -> str:
    cells = {(v["claim"], v["impl"]): v for v in report["verdicts"]}
    subjects = report["impls"]
    grouped: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for claim in report["claims"]:
        if any((claim["slug"], s) in cells for s in subjects):
            seed, _, section = claim["source"].partition(" § ")
            grouped[seed][section].append(claim)
    head = "".join(f'<th title="{esc(s)}"><span>{esc(s)}</span></th>' for s in subjects)
    body = []
    for seed, sections in grouped.items():
        body.append(f'<tr class="seed"><th colspan="{len(subjects) + 1}">{esc(SEED_TITLES.get(seed, seed))}</th></tr>')
        for section, claims in sections.items():
            body.append(f'<tr class="section"><th colspan="{len(subjects) + 1}">§ {esc(section)}</th></tr>')
            for claim in claims:
                slug = claim["slug"]
                tds = [_cell(cells.get((slug, subject)), slug, subject, bugs) for subject in subjects]
                holds = "" if claim["holds"] else " <em>(false as written)</em>"
                body.append(
                    f'<tr><th class="claim" id="claim-{esc(slug)}"><code>{esc(slug)}</code>{holds}'
                    f'<div class="statement">{esc(claim["statement"])}</div><details><summary>seed sentence'
                    f"</summary>{esc(claim['original'])}</details></th>{''.join(tds)}</tr>")
    return (f'<table class="matrix"><thead><tr><th>claim</th>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            "</table><p>+ pass, F fail, x declared fail (a known defect or a false seed sentence), E error, "
            "s skip, . not applicable. Hover a cell for its detail; a letter links to its bug report.</p>")


def _bug_reports(report: dict, figures: list[dict], bugs: dict, unexpected: bool) -> str:
    """The bug reports of the failures and errors no row declares (`unexpected`), or of the declared ones."""
    by_slug = {c["slug"]: c for c in report["claims"]}
    pictures = {(f["claims"][0], f["impl"]): f for f in figures if f["source"] == "counterexample"}
    parts = []
    for v in report["verdicts"]:
        key = (v["claim"], v["impl"])
        if key not in bugs or v["declared"] == unexpected:
            continue
        claim = by_slug.get(v["claim"], {})
        label = "declared" if v["declared"] else '<span class="unexpected">UNEXPECTED</span>'
        repro = (v.get("counterexample") or {}).get("repro") or ""
        picture = _figure(pictures[key]) if key in pictures else ""
        parts.append(
            f'<section class="bug" id="{bugs[key]}"><h3><a href="#claim-{esc(v["claim"])}"><code>'
            f"{esc(v['claim'])}</code></a> on <code>{esc(v['impl'])}</code> ({v['status']}, {label})</h3>"
            f"<p>{esc(claim.get('statement', ''))}</p><p>seed: {esc(claim.get('source', ''))} — "
            f"{esc(claim.get('original', ''))}</p>" + (f"<p>why: {esc(v['why'])}</p>" if v.get("why") else "")
            + f"<pre>{esc(v['detail'])}</pre>" + (f"<pre>{esc(repro)}</pre>" if repro else "") + picture
            + "</section>")
    return "".join(parts) or f"<p>{'None.' if unexpected else 'None declared.'}</p>"


def render_html(report: dict) -> str:
    figures_section = report.get("figures") or {"drawn": [], "notes": []}
    figures = figures_section["drawn"]
    bugs = bug_ids(report)
    s = report["summary"]
    checked = len({v["claim"] for v in report["verdicts"]})
    # what needs a reader first: the unexpected failures, then the declared ones, then the readings
    contents = ["unexpected", "declared", "readings", "worked-examples", "matrix", "not-checkable", "not-run"]
    titles = {"unexpected": f"Unexpected failures ({s['unexpected_fail'] + s['error']})",
              "declared": f"Declared failures ({s['expected_fail']})", "readings": "Readings",
              "worked-examples": "Worked examples", "matrix": "Claims by seed", "not-checkable": "Not checkable",
              "not-run": "Not run on this machine"}
    nav = "".join(f'<li><a href="#{key}">{titles[key]}</a></li>' for key in contents)
    notes = "".join(f"<li>{esc(n)}</li>" for n in figures_section["notes"])
    worked = "".join(_figure(f) for f in figures if f["source"] == "worked-examples")
    not_checkable = "".join(f"<li><code>{esc(c['slug'])}</code> ({esc(c['source'])}): {esc(c['why'])}</li>"
                            for c in report["claims"] if c["kind"] == "not-checkable")
    not_run = "".join(f"<li><code>{esc(u['target'])}</code>: {esc(u['reason'])}</li>" for u in report["unavailable"])
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Attention: claims x implementations</title>"
        f"<style>{STYLE}</style></head><body><h1>Attention: claims x implementations</h1>"
        f"<p>{checked} claims checked on {len(report['impls'])} subjects in {report['duration_s']} s (profile "
        f"{esc(str(report['profile']))}): {s['pass']} pass, {s['expected_fail']} declared fail, "
        f"<span class=\"{'unexpected' if s['unexpected_fail'] else ''}\">{s['unexpected_fail']} unexpected "
        f"fail</span>, {s['error']} error, {s['skip']} skip.</p><nav><ol>{nav}</ol></nav>"
        + (f"<ul>{notes}</ul>" if notes else "")
        + f'<h2 id="unexpected">{titles["unexpected"]}</h2>{_bug_reports(report, figures, bugs, unexpected=True)}'
        f'<h2 id="declared">{titles["declared"]}</h2>{_bug_reports(report, figures, bugs, unexpected=False)}'
        f'<h2 id="readings">Readings</h2>{_reading_sections(report, figures, bugs)}'
        f'<h2 id="worked-examples">Worked examples</h2>{worked}'
        f'<h2 id="matrix">Claims by seed</h2>{_matrix(report, bugs)}'
        f'<h2 id="not-checkable">Not checkable</h2><ul>{not_checkable}</ul>'
        f'<h2 id="not-run">Not run on this machine</h2><ul>{not_run or "<li>everything ran</li>"}</ul>'
        f"{html_section(report['kernels']) if report.get('kernels') else ''}</body></html>\n")
