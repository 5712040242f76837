"""The README is the front door and docs/ the reference: every public name is documented in the API
reference, every relative link (and anchor) resolves, every page is one link from the README and says
first what it answers, and the README stays a few screens long."""

import re
from pathlib import Path

import pytest

import tpu_lab

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not (m := re.match(r"#{1,6} (.+)", line)):
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)  # code blocks hold no links
    return [a or b for a, b in LINK.findall(text)]


@pytest.mark.parametrize("name", tpu_lab.__all__)
def test_every_public_name_is_in_the_api_reference(name):
    text = (DOCS / "api.md").read_text()
    assert re.search(rf"`tl\.{re.escape(name)}`", text), f"docs/api.md does not document tl.{name}"


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    assert broken == [], f"{page.name}: links that lead nowhere"


def test_every_reference_page_is_one_link_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(README) if t.startswith("docs/")}
    assert sorted(p.name for p in PAGES if p.resolve() not in linked) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_page_says_first_what_it_answers(page):
    title, blank, first, *_ = page.read_text().splitlines()
    assert title.startswith("# ") and not blank and first and not first.startswith(("#", "```", "|", "-"))


def test_the_readme_fits_on_a_few_screens():
    assert len(README.read_text().splitlines()) < 200


def test_the_readme_keeps_the_blocks_ci_and_binder_run():
    text = README.read_text()
    for marker in ("test-command", "laptop-torch", "demo-command", "notebook-env"):
        assert re.search(rf"^<!-- {marker}: .*-->\n```bash\n", text, re.M), marker


def test_the_link_check_sees_broken_links_and_anchors(tmp_path):
    page = tmp_path / "a.md"
    page.write_text("# A page\n\nSee [b](b.md), [here](#a-page), [gone](#nowhere) and [c](c.md#x).\n")
    (tmp_path / "c.md").write_text("# C\n\n## X\n")
    assert links(page) == ["b.md", "#a-page", "#nowhere", "c.md#x"]
    assert anchors(page) == {"a-page"} and anchors(tmp_path / "c.md") == {"c", "x"}
