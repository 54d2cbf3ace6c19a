"""Reports laid out for a terminal: aligned columns, times to the second in UTC."""

from datetime import UTC, datetime


def text(value: object) -> str:
    """A value as a text table shows it: times to the second in UTC, "-" for a missing one."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return str(value)


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
