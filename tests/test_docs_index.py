"""docs/README.md is the index: every page of docs/ is in exactly one of its four parts
(concepts, tutorial, how-to, reference), the README's documentation section names the same
pages in the same parts, and every relative link in README.md and docs/ leads to a file."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PARTS = ("Concepts", "Tutorial", "How-to", "Reference")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
FENCED = re.compile(r"^```.*?^```", re.M | re.S)


def pages_by_part(text: str, heading: str) -> dict[str, list[str]]:
    """{part: [page file names]} from `## Part` sections (docs/README.md) or `- **Part**` items."""
    out: dict[str, list[str]] = {}
    for part in PARTS:
        found = re.search(heading.format(re.escape(part)) + r"(.*?)(?=\n## |\n- \*\*|\Z)", text, re.S)
        assert found, f"no part {part!r}"
        out[part] = [Path(link).name for link in LINK.findall(found.group(1)) if link.endswith(".md")]
    return out


def test_every_page_is_in_exactly_one_part_of_the_index() -> None:
    parts = pages_by_part((DOCS / "README.md").read_text(), r"\n## {}\n")
    listed = [page for pages in parts.values() for page in pages]
    assert sorted(listed) == sorted(p.name for p in DOCS.glob("*.md") if p.name != "README.md")
    assert len(listed) == len(set(listed)), "a page is in two parts"
    assert parts["Tutorial"] == ["tutorial.md"] and "concepts.md" in parts["Concepts"]


def test_the_readme_names_the_same_pages_in_the_same_parts() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Documentation") : readme.index("## Development")]
    assert "(docs/README.md)" in section
    assert pages_by_part(section, r"- \*\*{}\*\*") == pages_by_part((DOCS / "README.md").read_text(), r"\n## {}\n")


def test_every_relative_link_leads_to_a_file() -> None:
    broken = []
    for page in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        for link in LINK.findall(FENCED.sub("", page.read_text())):
            if "://" in link or link.startswith("mailto:"):
                continue
            if not (page.parent / link).exists():
                broken.append(f"{page.relative_to(ROOT)}: {link}")
    assert not broken, broken
