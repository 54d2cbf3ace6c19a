"""Turning Markdown, reStructuredText, HTML and plain text into clean, sectioned text.

`parse_document()` returns the title and the sections in document order. A section is the text
under one heading path (for example `("Account", "Password reset")`); markup is removed, but the
paragraph structure is kept so the chunker can cut at paragraph and sentence boundaries.
"""

import re
import unicodedata
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import PurePosixPath

import yaml

FORMATS = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".mdx": "markdown",
    ".rst": "rst",
    ".rest": "rst",
    ".html": "html",
    ".htm": "html",
}


@dataclass
class Section:
    headings: tuple[str, ...]
    text: str


@dataclass
class ParsedDocument:
    title: str
    sections: list[Section] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)  # Markdown front matter


def detect_format(doc_id: str) -> str:
    """The document's format from its name: markdown, rst, html or text."""
    return FORMATS.get(PurePosixPath(doc_id).suffix.lower(), "text")


def fallback_title(doc_id: str) -> str:
    stem = PurePosixPath(doc_id).stem or doc_id
    return re.sub(r"[-_]+", " ", stem).strip().capitalize() or doc_id


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SPACES = re.compile(r"[ \t\u00a0]+")
_BLANKS = re.compile(r"\n{3,}")


def clean_text(text: str) -> str:
    """Unicode NFC, no control characters, single spaces, at most one blank line in a row."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


class _SectionBuilder:
    """Collects lines under a stack of headings and emits non-empty sections."""

    def __init__(self) -> None:
        self.stack: list[tuple[int, str]] = []
        self.lines: list[str] = []
        self.sections: list[Section] = []

    def flush(self) -> None:
        text = clean_text("\n".join(self.lines))
        if text:
            self.sections.append(Section(tuple(h for _, h in self.stack), text))
        self.lines = []

    def heading(self, level: int, text: str) -> None:
        self.flush()
        while self.stack and self.stack[-1][0] >= level:
            self.stack.pop()
        text = clean_text(text)
        if text:
            self.stack.append((level, text))

    def line(self, text: str) -> None:
        self.lines.append(text)


# ---------------------------------------------------------------------------- Markdown

_MD_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_MD_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_MD_REFLINK = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")
_MD_AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
_MD_CODE = re.compile(r"`+([^`]*)`+")
_MD_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_MD_EM = re.compile(r"(?<![\w*])([*_])(?=\S)(.+?)(?<=\S)\1(?![\w*])")
_HTML_TAG = re.compile(r"</?[A-Za-z][^>]*>")
_MD_ATX = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_MD_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_MD_RULE = re.compile(r"^ {0,3}([-*_])(\s*\1){2,}\s*$")
_MD_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_MD_LINKDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s+\S+")


def _md_inline(text: str) -> str:
    text = _MD_IMAGE.sub(r"\1", text)
    text = _MD_LINK.sub(r"\1", text)
    text = _MD_REFLINK.sub(r"\1", text)
    text = _MD_AUTOLINK.sub(r"\1", text)
    text = _MD_CODE.sub(r"\1", text)
    text = _HTML_TAG.sub("", text)
    text = _MD_STRONG.sub(r"\2", text)
    return _MD_EM.sub(r"\2", text)


def _split_front_matter(text: str) -> tuple[dict, str]:
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---", 4)
    if end < 0:
        return {}, text
    try:
        meta = yaml.safe_load(text[4:end])
    except yaml.YAMLError:
        meta = None
    rest = text[end + 4 :].split("\n", 1)
    return (meta if isinstance(meta, dict) else {}), (rest[1] if len(rest) > 1 else "")


def _parse_markdown(text: str) -> tuple[str | None, list[Section]]:
    meta, body = _split_front_matter(text)
    title = str(meta["title"]).strip() if meta.get("title") else None
    builder = _SectionBuilder()
    lines = body.split("\n")
    fence: str | None = None
    for i, raw in enumerate(lines):
        if fence is not None:
            if raw.lstrip().startswith(fence):
                fence = None
                builder.line("")
            else:
                builder.line(raw)
            continue
        fence_match = _MD_FENCE.match(raw)
        if fence_match:
            fence = fence_match.group(1)
            builder.line("")
            continue
        atx = _MD_ATX.match(raw)
        if atx:
            level, heading = len(atx.group(1)), _md_inline(atx.group(2))
            if title is None and level == 1:
                title = clean_text(heading)
            builder.heading(level, heading)
            continue
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if raw.strip() and re.match(r"^ {0,3}(=+|-+)\s*$", following) and not _MD_RULE.match(raw):
            level = 1 if following.strip().startswith("=") else 2
            heading = _md_inline(raw.strip())
            if title is None and level == 1:
                title = clean_text(heading)
            builder.heading(level, heading)
            lines[i + 1] = ""  # the underline is consumed
            continue
        if _MD_RULE.match(raw) or _MD_TABLE_SEP.match(raw) or _MD_LINKDEF.match(raw):
            builder.line("")
            continue
        line = re.sub(r"^ {0,3}>\s?", "", raw)  # block quotes
        if line.strip().startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            line = " | ".join(c for c in cells if c)
        builder.line(_md_inline(line))
    builder.flush()
    return title, builder.sections


# ----------------------------------------------------------------- reStructuredText

_RST_ADORNMENT = re.compile(r"^([=\-`:'\"~^_*+#<>.])\1{2,}\s*$")
_RST_LINK = re.compile(r"`([^`<]+?)\s*<[^>]+>`_{1,2}")
_RST_ROLE = re.compile(r":[\w-]+:`([^`]+)`")
_RST_LITERAL = re.compile(r"``(.+?)``")
_RST_REF = re.compile(r"`([^`]+)`_{0,2}")
_RST_STRONG = re.compile(r"\*\*(.+?)\*\*")
_RST_EM = re.compile(r"(?<!\w)\*(.+?)\*(?!\w)")
_RST_DIRECTIVE = re.compile(r"^\.\.\s+([\w-]+)::(.*)$")


def _rst_inline(text: str) -> str:
    text = _RST_LINK.sub(r"\1", text)
    text = _RST_ROLE.sub(r"\1", text)
    text = _RST_LITERAL.sub(r"\1", text)
    text = _RST_REF.sub(r"\1", text)
    text = _RST_STRONG.sub(r"\1", text)
    return _RST_EM.sub(r"\1", text)


def _parse_rst(text: str) -> tuple[str | None, list[Section]]:
    builder = _SectionBuilder()
    styles: list[tuple[str, bool]] = []
    title: str | None = None
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        raw = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        overline = bool(_RST_ADORNMENT.match(raw)) and i + 2 < len(lines)
        if overline and raw.strip() and lines[i + 2].strip() == raw.strip() and nxt.strip():
            style, heading, step = (raw.strip()[0], True), nxt.strip(), 3
        elif (
            raw.strip()
            and not _RST_ADORNMENT.match(raw)
            and _RST_ADORNMENT.match(nxt)
            and len(nxt.strip()) >= len(raw.strip())
        ):
            style, heading, step = (nxt.strip()[0], False), raw.strip(), 2
        else:
            style = None
        if style is not None:
            if style not in styles:
                styles.append(style)
            level = styles.index(style) + 1
            heading = _rst_inline(heading)
            if title is None:
                title = clean_text(heading)
            builder.heading(level, heading)
            i += step
            continue
        directive = _RST_DIRECTIVE.match(raw.strip())
        if directive:
            name = directive.group(1)
            # Keep code and admonition bodies; drop images, tocs and other structure.
            if name not in {"code-block", "code", "note", "warning", "tip", "important"}:
                i += 1
                while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                    if (
                        not lines[i].strip()
                        and i + 1 < len(lines)
                        and not lines[i + 1].startswith(" ")
                    ):
                        break
                    i += 1
                continue
            builder.line(_rst_inline(directive.group(2)))
        elif raw.strip().startswith(":") and re.match(r"^\s*:[\w -]+:", raw):
            pass  # field lists and directive options
        elif raw.strip() == "::":
            builder.line("")
        else:
            builder.line(_rst_inline(raw.rstrip(":") if raw.endswith("::") else raw))
        i += 1
    builder.flush()
    return title, builder.sections


# --------------------------------------------------------------------------- HTML

_HTML_BLOCKS = {
    "p",
    "div",
    "li",
    "ul",
    "ol",
    "br",
    "tr",
    "table",
    "section",
    "article",
    "pre",
    "blockquote",
    "dd",
    "dt",
    "dl",
    "header",
    "footer",
    "main",
    "nav",
    "aside",
    "hr",
    "figure",
    "figcaption",
    "form",
    "td",
    "th",
}
_HTML_SKIP = {"script", "style", "head", "noscript", "template", "svg"}


class _HTMLSections(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.builder = _SectionBuilder()
        self.title: str | None = None
        self.first_h1: str | None = None
        self._skip_depth = 0
        self._in_title = False
        self._heading: tuple[int, list[str]] | None = None
        self._current: list[str] = []

    def handle_starttag(self, tag: str, attrs) -> None:  # noqa: ANN001
        if tag in _HTML_SKIP:
            self._skip_depth += 1
        if tag == "title":
            self._in_title = True
        if len(tag) == 2 and tag[0] == "h" and tag[1] in "123456":
            self._newline()
            self._heading = (int(tag[1]), [])
        elif tag in _HTML_BLOCKS:
            self._newline(paragraph=tag not in {"br", "td", "th", "li"})

    def handle_endtag(self, tag: str) -> None:
        if tag in _HTML_SKIP and self._skip_depth:
            self._skip_depth -= 1
        if tag == "title":
            self._in_title = False
        if self._heading and len(tag) == 2 and tag[0] == "h" and tag[1] in "123456":
            level, parts = self._heading
            text = clean_text(" ".join(parts))
            self._heading = None
            if level == 1 and self.first_h1 is None:
                self.first_h1 = text
            self.builder.heading(level, text)
        elif tag in _HTML_BLOCKS:
            self._newline(paragraph=tag not in {"td", "th", "li"})

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title = clean_text((self.title or "") + " " + data)
            return
        if self._skip_depth:
            return
        if self._heading is not None:
            self._heading[1].append(data)
        else:
            self._current.append(data)

    def _newline(self, paragraph: bool = True) -> None:
        if self._current:
            self.builder.line(" ".join("".join(self._current).split()))
            self._current = []
        if paragraph:
            self.builder.line("")

    def finish(self) -> tuple[str | None, list[Section]]:
        self.close()
        self._newline()
        self.builder.flush()
        return self.title or self.first_h1, self.builder.sections


def _parse_html(text: str) -> tuple[str | None, list[Section]]:
    parser = _HTMLSections()
    parser.feed(text)
    return parser.finish()


def _parse_text(text: str) -> tuple[str | None, list[Section]]:
    cleaned = clean_text(text)
    return None, ([Section((), cleaned)] if cleaned else [])


_PARSERS = {
    "markdown": _parse_markdown,
    "rst": _parse_rst,
    "html": _parse_html,
    "text": _parse_text,
}


def parse_document(text: str, doc_id: str, fmt: str | None = None) -> ParsedDocument:
    """Normalise one document into its title and sections."""
    fmt = fmt or detect_format(doc_id)
    title, sections = _PARSERS[fmt](text)
    metadata = _split_front_matter(text)[0] if fmt == "markdown" else {}
    return ParsedDocument(
        title=title or fallback_title(doc_id), sections=sections, metadata=metadata
    )
