"""tools/docs_site.py opens every page of a built site in the browser and fails on a broken one."""

from __future__ import annotations

import pytest

from tools import docs_site


def _page(path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>t</title></head><body>{body}</body>"
                    "</html>", encoding="utf-8")


@pytest.fixture
def site(tmp_path):
    _page(tmp_path / "index.html", "<a href='tasks/one.html#steps'>one</a>")
    _page(tmp_path / "tasks" / "one.html", "<h2 id='steps'>Steps</h2><a href='../index.html'>home</a>")
    _page(tmp_path / "404.html", "<a href='/index.html'>home</a>")  # absolute from the server's root
    return tmp_path


def test_every_page_but_the_servers_404_is_opened_index_first(site):
    assert [p.relative_to(site).as_posix() for p in docs_site.site_pages(site)] == ["index.html", "tasks/one.html"]


def test_a_whole_site_passes(site, browser, capsys):
    assert docs_site.main([str(site)]) == 0
    assert "2 pages checked" in capsys.readouterr().out


def test_a_broken_link_on_any_page_fails_and_is_named(site, browser, capsys):
    _page(site / "tasks" / "one.html", "<a href='../index.html'>home</a><a href='two.html'>two</a>")
    assert docs_site.main([str(site)]) == 1
    out = capsys.readouterr().out
    assert "tasks/one.html" in out and "missing file" in out and "two.html" in out


def test_a_fragment_the_target_page_lacks_fails(site, browser, capsys):
    _page(site / "index.html", "<a href='tasks/one.html#no-such-section'>one</a>")
    assert docs_site.main([str(site)]) == 1
    assert "no-such-section" in capsys.readouterr().out


def test_a_directory_without_a_site_is_an_error(tmp_path, capsys):
    assert docs_site.main([str(tmp_path)]) == 1
    assert "no index.html" in capsys.readouterr().out
    assert docs_site.main([]) == 2
