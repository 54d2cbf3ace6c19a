"""The links documents already carry, as related documents' labelled set: for every Markdown
page of a folder, the pages its "Related articles" section links to, as one JSONL line
`{"doc_id": ..., "related": [...]}` (doc ids: paths relative to the folder, as a filesystem
source names them; links outside the folder or to other files are left out).

    python -m batch_pipeline.related.links data/handbook [--heading "Related articles"]
        > data/handbook_related.jsonl
"""

import argparse
import json
import posixpath
import re
import sys
from pathlib import Path

LINK = re.compile(r"\[[^\]]*\]\(([^)\s#]+)(?:#[^)]*)?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def section_links(text: str, heading: str) -> list[str]:
    """The link targets under the first heading called `heading` (any level, any case), up to
    the next heading of its level or above."""
    found, level = [], None
    for line in text.splitlines():
        match = HEADING.match(line)
        if match:
            depth = len(match[1])
            if level is not None and depth <= level:
                break
            if level is None and match[2].strip().lower() == heading.lower():
                level = depth
            continue
        if level is not None:
            found += LINK.findall(line)
    return found


def folder_links(folder: Path, heading: str = "Related articles") -> dict[str, list[str]]:
    """Each page's related pages in `folder` (see the module docstring)."""
    pages = {p.relative_to(folder).as_posix() for p in folder.rglob("*.md")}
    links: dict[str, list[str]] = {}
    for page in sorted(pages):
        text = (folder / page).read_text(encoding="utf-8", errors="replace")
        targets = []
        for target in section_links(text, heading):
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(page), target))
            if resolved in pages and resolved != page and resolved not in targets:
                targets.append(resolved)
        if targets:
            links[page] = targets
    return links


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--heading", default="Related articles")
    args = parser.parse_args(argv)
    for doc_id, related in folder_links(args.folder, args.heading).items():
        sys.stdout.write(json.dumps({"doc_id": doc_id, "related": related}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
