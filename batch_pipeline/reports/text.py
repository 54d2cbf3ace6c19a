"""Reports laid out for a terminal: aligned columns, times to the second in UTC, and every
value printable: a name holding a newline or an escape sequence cannot split a line or
reach the terminal raw."""

import unicodedata
from datetime import UTC, datetime

# what a terminal must not get raw: C0 and C1 controls, and Unicode's format characters
# (Cf: bidi overrides and isolates such as U+202E, zero-width ones) and line and paragraph
# separators (U+2028, U+2029), which can reorder, hide or split what is printed
_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp"})


def printable(value: object) -> str:
    """`value` as text with every control, format and separator character escaped (`\\n`,
    `\\x1b`, `\\u202e`)."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(repr(c)[1:-1] if unicodedata.category(c) in _HIDDEN else c for c in text)


def text(value: object) -> str:
    """A value as a text table shows it: times to the second in UTC, "-" for a missing one."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return printable(value)


def table_lines(columns: list[tuple[str, str]], rows: list[dict]) -> list[str]:
    """Aligned columns (key, heading) of `rows`; "-" for a missing value."""
    table = [[h for _, h in columns]] + [[text(r[k]) for k, _ in columns] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in table
    ]


def table_summary(r: dict[str, object]) -> str:
    """A table's doctor figures (`VectorStore.table_health`) in words."""
    return (
        f"rows {r['table_rows']}, version {r['table_version']}, "
        f"{r['table_versions']} versions, {r['table_fragments']} fragments"
    )


def doctor_line(report: dict[str, object], *figures: str) -> str:
    """A product's doctor verdict and its figures, in one line (its problems follow it)."""
    verdict = "healthy" if report["healthy"] else "PROBLEMS"
    return "; ".join([f"{report['product']}: {verdict}", *figures])


def generations_line(report: dict[str, object]) -> str:
    """A product's status line on its generations: the live one readers use, and the state
    (and last decision, where given) of the current configuration's."""
    decision = report.get("generation_decision")
    return (
        f"  live generation {report['live_table'] or '(none)'}; this configuration's generation "
        f"{report['generation']} is {report['generation_state']}"
        + (f" ({decision})" if decision else "")
    )
