"""harness.reporting.browser: headless Chromium finds broken images and links in a page and takes its screenshot.

Each test builds its page in tmp_path, with PNGs written here (zlib + struct), so a failure points at the
browser check and not at a figure. Without a browser the tests that need one skip with the reason; CI
installs Chromium (.ci/run), so there they run.
"""

from __future__ import annotations

import re
import struct
import zlib
from pathlib import Path

import pytest

from harness.reporting.browser import (
    WIDTH,
    BrowserError,
    BrowserUnavailable,
    check_in_browser,
    find_browser,
    png_defect,
)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(width: int, height: int, rgb: tuple[int, int, int] = (255, 0, 0)) -> bytes:
    """A valid RGB PNG of one colour."""
    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows))
            + _chunk(b"IEND", b""))


def png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", data[16:24])


def page(directory: Path, body: str, name: str = "report.html") -> Path:
    path = directory / name
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>t</title></head>"
                    f"<body>{body}</body></html>", encoding="utf-8")
    return path


def test_no_browser_is_named() -> None:
    with pytest.raises(BrowserUnavailable, match="no-such-browser-here"):
        find_browser(("no-such-browser-here",))


def test_png_defect_reads_whole_and_damaged_files() -> None:
    good = png(7, 5)
    assert png_defect(good) is None
    assert png_defect(b"GIF89a") == "not a PNG"
    assert "truncated" in png_defect(good[: len(good) // 2])
    damaged = bytearray(good)
    damaged[good.index(b"IDAT") + 6] ^= 0xFF
    assert "CRC" in png_defect(bytes(damaged))
    short = (good[:8] + _chunk(b"IHDR", good[16:29]) + _chunk(b"IDAT", zlib.compress(b"\x00" * 4))
             + _chunk(b"IEND", b""))
    assert "needs" in png_defect(short)


def test_whole_page_passes(tmp_path: Path, browser: str) -> None:
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "a.png").write_bytes(png(40, 30))
    (tmp_path / "b.png").write_bytes(png(8, 8, (0, 0, 255)))
    page(tmp_path, "<h2 id='section'>S</h2>", "other.html")
    target = page(tmp_path, """
        <h1 id="top-title">Report</h1><a name="legacy"></a>
        <img src="figures/a.png" alt="a"><img src="b.png" loading="lazy" style="margin-top:20000px">
        <a href="#top-title">up</a> <a href="#legacy">old anchor</a> <a href="#">top</a>
        <a href="other.html">other</a> <a href="other.html#section">other's section</a>
        <a href="report.html#top-title">self</a> <a href="https://example.org/x">web</a> <a href="mailto:a@b">m</a>
    """)
    before = sorted(tmp_path.rglob("*")), target.read_bytes()
    result = check_in_browser(target, browser=browser)
    assert result.problems() == [] and result.ok
    assert [(i.src, i.width, i.height) for i in result.images] == [("figures/a.png", 40, 30), ("b.png", 8, 8)]
    kinds = {link.href: link.kind for link in result.links}
    assert kinds == {"#top-title": "fragment", "#legacy": "fragment", "#": "fragment", "other.html": "file",
                     "other.html#section": "file", "report.html#top-title": "file",
                     "https://example.org/x": "web", "mailto:a@b": "other"}
    # the report is read, never written, and nothing is left beside it
    assert (sorted(tmp_path.rglob("*")), target.read_bytes()) == before


def test_each_breakage_is_named(tmp_path: Path, browser: str) -> None:
    good = png(20, 20)
    (tmp_path / "fine.png").write_bytes(good)
    (tmp_path / "corrupt.png").write_bytes(b"this is no PNG")
    (tmp_path / "cut.png").write_bytes(good[: len(good) - 20])
    page(tmp_path, "<h2 id='there'>S</h2>", "other.html")
    target = page(tmp_path, """
        <h1 id="here">R</h1>
        <img src="fine.png"><img src="gone.png"><img src="corrupt.png"><img src="cut.png">
        <a href="#here">fine</a> <a href="#missing">dangling</a> <a href="nowhere.html">lost file</a>
        <a href="other.html#there">fine</a> <a href="other.html#elsewhere">lost section</a>
    """)
    result = check_in_browser(target, browser=browser)
    problems = result.problems()
    assert len(problems) == 6, problems
    assert [i.src for i in result.broken_images] == ["gone.png", "corrupt.png", "cut.png"]
    assert [link.href for link in result.broken_links] == ["#missing", "nowhere.html", "other.html#elsewhere"]
    expected = [r"'gone\.png' did not load: no such file .*gone\.png",
                r"'corrupt\.png' did not load: the browser could not decode .*corrupt\.png",
                r"'cut\.png' is shown only in part: .*cut\.png is not a whole PNG",
                r"'#missing' .* names no element of the page .*'missing'",
                r"'nowhere\.html' .* points to a missing file .*nowhere\.html",
                r"'other\.html#elsewhere' .* names no element 'elsewhere' in .*other\.html"]
    for sentence, pattern in zip(problems, expected, strict=True):
        assert re.search(pattern, sentence), (pattern, sentence)


def test_large_image_is_waited_for(tmp_path: Path, browser: str) -> None:
    """An 8000 x 8000 image (256 M pixel values) is still loaded and drawn when the record is written."""
    (tmp_path / "huge.png").write_bytes(png(8000, 8000, (0, 128, 0)))
    result = check_in_browser(page(tmp_path, "<img src='huge.png' width='600'>"), browser=browser)
    assert result.ok, result.problems()
    assert (result.images[0].width, result.images[0].decoded) == (8000, True)


def test_screenshot_shows_the_page(tmp_path: Path, browser: str) -> None:
    matplotlib_image = pytest.importorskip("matplotlib.image")
    (tmp_path / "red.png").write_bytes(png(100, 100, (255, 0, 0)))
    target = page(tmp_path, "<div style='height:2500px'></div>"
                            "<img src='red.png' style='position:absolute; left:200px; top:2400px'>")
    shot = tmp_path / "out" / "report.png"
    result = check_in_browser(target, screenshot=shot, browser=browser)
    assert result.screenshot == shot.resolve()
    width, height = png_size(shot.read_bytes())
    assert png_defect(shot.read_bytes()) is None
    assert width == WIDTH and height == result.height >= 2500
    pixels = matplotlib_image.imread(shot)
    assert tuple(pixels[2450, 250, :3]) == (1.0, 0.0, 0.0), "the image near the bottom is in the screenshot"
    assert tuple(pixels[2450, 50, :3]) == (1.0, 1.0, 1.0)
    # a fixed height, when asked
    check_in_browser(target, screenshot=shot, screenshot_height=600, browser=browser)
    assert png_size(shot.read_bytes()) == (WIDTH, 600)


def test_page_that_leaves_is_an_error(tmp_path: Path, browser: str) -> None:
    """A page that navigates away leaves no record of its images: an error, never a pass."""
    target = page(tmp_path, "<img src='gone.png'><script>location.replace('about:blank')</script>")
    with pytest.raises(BrowserError, match="never finished"):
        check_in_browser(target, browser=browser)


def test_timeout_is_an_error(tmp_path: Path, browser: str) -> None:
    with pytest.raises(BrowserError, match=r"did not finish within 0\.01 s"):
        check_in_browser(page(tmp_path, "<p>x</p>"), timeout_s=0.01, browser=browser)


def test_the_command_line_names_a_missing_browser(tmp_path, monkeypatch, capsys):
    import harness.reporting.browser as browser

    def absent(*_):
        raise BrowserUnavailable("no chromium here")

    monkeypatch.setattr(browser, "find_browser", absent)
    page = tmp_path / "page.html"
    page.write_text("<p>hi</p>")
    assert browser.main([str(page)]) == 3
    assert browser.main(["--optional", str(page), str(tmp_path / "shot.png")]) == 0
    assert "not checked in a browser: no chromium here" in capsys.readouterr().out
    assert not (tmp_path / "shot.png").exists()
