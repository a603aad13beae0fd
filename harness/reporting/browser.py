"""report.html in a real browser: headless Chromium loads it, says which images did not load and which links
lead nowhere, and takes a screenshot (issue 10: "report.html must look right in a real browser").

How: the page is copied into a temporary directory with a <base> pointing back at the report's directory (so
its images load from where they lie; the report file itself is never changed) and a small script that, after
the `load` event, draws every <img> onto a canvas (a synchronous decode) and writes into the DOM, as JSON, each
image's src, `complete`, `naturalWidth` and decode result, each <a href>, every element id and <a name>, and the
document's height. `chromium --headless --dump-dom --virtual-time-budget=...` prints the DOM once the budget of
virtual time has run out (without the budget it prints it as `load` fires, before any deferred work), and
the JSON is read back from it. A page whose script did not finish is an error, not a pass. The injected <base>
comes first, so it overrides a <base> of the page's own (report.html has none).

Judging (no network is used):
- an image is broken when its naturalWidth is 0 or the browser could not draw it; a PNG file is also read
  (png_defect), since Chromium shows a truncated or corrupt PNG as far as it goes and calls it loaded;
- `#frag` must name an element id (or <a name>) of the rendered page; "#" and "#top" are the top of the page
  (the HTML standard's rule);
- a relative or file: link must point at an existing file, and when it carries a #fragment into an HTML file,
  that file must hold the id (read statically);
- http(s) links are listed (kind "web") but not fetched; mailto:, data:, javascript: are kind "other".
"""

from __future__ import annotations

import dataclasses
import html.parser
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
MARK = "attention-spec-browser-check"
WIDTH = 1400
# A 47950 px tall window came back blank below about 40000 px (Chromium 156, software rendering), and time grows
# with height (1400 x 16000: 3.4 s, x 32000: 8 s, x 47950: 24 s on 2 cores): longer documents are cut here.
MAX_SCREENSHOT_HEIGHT = 16000
VIRTUAL_TIME_BUDGET_MS = 30000

# Runs before the page's own scripts and any CSP <meta> (it is the first element of <head>): lazy images are made
# eager, so each image is fetched whatever the window's height (Chromium 156 headless fetched a lazy image 20000 px
# below the window without it; other versions may not). After `load`, each image is drawn onto a canvas:
# drawImage decodes synchronously and throws on a broken image. (img.decode() would be asynchronous, and the
# DOM is printed when virtual time runs out, which it does without waiting for a real-time decode: a 6000x6000
# PNG of 123 MB shown 300 px wide had not settled its decode() when the DOM was printed.)
_SCRIPT = """<script>(function () {
  const mark = "@MARK@";
  document.addEventListener("DOMContentLoaded", () => {
    for (const img of document.images) if (img.loading === "lazy") img.loading = "eager";
  });
  addEventListener("load", () => {
    const imgs = Array.from(document.images);
    const canvas = document.createElement("canvas").getContext("2d");
    const decoded = imgs.map(i => {
      try { canvas.drawImage(i, 0, 0, 1, 1); return true; } catch (e) { return false; }
    });
    const ids = Array.from(document.querySelectorAll("[id]"), e => e.id);
    const names = Array.from(document.querySelectorAll("a[name]"), e => e.getAttribute("name"));
    const record = {
      images: imgs.map((i, k) => ({src: i.getAttribute("src") || "", url: i.currentSrc || i.src || "",
                                   complete: i.complete, width: i.naturalWidth, height: i.naturalHeight,
                                   decoded: decoded[k]})),
      links: Array.from(document.querySelectorAll("a[href]"),
                        a => ({href: a.getAttribute("href"), url: a.href, text: a.textContent.trim().slice(0, 80)})),
      anchors: ids.concat(names),
      height: document.documentElement.scrollHeight,
    };
    const out = document.createElement("script");
    out.type = "application/json";
    out.id = mark;
    out.textContent = JSON.stringify(record).replace(/</g, "\\\\u003c");
    document.documentElement.appendChild(out);
  });
})();</script>""".replace("@MARK@", MARK)


class BrowserError(RuntimeError):
    """The browser ran but the check could not be made (it failed, timed out, or the page's script did not finish)."""


class BrowserUnavailable(BrowserError):
    """No Chromium (or Chrome) binary on this machine; the message says which names were looked for."""


@dataclasses.dataclass(frozen=True)
class Image:
    """One <img> as the browser rendered it; `src` is the attribute as written, `url` what it resolved to."""
    src: str
    url: str
    complete: bool
    width: int
    height: int
    decoded: bool
    problem: str | None = None

    @property
    def loaded(self) -> bool:
        return self.problem is None


@dataclasses.dataclass(frozen=True)
class Link:
    """One <a href>; kind is "fragment" (same page), "file", "web" (not fetched) or "other"."""
    href: str
    url: str
    kind: str
    text: str = ""
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclasses.dataclass(frozen=True)
class BrowserCheck:
    """What the browser showed of `page`: its images and links, those that failed, and the screenshot taken."""
    page: Path
    browser: str
    images: tuple[Image, ...]
    links: tuple[Link, ...]
    height: int
    seconds: float
    screenshot: Path | None = None

    @property
    def broken_images(self) -> tuple[Image, ...]:
        return tuple(i for i in self.images if not i.loaded)

    @property
    def broken_links(self) -> tuple[Link, ...]:
        return tuple(link for link in self.links if not link.ok)

    @property
    def ok(self) -> bool:
        return not self.broken_images and not self.broken_links

    def problems(self) -> list[str]:
        """One readable sentence per broken image or link (empty when the page is whole)."""
        return [i.problem for i in self.broken_images] + [link.problem for link in self.broken_links]


def find_browser(names: tuple[str, ...] = BROWSERS) -> str:
    """The path of the first Chromium-like binary on PATH; BrowserUnavailable names what was looked for."""
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise BrowserUnavailable(
        f"no headless browser: none of {', '.join(names)} is on PATH (Debian/Ubuntu: apt-get install chromium)")


def _run(argv: list[str], workdir: Path, timeout_s: float, what: str) -> str:
    """Run the browser in its own process group (its helpers die with it on a timeout); its stdout."""
    env = {**os.environ, "HOME": str(workdir), "XDG_CONFIG_HOME": str(workdir / "config"),
           "XDG_CACHE_HOME": str(workdir / "cache")}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                          start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise BrowserError(f"{what}: the browser did not finish within {timeout_s:g} s ({argv[0]})") from None
    if proc.returncode != 0:
        # Chromium's stderr is mostly D-Bus noise on a headless machine; keep the lines that are not
        said = [line for line in err.splitlines() if "dbus" not in line.lower()][-5:]
        raise BrowserError(f"{what}: {argv[0]} exited with status {proc.returncode}: " + " | ".join(said))
    return out


def _argv(browser: str, profile: Path, height: int, budget_ms: int) -> list[str]:
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-extensions", "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
            "--hide-scrollbars", "--force-device-scale-factor=1", f"--user-data-dir={profile}",
            f"--window-size={WIDTH},{height}", f"--virtual-time-budget={budget_ms}"]


def _instrumented(page: Path) -> str:
    """The page's text with a <base> back to its directory and the recording script first in <head>."""
    text = page.read_text(encoding="utf-8", errors="replace")
    inject = f'<base href="{page.parent.as_uri()}/">{_SCRIPT}'
    head = re.search(r"<head\b[^>]*>", text, re.IGNORECASE)
    if head:
        return text[:head.end()] + inject + text[head.end():]
    opening = re.search(r"<html\b[^>]*>", text, re.IGNORECASE)
    if opening:
        return text[:opening.end()] + f"<head>{inject}</head>" + text[opening.end():]
    return f"<head>{inject}</head>" + text


def _record(dom: str) -> dict:
    found = re.search(rf'<script type="application/json" id="{MARK}">(.*?)</script>', dom, re.DOTALL)
    if not found:
        raise BrowserError("the page's check script never finished: no record in the DOM Chromium printed "
                           "(the page navigated away or rewrote itself, or its `load` event did not come within the "
                           "virtual-time budget)")
    return json.loads(found.group(1))


class _Anchors(html.parser.HTMLParser):
    """The ids and <a name>s of an HTML file read as text (for links into another page of the report)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if value is not None and (key == "id" or (key == "name" and tag == "a")):
                self.names.add(value)


def _anchors_of(path: Path) -> set[str]:
    parser = _Anchors()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser.names


def _is_top(fragment: str) -> bool:
    return fragment == "" or fragment.lower() == "top"


def _file_path(url: str) -> Path:
    return Path(unquote(urlsplit(url).path))


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def png_defect(data: bytes) -> str | None:
    """Why `data` is not a whole PNG (None when it is): Chromium draws a truncated or corrupt PNG as far as it
    can and reports it loaded, so the file is read too: chunk CRCs, IEND, and the pixel stream's length."""
    if not data.startswith(_PNG_SIGNATURE):
        return "not a PNG"
    at, pixels, header = len(_PNG_SIGNATURE), bytearray(), None
    while True:
        if at + 8 > len(data):
            return "truncated: no IEND chunk"
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body, crc = data[at + 8:at + 8 + length], data[at + 8 + length:at + 12 + length]
        if len(crc) < 4:
            return f"truncated inside its {kind.decode('latin-1')} chunk"
        if zlib.crc32(kind + body) != struct.unpack(">I", crc)[0]:
            return f"its {kind.decode('latin-1')} chunk fails its CRC"
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body[:13])
        elif kind == b"IDAT":
            pixels += body
        elif kind == b"IEND":
            break
        at += 12 + length
    if header is None:
        return "no IHDR chunk"
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(bytes(pixels))
    except zlib.error as exc:
        return f"its pixel data does not inflate ({exc})"
    if not inflate.eof:
        return "its pixel data stops short"
    width, height, depth, colour, _, _, interlace = header
    row = 1 + (width * depth * _PNG_CHANNELS.get(colour, 4) + 7) // 8
    if interlace == 0 and len(raw) != height * row:
        return f"its pixel data holds {len(raw)} bytes where {width}x{height} needs {height * row}"
    return None


def _judge_image(raw: dict) -> Image:
    image = Image(src=raw["src"], url=raw["url"], complete=bool(raw["complete"]), width=int(raw["width"]),
                  height=int(raw["height"]), decoded=bool(raw["decoded"]))
    if image.width > 0 and image.decoded:
        url = urlsplit(image.url)
        if url.scheme == "file" and url.path.lower().endswith(".png") and _file_path(image.url).is_file():
            path = _file_path(image.url)
            defect = png_defect(path.read_bytes())
            if defect:
                return dataclasses.replace(image, problem=f"image {image.src!r} is shown only in part: {path} "
                                                          f"is not a whole PNG ({defect})")
        return image
    if not image.src and not image.url:
        why = "it has no src"
    elif urlsplit(image.url).scheme == "file":
        path = _file_path(image.url)
        why = (f"no such file {path}" if not path.exists()
               else f"the browser could not decode {path} ({path.stat().st_size} bytes)")
    else:
        why = f"{image.url} could not be fetched or decoded"
    return dataclasses.replace(image, problem=f"image {image.src!r} did not load: {why}")


def _judge_link(raw: dict, page: Path, anchors: set[str]) -> Link:
    href, text = raw["href"], raw.get("text", "")
    if href.startswith("#"):
        fragment = unquote(href[1:])
        link = Link(href, page.as_uri() + href, "fragment", text)
        if _is_top(fragment) or fragment in anchors:
            return link
        return dataclasses.replace(link, problem=f"link {href!r} ({text!r}) names no element of the page "
                                                 f"(no id or <a name> {fragment!r})")
    # the browser resolved it against our <base>, i.e. the report's own directory
    url = raw["url"] or urljoin(page.as_uri(), href)
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("http", "https"):
        return Link(href, url, "web", text)
    if scheme != "file":
        return Link(href, url, "other", text)
    link = Link(href, url, "file", text)
    target, fragment = _file_path(url), unquote(urlsplit(url).fragment)
    if not target.exists():
        return dataclasses.replace(link, problem=f"link {href!r} ({text!r}) points to a missing file {target}")
    if fragment and not _is_top(fragment) and target.suffix.lower() in (".html", ".htm"):
        names = anchors if target.resolve() == page.resolve() else _anchors_of(target)
        if fragment not in names:
            return dataclasses.replace(link, problem=f"link {href!r} ({text!r}) names no element {fragment!r} "
                                                     f"in {target}")
    return link


def check_in_browser(html_path: str | Path, screenshot: str | Path | None = None, timeout_s: float = 60,
                     screenshot_height: int | None = None, browser: str | None = None,
                     budget_ms: int = VIRTUAL_TIME_BUDGET_MS) -> BrowserCheck:
    """Load `html_path` in headless Chromium and judge its images and links; with `screenshot`, also save a PNG
    of the page (unmodified) WIDTH pixels wide and `screenshot_height` tall (default: the document's height,
    at most MAX_SCREENSHOT_HEIGHT). Each browser run is limited to `timeout_s` seconds.

    Raises BrowserUnavailable without a browser, BrowserError when the browser fails or the check cannot finish.
    """
    page = Path(html_path).resolve()
    if not page.is_file():
        raise FileNotFoundError(f"no page to check: {page}")
    binary = browser or find_browser()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="attention-spec-browser-") as tmp:
        work = Path(tmp)
        copy = work / "page.html"
        copy.write_text(_instrumented(page), encoding="utf-8")
        dom = _run(_argv(binary, work / "profile", 300, budget_ms) + ["--dump-dom", copy.as_uri()],
                   work, timeout_s, f"loading {page.name}")
        record = _record(dom)
        anchors = set(record["anchors"])
        images = tuple(_judge_image(raw) for raw in record["images"])
        links = tuple(_judge_link(raw, page, anchors) for raw in record["links"])
        height = int(record["height"])
        shot = None
        if screenshot is not None:
            shot = Path(screenshot).resolve()
            shot.parent.mkdir(parents=True, exist_ok=True)
            shot.unlink(missing_ok=True)
            tall = screenshot_height or min(max(height, 1), MAX_SCREENSHOT_HEIGHT)
            _run(_argv(binary, work / "profile", tall, budget_ms) + [f"--screenshot={shot}", page.as_uri()],
                 work, timeout_s, f"screenshot of {page.name}")
            if not shot.is_file() or shot.stat().st_size == 0:
                raise BrowserError(f"screenshot of {page.name}: the browser exited without writing {shot}")
    return BrowserCheck(page=page, browser=binary, images=images, links=links, height=height,
                        seconds=time.monotonic() - start, screenshot=shot)


def main(argv: list[str] | None = None) -> int:
    """python -m harness.reporting.browser [--optional] PAGE.html [SCREENSHOT.png]: print the problems; exit 1 when
    there are any, 3 when no browser can run it (0 with --optional: the main job's screenshot is a bonus there)."""
    args = sys.argv[1:] if argv is None else list(argv)
    optional = "--optional" in args
    args = [a for a in args if a != "--optional"]
    if not args or len(args) > 2:
        print(main.__doc__, file=sys.stderr)
        return 2
    try:
        result = check_in_browser(args[0], args[1] if len(args) > 1 else None)
    except BrowserUnavailable as exc:
        print(f"{args[0]} not checked in a browser: {exc}")
        return 0 if optional else 3
    print(f"{result.page}: {len(result.images)} images, {len(result.links)} links, "
          f"{result.seconds:.1f} s in {result.browser}")
    for sentence in result.problems():
        print(f"  {sentence}")
    return 1 if result.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
