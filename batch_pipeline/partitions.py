"""Print partition keys, one per line (used by `make demo`).

python -m batch_pipeline.partitions                  # the collections' partitions
python -m batch_pipeline.partitions --ticket-days 7  # the newest 7 days with an export
"""

import argparse
from datetime import date

from batch_pipeline.config import PipelineConfig, load_config


def ticket_days(config: PipelineConfig, newest: int, today: date | None = None) -> list[str]:
    """The newest `newest` days, up to yesterday, whose ticket export is there; oldest first."""
    from batch_pipeline.tickets.exports import make_export
    from batch_pipeline.tickets.product import due_days

    settings = config.tickets
    if settings is None:
        return []
    export = make_export(settings.source, settings.timezone)
    found: list[str] = []
    for day in reversed(due_days(settings, today)):  # newest first, until enough are found
        if len(found) == newest:
            break
        if export.has_day(date.fromisoformat(day)):
            found.append(day)
    return found[::-1]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m batch_pipeline.partitions")
    parser.add_argument("--ticket-days", type=int, help="the newest N days with a ticket export")
    args = parser.parse_args()
    config = load_config()
    keys = (
        config.partition_keys()
        if args.ticket_days is None
        else ticket_days(config, args.ticket_days)
    )
    print("\n".join(keys))
