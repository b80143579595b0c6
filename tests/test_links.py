"""Links between exported pages (labkit.suite.links): notebook links turned into links to the
pages beside them, and the link checker, on synthetic folders and on a real export of two
suite notebooks (CPU)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labkit.support.paths import repo_root
from labkit.suite import links, report, slides
from labkit.suite.runner import run_suite


def page(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<!DOCTYPE html><html><head></head><body>{body}</body></html>",
                    encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- the checker


def test_checker_finds_a_planted_broken_link_and_src(tmp_path: Path) -> None:
    page(tmp_path / "assets" / "x.js", "")
    page(tmp_path / "b.html", '<h2 id="intro">Intro</h2>')
    a = page(tmp_path / "a.html",
             '<script src="assets/x.js"></script><a href="b.html">b</a>'
             '<a href="b.html#intro">b intro</a><a href="#top">top</a><p id="top"></p>'
             '<a href="#/3">slide 4</a><a href="https://example.org/x.ipynb">remote</a>'
             '<a href="mailto:a@b.c">mail</a><img src="data:image/png;base64,AAAA">')
    assert links.check_links(tmp_path) == []

    a.write_text(a.read_text().replace("</body>", '<a href="04_next.ipynb">Next</a>'
                                       '<img src="missing.png"><a href="b.html#nowhere">x</a>'
                                       '<a href="#gone">y</a></body>'))
    broken = links.check_links(tmp_path)
    assert sorted(b.target for b in broken) == ["#gone", "04_next.ipynb", "b.html#nowhere",
                                                "missing.png"]
    assert all(b.page == a for b in broken)
    assert "4 broken link(s)" in links.summary(broken)


def test_checker_leaves_the_assets_pages_out(tmp_path: Path) -> None:
    page(tmp_path / "assets" / "reveal.js" / "demo.html", '<a href="nowhere.html">x</a>')
    page(tmp_path / "a.html", "<p>no links</p>")
    assert [p.name for p in links.pages_of(tmp_path)] == ["a.html"]
    assert links.check_links(tmp_path) == []


# ----------------------------------------------------------------------------- relinking


def test_notebook_links_go_to_the_page_beside_or_become_plain_text(tmp_path: Path) -> None:
    page(tmp_path / "04_b.html", '<h2 id="2.-Two">Two</h2>')
    a = page(tmp_path / "03_a.html",
             '<p><a href="04_b.ipynb#2.-Two">04 · B</a>, '
             '<a href="05_c.ipynb"><em>05</em> C</a>, '
             '<a href="../README.md#notebooks">the README</a>, '
             '<a href="solutions/03_a.ipynb">solution</a>, '
             '<a href="https://example.org/04_b.ipynb">remote</a></p>')
    changed = links.relink_page(a, links.slide_page_candidates, missing="not in these slides")
    text = a.read_text()
    assert changed == 4
    assert '<a href="04_b.html#2.-Two">04 · B</a>' in text
    assert "https://example.org/04_b.ipynb" in text  # not relative: left alone
    assert "(not in these slides)" in text and "<em>05</em> C" in text
    assert "(README.md in the repository)" in text
    assert "(notebooks/solutions/03_a.ipynb in the repository)" in text
    assert links.check_links(tmp_path) == []

    # a later export writes 05_c's page: the plain text becomes a link again
    page(tmp_path / "05_c.html", "")
    assert links.relink_page(a, links.slide_page_candidates, missing="x") == 1
    assert '<a href="05_c.html"><em>05</em> C</a>' in a.read_text()
    assert links.relink_page(a, links.slide_page_candidates, missing="x") == 0


def test_decks_link_decks_without_the_fragment(tmp_path: Path) -> None:
    page(tmp_path / "04_b.slides.html", "")
    page(tmp_path / "04_b.html", "")
    deck = page(tmp_path / "03_a.slides.html", '<a href="04_b.ipynb#3.-Three">Next</a>')
    links.relink_page(deck, links.deck_candidates, missing="not in these slides")
    assert '<a href="04_b.slides.html">Next</a>' in deck.read_text()


def test_run_pages_fall_back_to_the_executed_notebook(tmp_path: Path) -> None:
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "04_b.ipynb").write_text("{}")
    a = page(tmp_path / "html" / "03_a.html", '<a href="04_b.ipynb">04</a>')
    assert report.relink_run_pages(tmp_path) == 1
    assert '<a href="../notebooks/04_b.ipynb">04</a>' in a.read_text()


# ----------------------------------------------------------------------------- a real export


STEMS = ("03_capture_replay", "04_shared_pools")


def _hrefs(path: Path) -> list[str]:
    return re.findall(r'<a\b[^>]*href="([^"]*)"', path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """Notebooks 03 and 04 run on the CPU tier with ``labkit run``'s engine."""
    out = tmp_path_factory.mktemp("links-run")
    nbs = [str(repo_root() / "notebooks" / f"{s}.ipynb") for s in STEMS]
    res = run_suite(nbs, out_root=out, timeout=600)
    assert res.ok, res.record
    return res


@pytest.mark.slow
def test_a_real_run_folder_has_no_broken_link(real_run) -> None:
    run_dir = real_run.run_dir
    assert real_run.broken_links == [] and links.check_links(run_dir) == []
    assert not [n for n in real_run.notes if "broken link" in n]
    first, second = (run_dir / "html" / f"{s}.html" for s in STEMS)
    assert "04_shared_pools.html" in _hrefs(first)  # Next: the run page beside it
    assert not [h for h in _hrefs(first) + _hrefs(second) if h.endswith(".ipynb")]
    assert f"({report.NOT_IN_RUN})" in second.read_text(encoding="utf-8")  # 05 is not in it


@pytest.mark.slow
def test_real_slides_have_no_broken_link(real_run, tmp_path: Path) -> None:
    from test_slides import web_assets_or_skip

    web_assets_or_skip()
    res = slides.export_slides(real_run.run_dir, tmp_path / "slides", list(STEMS))
    assert res.broken_links == [] and links.check_links(tmp_path / "slides") == []
    deck = tmp_path / "slides" / f"{STEMS[0]}.slides.html"
    assert "04_shared_pools.slides.html" in _hrefs(deck)
    # exercise checks' lines and the hints stay off the decks
    for name in STEMS:
        text = (tmp_path / "slides" / f"{name}.slides.html").read_text(encoding="utf-8")
        assert "not answered yet" not in text and "<details" not in text
