"""The README stays a front door: short, linking every page under docs/, and every link it
or a page holds points at a page that exists."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted((REPO / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")


def test_the_readme_is_short_and_links_every_page():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 300
    linked = {Path(target).name for target in LINK.findall(readme)}
    assert PAGES and linked >= {page.name for page in PAGES}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_each_page_opens_with_what_a_reader_can_do_and_its_links_resolve(page):
    lines = page.read_text().splitlines()
    assert lines[0].startswith("# ") and lines[2].startswith(("Use this page", "Read this"))
    for target in LINK.findall(page.read_text()):
        assert (page.parent / target).is_file(), f"{page.name} links to a missing {target}"
