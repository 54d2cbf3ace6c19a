"""Print partition keys, one per line (used by `make demo`).

python -m batch_pipeline.partitions                  # the collections' partitions
python -m batch_pipeline.partitions --ticket-days 7  # the newest 7 days with an export
"""

import argparse
from datetime import date, timedelta

from batch_pipeline.config import PipelineConfig, load_config


def ticket_days(config: PipelineConfig, newest: int, today: date | None = None) -> list[str]:
    """The newest `newest` days, up to yesterday, whose ticket export is there; oldest first."""
    from batch_pipeline.tickets.exports import make_export

    settings = config.tickets
    if settings is None:
        return []
    export = make_export(settings.source, settings.timezone)
    day = (today or date.today()) - timedelta(days=1)
    first = date.fromisoformat(settings.start_date)
    found: list[str] = []
    while day >= first and len(found) < newest:
        if export.has_day(day):
            found.append(day.isoformat())
        day -= timedelta(days=1)
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
