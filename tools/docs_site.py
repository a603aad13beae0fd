"""The built documentation in a real browser: every page of the MkDocs site opened in headless Chromium with
harness.reporting.browser's check (images decode, links and #fragments resolve; web links are listed, not fetched).

    python -m tools.docs_site SITE_DIR    exit 0: every page whole; 1: a page has problems (each printed), or the
                                          directory holds no built site; 3: no browser on this machine
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.reporting.browser import BrowserCheck, BrowserUnavailable, check_in_browser


class SiteError(ValueError):
    """The directory is not a built site (no index.html)."""


NOT_OPENED = ("404.html",)  # the server's page for any missing URL: its links start at the server's root, not on disk


def site_pages(site: Path) -> list[Path]:
    """Every HTML page a reader navigates to in the built site, index.html first (not NOT_OPENED)."""
    index = site / "index.html"
    if not index.is_file():
        raise SiteError(f"{site} holds no built site: no index.html (build it with `mkdocs build`)")
    others = (p for p in site.rglob("*.html") if p != index and p.relative_to(site).as_posix() not in NOT_OPENED)
    return [index] + sorted(others)


def check_site(site: Path, timeout_s: float = 60) -> list[BrowserCheck]:
    """Each page's check, in site_pages' order."""
    return [check_in_browser(page, timeout_s=timeout_s) for page in site_pages(site)]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    site = Path(args[0])
    try:
        checks = check_site(site)
    except SiteError as exc:
        print(exc)
        return 1
    except BrowserUnavailable as exc:
        print(f"{site} not checked in a browser: {exc}")
        return 3
    broken = 0
    for check in checks:
        problems = check.problems()
        broken += bool(problems)
        print(f"{check.page.relative_to(site.resolve())}: {len(check.images)} images, {len(check.links)} links, "
              f"{check.seconds:.1f} s" + (f", {len(problems)} problems" if problems else ""))
        for sentence in problems:
            print(f"  {sentence}")
    print(f"{len(checks)} pages checked in {checks[0].browser if checks else 'no browser'}: "
          f"{broken} with problems")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
