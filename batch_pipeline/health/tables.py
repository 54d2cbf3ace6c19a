"""A generation's table that lost a data file, as every product's `doctor` reports it and
`repair` mends it: which file is gone, the newest version whose every file reads, and the
command that restores it."""

from batch_pipeline.state.vector_store import TableDamagedError, VectorStore


def repair_command(product: str, rebuild: bool = False) -> str:
    return f"batch-pipeline repair --product {product}{' --rebuild' if rebuild else ''} --yes"


def damage_report(store: VectorStore, table: str, product: str, missing: str) -> dict:
    """What `doctor` says of `table`, of `product`, whose data file `missing` is gone: the
    problem with its remedy, and the newest whole version (None: none)."""
    whole = store.newest_whole_version(table)
    remedy = (
        f"`{repair_command(product)}` restores version {whole}, the newest whole one; the next "
        "full run then re-lands what it lacks"
        if whole is not None
        else f"no version of it is whole: `{repair_command(product, rebuild=True)}` drops it, "
        "and the next full run rebuilds it from the source"
    )
    return {
        "table_damaged": missing,
        "newest_whole_version": whole,
        "problem": f"{TableDamagedError(missing).args[0].split(';')[0]}; {remedy}",
    }


def table_damage(store: VectorStore, table: str | None, product: str) -> dict | None:
    """`damage_report` for `table` when a scan finds a data file of it gone, else None."""
    if table is None:
        return None
    missing = store.damage(table)
    return None if missing is None else damage_report(store, table, product, missing)
